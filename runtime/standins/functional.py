"""``torchvision.transforms.functional`` for the stand-in: the basics, on images and on tensors.

Geometry (resize, crops, flips, padding) and the tensor conversions are computed;
the photometric and free-angle operations that only change pixel values
(rotation by an arbitrary angle, blur, hue) return their input unchanged:
a stand-in data set needs the shapes and dtypes right, not the exact pixels.
Images are Pillow's when it is installed, else ``image.Image``.
"""

from __future__ import annotations

import enum
import numbers
from typing import SupportsInt, cast

import torch

from .image import crop_hwc, is_numpy_array, new_image, resize_hwc, size_pair, to_hwc


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def _chw_of_image(img) -> tuple:
    hwc, mode = to_hwc(img)
    return hwc.permute(2, 0, 1), mode


def _image_of_chw(chw: torch.Tensor, mode: str):
    return new_image(chw.permute(1, 2, 0).contiguous(), mode)


def _on_chw(img, fn):
    """Apply ``fn`` (on a tensor ... x C x H x W) to an image or a tensor, and give back the same kind."""
    if isinstance(img, torch.Tensor):
        return fn(img)
    chw, mode = _chw_of_image(img)
    return _image_of_chw(fn(chw), mode)


# --- sizes ---------------------------------------------------------------------------------

def get_dimensions(img) -> list:
    if isinstance(img, torch.Tensor):
        c = 1 if img.dim() == 2 else int(img.shape[-3])
        return [c, int(img.shape[-2]), int(img.shape[-1])]
    hwc, _ = to_hwc(img)
    return [int(hwc.shape[2]), int(hwc.shape[0]), int(hwc.shape[1])]


def get_image_size(img) -> list:
    _, h, w = get_dimensions(img)
    return [w, h]


def get_image_num_channels(img) -> int:
    return get_dimensions(img)[0]


# --- conversions ---------------------------------------------------------------------------

def to_tensor(pic) -> torch.Tensor:
    """float C x H x W in [0, 1] from an image, or from an H x W (x C) array (divided when uint8)."""
    if isinstance(pic, torch.Tensor):
        return pic
    dtype = torch.get_default_dtype()
    if is_numpy_array(pic):
        t = torch.from_numpy(pic.copy())
        t = t.unsqueeze(-1) if t.dim() == 2 else t
        t = t.permute(2, 0, 1).contiguous()
        return t.to(dtype).div(255) if t.dtype == torch.uint8 else t
    chw, _ = _chw_of_image(pic)
    return chw.contiguous().to(dtype).div(255)


def pil_to_tensor(pic) -> torch.Tensor:
    chw, _ = _chw_of_image(pic)
    return chw.contiguous().clone()


def to_pil_image(pic, mode=None):
    if isinstance(pic, torch.Tensor):
        t = pic.detach().cpu()
        if t.dim() == 2:
            t = t.unsqueeze(0)
        if t.is_floating_point():
            t = t.mul(255).byte()
        hwc = t.permute(1, 2, 0)
    else:
        hwc, _ = to_hwc(pic)
    if mode == "L" and hwc.shape[-1] != 1:
        mode = None
    return new_image(hwc.contiguous(), mode)


def convert_image_dtype(image: torch.Tensor, dtype=torch.float) -> torch.Tensor:
    if image.dtype == dtype:
        return image
    if image.is_floating_point():
        if dtype.is_floating_point:
            return image.to(dtype)
        return image.mul(torch.iinfo(dtype).max + 1.0 - 1e-3).to(dtype)
    if dtype.is_floating_point:
        return image.to(dtype).div(torch.iinfo(image.dtype).max)
    return image.to(dtype)


to_dtype = convert_image_dtype


def normalize(tensor: torch.Tensor, mean, std, inplace: bool = False) -> torch.Tensor:
    if not inplace:
        tensor = tensor.clone()
    mean = torch.as_tensor(mean, dtype=tensor.dtype, device=tensor.device)
    std = torch.as_tensor(std, dtype=tensor.dtype, device=tensor.device)
    if mean.dim() == 1:
        mean = mean.view(-1, 1, 1)
    if std.dim() == 1:
        std = std.view(-1, 1, 1)
    return tensor.sub_(mean).div_(std)


# --- geometry ------------------------------------------------------------------------------

def _resize_chw(t: torch.Tensor, h: int, w: int) -> torch.Tensor:
    if tuple(t.shape[-2:]) == (h, w):
        return t
    lead = t.shape[:-2]
    x = t.reshape(-1, 1, *t.shape[-2:])
    if not x.is_floating_point():
        y = torch.nn.functional.interpolate(x.to(torch.float32), size=(h, w), mode="bilinear",
                                            align_corners=False, antialias=True)
        y = y.round().clamp(0, 255).to(t.dtype)
    else:
        y = torch.nn.functional.interpolate(x, size=(h, w), mode="bilinear", align_corners=False, antialias=True)
    return y.reshape(*lead, h, w)


def _output_size(h: int, w: int, size, max_size=None) -> tuple:
    if isinstance(size, numbers.Number) or len(list(size)) == 1:
        requested = int(cast(SupportsInt, size) if isinstance(size, numbers.Number) else list(size)[0])
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = requested, int(requested * long / short)
        if max_size is not None and new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
        return (new_long, new_short) if w <= h else (new_short, new_long)
    return size_pair(size)


def resize(img, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
    _, h, w = get_dimensions(img)
    oh, ow = _output_size(h, w, size, max_size)
    if not isinstance(img, torch.Tensor):
        hwc, mode = to_hwc(img)
        return new_image(resize_hwc(hwc, oh, ow), mode)
    return _resize_chw(img, oh, ow)


def crop(img, top: int, left: int, height: int, width: int):
    if isinstance(img, torch.Tensor):
        H, W = img.shape[-2:]
        if top < 0 or left < 0 or top + height > H or left + width > W:
            pad_ = [max(-left, 0), max(-top, 0), max(left + width - W, 0), max(top + height - H, 0)]
            img = pad(img, pad_)
            top, left = max(top, 0), max(left, 0)
        return img[..., top:top + height, left:left + width]
    hwc, mode = to_hwc(img)
    return new_image(crop_hwc(hwc, top, left, height, width), mode)


def center_crop(img, output_size):
    th, tw = size_pair(output_size)
    _, h, w = get_dimensions(img)
    top = int(round((h - th) / 2.0))
    left = int(round((w - tw) / 2.0))
    return crop(img, top, left, th, tw)


def resized_crop(img, top, left, height, width, size, interpolation=InterpolationMode.BILINEAR, antialias=True):
    return resize(crop(img, top, left, height, width), size, interpolation, antialias=antialias)


def hflip(img):
    return _on_chw(img, lambda t: t.flip(-1))


def vflip(img):
    return _on_chw(img, lambda t: t.flip(-2))


def _padding(padding) -> list:
    if isinstance(padding, numbers.Number):
        p = int(cast(SupportsInt, padding))
        return [p, p, p, p]
    padding = [int(p) for p in padding]
    if len(padding) == 1:
        return padding * 4
    if len(padding) == 2:
        return [padding[0], padding[1], padding[0], padding[1]]
    return padding  # left, top, right, bottom


def pad(img, padding, fill=0, padding_mode="constant"):
    left, top, right, bottom = _padding(padding)

    def fn(t):
        if padding_mode == "constant":
            value = fill if isinstance(fill, numbers.Number) else 0
            return torch.nn.functional.pad(t, [left, right, top, bottom], mode="constant", value=value)
        mode = {"edge": "replicate", "reflect": "reflect", "symmetric": "reflect"}.get(padding_mode, "reflect")
        x = t.reshape(-1, *t.shape[-3:]) if t.dim() >= 3 else t.unsqueeze(0).unsqueeze(0)
        y = torch.nn.functional.pad(x.to(torch.float32), [left, right, top, bottom], mode=mode).to(t.dtype)
        return y.reshape(*t.shape[:-2], *y.shape[-2:])

    return _on_chw(img, fn)


def rotate(img, angle, interpolation=InterpolationMode.NEAREST, expand=False, center=None, fill=None):
    turns = int(round(angle / 90.0))
    _, h, w = get_dimensions(img)
    if abs(angle - 90 * turns) < 1e-6 and (h == w or turns % 2 == 0 or expand):
        return _on_chw(img, lambda t: torch.rot90(t, turns % 4, (-2, -1)).contiguous())
    return img  # an arbitrary angle: shapes are what matter here


def affine(img, *args, **kwargs):
    return img


def perspective(img, *args, **kwargs):
    return img


def elastic_transform(img, *args, **kwargs):
    return img


# --- colour --------------------------------------------------------------------------------

def _gray(t: torch.Tensor) -> torch.Tensor:
    if t.shape[-3] == 1:
        return t
    f = t.to(torch.float32)
    g = 0.2989 * f[..., 0, :, :] + 0.587 * f[..., 1, :, :] + 0.114 * f[..., 2, :, :]
    g = g.unsqueeze(-3)
    return g.to(t.dtype) if t.is_floating_point() else g.round().clamp(0, 255).to(t.dtype)


def rgb_to_grayscale(img, num_output_channels: int = 1):
    def fn(t):
        g = _gray(t)
        return g.expand(*g.shape[:-3], num_output_channels, *g.shape[-2:]).contiguous()

    if isinstance(img, torch.Tensor):
        return fn(img)
    chw, _ = _chw_of_image(img)
    out = fn(chw)
    return _image_of_chw(out, "L" if num_output_channels == 1 else "RGB")


def to_grayscale(img, num_output_channels: int = 1):
    return rgb_to_grayscale(img, num_output_channels)


def _blend(t: torch.Tensor, other, ratio: float) -> torch.Tensor:
    bound = 1.0 if t.is_floating_point() else 255.0
    out = (ratio * t.to(torch.float32) + (1.0 - ratio) * other).clamp(0, bound)
    return out.to(t.dtype) if t.is_floating_point() else out.round().to(t.dtype)


def adjust_brightness(img, brightness_factor: float):
    return _on_chw(img, lambda t: _blend(t, 0.0, brightness_factor))


def adjust_contrast(img, contrast_factor: float):
    return _on_chw(img, lambda t: _blend(t, _gray(t).to(torch.float32).mean(dim=(-3, -2, -1), keepdim=True),
                                         contrast_factor))


def adjust_saturation(img, saturation_factor: float):
    return _on_chw(img, lambda t: _blend(t, _gray(t).to(torch.float32), saturation_factor))


def adjust_hue(img, hue_factor: float):
    return img


def adjust_gamma(img, gamma: float, gain: float = 1.0):
    return img


def adjust_sharpness(img, sharpness_factor: float):
    return img


def gaussian_blur(img, kernel_size, sigma=None):
    return img


def invert(img):
    return _on_chw(img, lambda t: (1.0 - t) if t.is_floating_point() else (255 - t))


def autocontrast(img):
    return img


def equalize(img):
    return img


def posterize(img, bits):
    return img


def solarize(img, threshold):
    return img


def erase(img: torch.Tensor, i: int, j: int, h: int, w: int, v, inplace: bool = False) -> torch.Tensor:
    if not inplace:
        img = img.clone()
    img[..., i:i + h, j:j + w] = v
    return img


def five_crop(img, size):
    th, tw = size_pair(size)
    _, h, w = get_dimensions(img)
    return (crop(img, 0, 0, th, tw), crop(img, 0, w - tw, th, tw), crop(img, h - th, 0, th, tw),
            crop(img, h - th, w - tw, th, tw), center_crop(img, (th, tw)))


def ten_crop(img, size, vertical_flip=False):
    first = five_crop(img, size)
    flipped = vflip(img) if vertical_flip else hflip(img)
    return first + five_crop(flipped, size)

