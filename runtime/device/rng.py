"""The simulated device's random numbers: its draws mirror the CPU generator's.

Real CUDA draws from its own generator (Philox), so a migration that draws on the device
(torch.randn(..., device=device), dropout) gets other numbers than the CPU original. The simulated
device instead mirrors the draws: its random kernels run on the CPU generator, in the order the
script draws, so such a migration gets the original's numbers and compares step by step.
torch.cuda's seeding and RNG state functions keep a generator of their own (``device_generator``),
which draws nothing: the CPU original ignores them as well.
"""

from __future__ import annotations

import torch

device_generator = torch.Generator()  # what torch.cuda's seeding and RNG state functions set and read
_DEVICE_SEED_SALT = 0x5DEECE66D
mirrored_draws = 0  # random kernels run on the simulated device, drawn from the CPU generator


def seed_device(seed: int) -> None:
    device_generator.manual_seed((int(seed) ^ _DEVICE_SEED_SALT) & 0xFFFFFFFFFFFFFFFF)


def run_mirrored(func, args, kwargs):
    """A random kernel on the device: drawn from the CPU generator, as the CPU original draws (mirrored)."""
    global mirrored_draws
    if kwargs.get("generator") is None:
        mirrored_draws += 1
    return func(*args, **kwargs)
