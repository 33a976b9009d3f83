"""``torchvision.transforms`` (and ``.v2``) for the stand-in.

The conversions and the geometry are computed (ToTensor, Normalize, Resize,
crops, flips, Pad, Grayscale). The random geometric transforms draw from
torch's global generator as torchvision does (``torch.rand(1) < p``,
``torch.randint`` for a crop), so a script's random stream advances the same
way in every run. Photometric and free-angle augmentations (ColorJitter,
RandomRotation, RandomAffine, blur, AutoAugment...) return their input and
draw nothing: a stand-in data set needs shapes and dtypes, not exact pixels.

Transforms are plain callables rather than ``nn.Module``s: verify's module
hooks then see only the script's own modules.
"""

from __future__ import annotations

import math
import numbers

import torch

from . import functional as F
from .functional import InterpolationMode  # noqa: F401  (torchvision exports it here too)
from .image import is_numpy_array, size_pair

functional = F


class _Transform:
    """Called with one input, or (v2 style) several, of which the first is transformed."""

    def __call__(self, img, *rest):
        out = self.forward(img)
        return (out, *rest) if rest else out

    def forward(self, img):
        return img

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class Compose:
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, img, *rest):
        for t in self.transforms:
            if rest:
                out = t(img, *rest)
                img, rest = (out[0], tuple(out[1:])) if isinstance(out, tuple) else (out, rest)
            else:
                img = t(img)
        return (img, *rest) if rest else img

    def __repr__(self):
        inner = "".join(f"\n    {t}" for t in self.transforms)
        return f"Compose({inner}\n)"


class Lambda(_Transform):
    def __init__(self, lambd):
        if not callable(lambd):
            raise TypeError(f"Argument lambd should be callable, got {type(lambd).__name__!r}")
        self.lambd = lambd

    def forward(self, img):
        return self.lambd(img)


class ToTensor(_Transform):
    def forward(self, pic):
        return F.to_tensor(pic)


class PILToTensor(_Transform):
    def forward(self, pic):
        return F.pil_to_tensor(pic)


class ToPILImage(_Transform):
    def __init__(self, mode=None):
        self.mode = mode

    def forward(self, pic):
        return F.to_pil_image(pic, self.mode)


class ConvertImageDtype(_Transform):
    def __init__(self, dtype):
        self.dtype = dtype

    def forward(self, image):
        return F.convert_image_dtype(image, self.dtype)


class Normalize(_Transform):
    def __init__(self, mean, std, inplace=False):
        self.mean, self.std, self.inplace = list(mean) if not isinstance(mean, numbers.Number) else [mean], \
            list(std) if not isinstance(std, numbers.Number) else [std], inplace

    def forward(self, tensor):
        return F.normalize(tensor, self.mean, self.std, self.inplace)


class Resize(_Transform):
    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
        self.size, self.interpolation, self.max_size, self.antialias = size, interpolation, max_size, antialias

    def forward(self, img):
        return F.resize(img, self.size, self.interpolation, self.max_size, self.antialias)


Scale = Resize


class CenterCrop(_Transform):
    def __init__(self, size):
        self.size = size

    def forward(self, img):
        return F.center_crop(img, self.size)


class Pad(_Transform):
    def __init__(self, padding, fill=0, padding_mode="constant"):
        self.padding, self.fill, self.padding_mode = padding, fill, padding_mode

    def forward(self, img):
        return F.pad(img, self.padding, self.fill, self.padding_mode)


class Grayscale(_Transform):
    def __init__(self, num_output_channels=1):
        self.num_output_channels = num_output_channels

    def forward(self, img):
        return F.rgb_to_grayscale(img, self.num_output_channels)


class RandomHorizontalFlip(_Transform):
    def __init__(self, p=0.5):
        self.p = p

    def forward(self, img):
        return F.hflip(img) if torch.rand(1) < self.p else img


class RandomVerticalFlip(_Transform):
    def __init__(self, p=0.5):
        self.p = p

    def forward(self, img):
        return F.vflip(img) if torch.rand(1) < self.p else img


class RandomGrayscale(_Transform):
    def __init__(self, p=0.1):
        self.p = p

    def forward(self, img):
        if torch.rand(1) < self.p:
            return F.rgb_to_grayscale(img, F.get_image_num_channels(img))
        return img


class RandomCrop(_Transform):
    def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
        self.size = size_pair(size)
        self.padding, self.pad_if_needed, self.fill, self.padding_mode = padding, pad_if_needed, fill, padding_mode

    @staticmethod
    def get_params(img, output_size):
        _, h, w = F.get_dimensions(img)
        th, tw = output_size
        if h < th or w < tw:
            raise ValueError(f"Required crop size {(th, tw)} is larger than input image size {(h, w)}")
        if w == tw and h == th:
            return 0, 0, h, w
        i = torch.randint(0, h - th + 1, size=(1,)).item()
        j = torch.randint(0, w - tw + 1, size=(1,)).item()
        return i, j, th, tw

    def forward(self, img):
        if self.padding is not None:
            img = F.pad(img, self.padding, self.fill, self.padding_mode)
        _, h, w = F.get_dimensions(img)
        th, tw = self.size
        if self.pad_if_needed and w < tw:
            img = F.pad(img, [tw - w, 0], self.fill, self.padding_mode)
        if self.pad_if_needed and h < th:
            _, h, w = F.get_dimensions(img)
            img = F.pad(img, [0, th - h], self.fill, self.padding_mode)
        i, j, h, w = self.get_params(img, self.size)
        return F.crop(img, i, j, h, w)


class RandomResizedCrop(_Transform):
    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=InterpolationMode.BILINEAR, antialias=True):
        self.size = size_pair(size)
        self.scale, self.ratio, self.interpolation, self.antialias = scale, ratio, interpolation, antialias

    @staticmethod
    def get_params(img, scale, ratio):
        """torchvision's draws, in its order, so that the global stream moves as it would."""
        _, height, width = F.get_dimensions(img)
        area = height * width
        log_ratio = torch.log(torch.tensor(ratio))
        for _ in range(10):
            target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                i = torch.randint(0, height - h + 1, size=(1,)).item()
                j = torch.randint(0, width - w + 1, size=(1,)).item()
                return i, j, h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(ratio):
            w, h = width, int(round(width / min(ratio)))
        elif in_ratio > max(ratio):
            h, w = height, int(round(height * max(ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def forward(self, img):
        i, j, h, w = self.get_params(img, self.scale, self.ratio)
        return F.resized_crop(img, i, j, h, w, self.size, self.interpolation, antialias=self.antialias)


RandomSizedCrop = RandomResizedCrop


class FiveCrop(_Transform):
    def __init__(self, size):
        self.size = size

    def forward(self, img):
        return F.five_crop(img, self.size)


class TenCrop(_Transform):
    def __init__(self, size, vertical_flip=False):
        self.size, self.vertical_flip = size, vertical_flip

    def forward(self, img):
        return F.ten_crop(img, self.size, self.vertical_flip)


class RandomApply(_Transform):
    def __init__(self, transforms, p=0.5):
        self.transforms, self.p = list(transforms), p

    def forward(self, img):
        if self.p < torch.rand(1):
            return img
        for t in self.transforms:
            img = t(img)
        return img


class RandomChoice(_Transform):
    def __init__(self, transforms, p=None):
        self.transforms = list(transforms)
        self.p = list(p) if p is not None else [1.0] * len(self.transforms)

    def forward(self, img):
        idx = int(torch.multinomial(torch.tensor(self.p), 1))
        return self.transforms[idx](img)


class RandomOrder(_Transform):
    def __init__(self, transforms):
        self.transforms = list(transforms)

    def forward(self, img):
        for i in torch.randperm(len(self.transforms)).tolist():
            img = self.transforms[i](img)
        return img


class _Unchanged(_Transform):
    """An augmentation that changes pixel values only: the stand-in returns its input, draws nothing."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class ColorJitter(_Unchanged):
    pass


class RandomRotation(_Unchanged):
    pass


class RandomAffine(_Unchanged):
    pass


class RandomPerspective(_Unchanged):
    pass


class RandomErasing(_Unchanged):
    pass


class GaussianBlur(_Unchanged):
    pass


class RandomInvert(_Unchanged):
    pass


class RandomPosterize(_Unchanged):
    pass


class RandomSolarize(_Unchanged):
    pass


class RandomAdjustSharpness(_Unchanged):
    pass


class RandomAutocontrast(_Unchanged):
    pass


class RandomEqualize(_Unchanged):
    pass


class ElasticTransform(_Unchanged):
    pass


class AutoAugment(_Unchanged):
    pass


class RandAugment(_Unchanged):
    pass


class TrivialAugmentWide(_Unchanged):
    pass


class AugMix(_Unchanged):
    pass


class LinearTransformation(_Unchanged):
    pass


class AutoAugmentPolicy:
    IMAGENET, CIFAR10, SVHN = "imagenet", "cifar10", "svhn"


# --- v2 only -----------------------------------------------------------------------------

class ToImage(_Transform):
    """v2: an image or an array to a uint8 tensor C x H x W (tensors pass through)."""

    def forward(self, img):
        if isinstance(img, torch.Tensor):
            return img
        if is_numpy_array(img):
            t = torch.from_numpy(img.copy())
            return (t.unsqueeze(-1) if t.dim() == 2 else t).permute(2, 0, 1).contiguous()
        return F.pil_to_tensor(img)


class ToDtype(_Transform):
    def __init__(self, dtype, scale=False):
        self.dtype, self.scale = dtype, scale

    def forward(self, x):
        if not isinstance(x, torch.Tensor):
            return x
        if isinstance(self.dtype, dict):
            return x
        return F.convert_image_dtype(x, self.dtype) if self.scale else x.to(self.dtype)


class ToPureTensor(_Transform):
    def forward(self, x):
        return x.as_subclass(torch.Tensor) if isinstance(x, torch.Tensor) else x


class Identity(_Transform):
    pass


def _v2_names() -> list:
    return [n for n, v in globals().items() if isinstance(v, type) and not n.startswith("_")]
