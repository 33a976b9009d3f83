"""``torchvision.utils`` for the stand-in: ``make_grid`` as torchvision computes it, and ``save_image``,
which writes a PNG (with Pillow when it is here, else a small writer of our own). A relative path lands in
the run's copy of the script's folder, like any other file the script writes."""

from __future__ import annotations

import math

import torch

from .image import pil, write_png


@torch.no_grad()
def make_grid(tensor, nrow: int = 8, padding: int = 2, normalize: bool = False, value_range=None,
              scale_each: bool = False, pad_value: float = 0.0, **kwargs) -> torch.Tensor:
    if isinstance(tensor, (list, tuple)):
        tensor = torch.stack(list(tensor), dim=0)
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(0)
    if tensor.dim() == 3:
        if tensor.size(0) == 1:
            tensor = torch.cat((tensor, tensor, tensor), 0)
        tensor = tensor.unsqueeze(0)
    if tensor.dim() == 4 and tensor.size(1) == 1:
        tensor = torch.cat((tensor, tensor, tensor), 1)
    value_range = kwargs.get("range", value_range)
    if normalize:
        tensor = tensor.clone()

        def norm(img, low, high):
            img.clamp_(min=low, max=high)
            img.sub_(low).div_(max(high - low, 1e-5))

        def norm_range(t):
            if value_range is not None:
                norm(t, value_range[0], value_range[1])
            else:
                norm(t, float(t.min()), float(t.max()))

        if scale_each:
            for t in tensor:
                norm_range(t)
        else:
            norm_range(tensor)
    if tensor.size(0) == 1:
        return tensor.squeeze(0)
    nmaps = tensor.size(0)
    xmaps = min(nrow, nmaps)
    ymaps = int(math.ceil(float(nmaps) / xmaps))
    height, width = int(tensor.size(2) + padding), int(tensor.size(3) + padding)
    num_channels = tensor.size(1)
    grid = tensor.new_full((num_channels, height * ymaps + padding, width * xmaps + padding), pad_value)
    k = 0
    for y in range(ymaps):
        for x in range(xmaps):
            if k >= nmaps:
                break
            grid.narrow(1, y * height + padding, height - padding).narrow(
                2, x * width + padding, width - padding).copy_(tensor[k])
            k += 1
    return grid


@torch.no_grad()
def save_image(tensor, fp, format=None, **kwargs) -> None:
    grid = make_grid(tensor, **kwargs)
    hwc = grid.mul(255).add_(0.5).clamp_(0, 255).permute(1, 2, 0).to("cpu", torch.uint8).contiguous()
    P = pil()
    if P is not None:
        mode = "L" if hwc.shape[-1] == 1 else ("RGBA" if hwc.shape[-1] == 4 else "RGB")
        if mode == "L":
            hwc = hwc[:, :, 0]
        P.frombytes(mode, (hwc.shape[1], hwc.shape[0]), hwc.numpy().tobytes()).save(fp, format=format)
        return
    write_png(fp, hwc)
