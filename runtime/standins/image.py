"""Images for the torchvision stand-in: Pillow's when it is importable, else a small image type of our own.

Data sets hand images to transforms, and scripts look at them (``img.size``,
``img.mode``, ``np.array(img)``); CI machines may have neither torchvision nor
Pillow. ``Image`` covers what tutorials touch; ``to_hwc`` and ``new_image``
convert between it, PIL images, numpy arrays and uint8 tensors (H x W x C).
"""

from __future__ import annotations

import numbers
import os
import struct
import zlib
from typing import Any, SupportsInt, cast

import torch

BANDS = {"L": 1, "RGB": 3, "RGBA": 4}
_PIL: list[Any] = []  # PIL.Image once looked for (None: no Pillow)


def pil():
    """PIL.Image, or None when Pillow is not installed."""
    if not _PIL:
        try:
            from PIL import Image as PILImage  # an optional package, looked for once
        except Exception:  # absent, or a broken build
            PILImage = None
        _PIL.append(PILImage)
    return _PIL[0]


def is_numpy_array(x) -> bool:
    """A numpy array (told without importing numpy)."""
    return type(x).__module__ == "numpy" and hasattr(x, "shape")


def size_pair(size) -> tuple:
    """A transform's size argument (a number, or a sequence of one or two) as (height, width)."""
    if isinstance(size, numbers.Number):
        n = int(cast(SupportsInt, size))  # a Number that int() takes (the stubs' Number promises no __int__)
        return n, n
    size = list(size)
    return (int(size[0]), int(size[0])) if len(size) == 1 else (int(size[0]), int(size[1]))


def mode_for(channels: int) -> str:
    return {1: "L", 3: "RGB", 4: "RGBA"}.get(channels, "RGB")


class Image:
    """An 8-bit image (L, RGB or RGBA) held as a uint8 tensor H x W x C."""

    FLIP_LEFT_RIGHT, FLIP_TOP_BOTTOM, ROTATE_90, ROTATE_180, ROTATE_270 = 0, 1, 2, 3, 4
    NEAREST, BOX, BILINEAR, HAMMING, BICUBIC, LANCZOS = 0, 4, 2, 5, 3, 1

    def __init__(self, pixels: torch.Tensor, mode: str | None = None):
        if pixels.dim() == 2:
            pixels = pixels.unsqueeze(-1)
        self._pixels = pixels.to(torch.uint8).contiguous()
        self.mode = mode or mode_for(self._pixels.shape[-1])
        self.info: dict = {}
        self.format = None

    # --- what scripts read ---------------------------------------------------------------
    @property
    def size(self):
        return (int(self._pixels.shape[1]), int(self._pixels.shape[0]))

    @property
    def width(self):
        return self.size[0]

    @property
    def height(self):
        return self.size[1]

    def getbands(self):
        return tuple(self.mode)

    def __array__(self, dtype=None, copy=None):
        a = self._pixels.numpy()
        a = a[:, :, 0] if self.mode == "L" else a
        return a.astype(dtype) if dtype is not None else a.copy()

    def tobytes(self, *args):
        return bytes(self._pixels.reshape(-1).tolist())

    def __repr__(self):
        return f"<cpu2gpu stand-in Image mode={self.mode} size={self.size[0]}x{self.size[1]}>"

    # --- what scripts do with them -------------------------------------------------------
    def copy(self):
        return Image(self._pixels.clone(), self.mode)

    def convert(self, mode=None, *args, **kwargs):
        mode = mode or self.mode
        if mode == self.mode:
            return self.copy()
        if mode not in BANDS:
            raise ValueError(f"conversion to mode {mode!r} is not supported by the stand-in image")
        return Image(_convert(self._pixels, self.mode, mode), mode)

    def resize(self, size, resample=None, *args, **kwargs):
        w, h = size
        return Image(resize_hwc(self._pixels, int(h), int(w)), self.mode)

    def crop(self, box=None):
        if box is None:
            return self.copy()
        left, top, right, bottom = (int(round(v)) for v in box)
        return Image(crop_hwc(self._pixels, top, left, bottom - top, right - left), self.mode)

    def transpose(self, method):
        p = self._pixels
        if method == self.FLIP_LEFT_RIGHT:
            p = p.flip(1)
        elif method == self.FLIP_TOP_BOTTOM:
            p = p.flip(0)
        elif method in (self.ROTATE_90, self.ROTATE_180, self.ROTATE_270):
            p = torch.rot90(p, {self.ROTATE_90: 1, self.ROTATE_180: 2, self.ROTATE_270: 3}[method], (0, 1))
        return Image(p.contiguous(), self.mode)

    def rotate(self, angle, *args, **kwargs):
        # Quarter turns are exact; other angles keep the image as it is (only shapes matter here).
        turns = int(round(angle / 90.0))
        if abs(angle - 90 * turns) < 1e-6 and self._pixels.shape[0] == self._pixels.shape[1]:
            return Image(torch.rot90(self._pixels, turns % 4, (0, 1)).contiguous(), self.mode)
        return self.copy()

    def save(self, fp, format=None, **params):
        write_png(fp, self._pixels)

    def show(self, *args, **kwargs):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _convert(p: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    if src == "L":
        rgb = p.expand(-1, -1, 3)
    elif src == "RGBA":
        rgb = p[:, :, :3]
    else:
        rgb = p
    if dst == "L":
        # ITU-R 601-2 luma, as Pillow computes it
        f = rgb.to(torch.int32)
        return ((f[:, :, 0] * 299 + f[:, :, 1] * 587 + f[:, :, 2] * 114 + 500) // 1000).to(torch.uint8).unsqueeze(-1)
    if dst == "RGBA":
        return torch.cat([rgb, torch.full_like(rgb[:, :, :1], 255)], dim=2).contiguous()
    return rgb.contiguous()


def resize_hwc(p: torch.Tensor, h: int, w: int) -> torch.Tensor:
    if (h, w) == tuple(p.shape[:2]):
        return p.clone()
    x = p.permute(2, 0, 1).unsqueeze(0).to(torch.float32)
    y = torch.nn.functional.interpolate(x, size=(h, w), mode="bilinear", align_corners=False, antialias=True)
    return y.squeeze(0).permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8).contiguous()


def crop_hwc(p: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """Like PIL's crop: the parts of the box outside the image are black."""
    out = torch.zeros(max(0, height), max(0, width), p.shape[2], dtype=p.dtype)
    H, W = p.shape[:2]
    t0, l0 = max(top, 0), max(left, 0)
    t1, l1 = min(top + height, H), min(left + width, W)
    if t1 > t0 and l1 > l0:
        out[t0 - top:t1 - top, l0 - left:l1 - left] = p[t0:t1, l0:l1]
    return out


# --- conversions ------------------------------------------------------------------------

def is_image(x) -> bool:
    P = pil()
    return isinstance(x, Image) or (P is not None and isinstance(x, P.Image))


def to_hwc(img):
    """(uint8 tensor H x W x C, mode) of a stand-in image, a PIL image or a uint8 numpy array."""
    if isinstance(img, Image):
        return img._pixels, img.mode
    P = pil()
    if P is not None and isinstance(img, P.Image):
        if img.mode not in BANDS:
            img = img.convert("RGB")
        w, h = img.size
        raw = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8)
        return raw.reshape(h, w, BANDS[img.mode]), img.mode
    if hasattr(img, "__array_interface__") or hasattr(img, "shape"):
        t = torch.as_tensor(img)
        if t.dim() == 2:
            t = t.unsqueeze(-1)
        if t.dtype != torch.uint8:
            t = (t.to(torch.float32) * (255.0 if t.is_floating_point() else 1.0)).round().clamp(0, 255)
            t = t.to(torch.uint8)
        return t.contiguous(), mode_for(t.shape[-1])
    raise TypeError(f"expected an image or an ndarray, got {type(img).__name__}")


def new_image(hwc: torch.Tensor, mode: str | None = None):
    """A PIL image when Pillow is here, else the stand-in type."""
    if hwc.dim() == 2:
        hwc = hwc.unsqueeze(-1)
    mode = mode or mode_for(hwc.shape[-1])
    P = pil()
    if P is None:
        return Image(hwc, mode)
    hwc = hwc.to(torch.uint8).contiguous()
    h, w = int(hwc.shape[0]), int(hwc.shape[1])
    return P.frombytes(mode, (w, h), bytes(hwc.reshape(-1).tolist()) if not _np() else hwc.numpy().tobytes())


def _np() -> bool:
    try:
        import numpy  # noqa: F401  (an optional package)
    except ImportError:
        return False
    return True


# --- PNG, without Pillow ----------------------------------------------------------------

def write_png(fp, hwc: torch.Tensor) -> None:
    """An 8-bit PNG (gray, RGB or RGBA) of a uint8 tensor H x W x C, to a path or a binary file."""
    if hwc.dim() == 2:
        hwc = hwc.unsqueeze(-1)
    h, w, c = (int(s) for s in hwc.shape)
    color = {1: 0, 3: 2, 4: 6}[c]
    rows = hwc.to(torch.uint8).reshape(h, w * c)
    raw = torch.cat([torch.zeros(h, 1, dtype=torch.uint8), rows], dim=1).reshape(-1)
    data = raw.numpy().tobytes() if _np() else bytes(raw.tolist())

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(data, 6)) + chunk(b"IEND", b""))
    if isinstance(fp, (str, bytes, os.PathLike)):
        with open(fp, "wb") as f:
            f.write(png)
    else:
        fp.write(png)
