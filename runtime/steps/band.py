"""The original's own sensitivity to rounding: the band a correct migration's losses stay within.

A device sums in other orders than the CPU (the simulated RNN kernels do too), so a correct
migration's losses start a rounding apart from the original's and training carries the difference
on. How far it carries it depends on the script: a linear regression keeps it at the last digit, an
RNN over many steps can grow it to 1e-3. A constant tolerance is too tight for one and too loose for
the other. So, where the losses part by more than the constant, the original runs a second time on
the CPU with the last bit of every op's result perturbed (up or down by one ulp, at random: Monte
Carlo arithmetic, the rounding differences a device's other summation order makes at every op); the
relative difference of the two runs' losses, step by step, is the band (compare.step_by_step widens
it). Exact values stay exact: zeros, infinities and whole numbers (counts, masks, indices as floats)
are never perturbed, since no summation order changes them and a perturbed one could change a branch.
"""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SEED = 0x0B5E55ED  # a generator of its own: the script's random numbers are not touched


def _fresh_outputs(func) -> bool:
    """Whether the op returns new tensors (not a view or an in-place result, whose change would reach its input)."""
    schema = func._schema
    return not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


class _LastBit(TorchDispatchMode):
    """Perturbs the last bit of every floating result of every op that makes a new tensor."""

    def __init__(self, generator: torch.Generator) -> None:
        super().__init__()
        self.generator = generator
        self.fresh: dict = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        fresh = self.fresh.get(func)
        if fresh is None:
            fresh = self.fresh[func] = _fresh_outputs(func)
        if fresh:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() and t.device.type == "cpu":
                    self._perturb(t)
        return out

    def _perturb(self, t: torch.Tensor) -> None:
        up = torch.randint(0, 2, t.shape, generator=self.generator, dtype=torch.bool)
        toward = torch.where(up, math.inf, -math.inf).to(t.dtype)
        exact = ~torch.isfinite(t) | (t == torch.round(t))
        t.copy_(torch.where(exact, t, torch.nextafter(t, toward)))


def install() -> None:
    """Perturb the last bit of every op's result from now on (the second run of the original)."""
    _LastBit(torch.Generator().manual_seed(_SEED)).__enter__()


def measure(reference: list, nudged: list) -> list:
    """The band: the relative difference of the two runs' losses at each step."""
    out = []
    for a, b in zip(reference, nudged):
        if not (math.isfinite(a) and math.isfinite(b)):
            out.append(0.0 if a == b or (math.isnan(a) and math.isnan(b)) else math.inf)
            continue
        scale = max(abs(a), abs(b))
        out.append(abs(a - b) / scale if scale > 0 else 0.0)
    return out
