"""The simulated device's random numbers: its draws mirror the CPU generator's.

Real CUDA draws from its own generator (Philox), so a migration that draws on the device
(torch.randn(..., device=device), dropout) gets other numbers than the CPU original. The simulated
device instead mirrors the draws: its random kernels run on the CPU generator, in the order the
script draws, so such a migration gets the original's numbers and compares step by step.
torch.cuda's seeding and RNG state functions keep a generator of their own (``device_generator``,
torch.cuda.default_generators[0]), which draws nothing: the CPU original ignores them as well; a
draw given it explicitly is mirrored like one given no generator.

A generator the script makes on the device (``torch.Generator(device="cuda")``) is a
``DeviceGenerator``: a CPU generator that says it is on the device. A draw on the device given one
draws from it (``draw_from``), so the same seed gives the same numbers run after run, those a CPU
generator seeded alike would draw (real CUDA's Philox would draw others).
"""

from __future__ import annotations

from typing import Callable, TypeVar

import torch

from . import state

T = TypeVar("T")

mirrored_draws = 0  # random kernels run on the simulated device, drawn from the CPU generator
_lent = 0  # > 0 while a draw from a DeviceGenerator runs on the CPU generator (draw_from): not mirrored


class DeviceGenerator(torch._C.Generator):
    """A generator on the simulated device: in C++ a CPU generator (which the device's kernels, run
    on the CPU, can draw from); to Python on the device (``.device``: cuda:0, or cuda where no index
    was named, as CUDA answers)."""

    _index: int | None

    def __new__(cls, device: torch.device | str | int | None = None) -> DeviceGenerator:
        self = torch._C.Generator.__new__(cls)  # a CPU generator, seeded as a new CUDA one is (67280421310721)
        d = torch.device(device) if isinstance(device, str) else device
        self._index = d.index if isinstance(d, torch.device) else d
        return self

    @property  # torch._C.Generator.device is a writeable attribute in the stubs, a read-only one in C++
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device(state.kind) if self._index is None else torch.device(state.kind, self._index)

    def clone_state(self) -> DeviceGenerator:
        twin = DeviceGenerator(self.device)
        twin.set_state(self.get_state())
        return twin

    def __reduce__(self):
        # torch._C.Generator's names torch._C.Generator and the C++ device (the CPU): rebuilt on the device
        return DeviceGenerator, (self.device,), super().__reduce__()[2]

    def __repr__(self) -> str:
        return f"<torch._C.Generator object at {id(self):#x}>"


device_generator = DeviceGenerator(0)  # what torch.cuda's seeding and RNG state functions set and read


def seed_device(seed: int) -> None:
    device_generator.manual_seed(int(seed))  # as torch.cuda.manual_seed seeds CUDA's: its initial_seed() is seed


def draw_from(gen: DeviceGenerator, draw: Callable[[], T]) -> T:
    """``draw()``, a random op on the device given no generator, drawn from ``gen``.

    The default device generator's draws are mirrored, as without a generator. Another's state is
    lent to the CPU generator for the op (the device's dispatch refuses a CPU generator, which is
    what a DeviceGenerator is in C++), and its advanced state taken back after it.
    """
    global _lent
    if gen is device_generator:
        return draw()
    cpu = torch.default_generator
    kept = cpu.get_state()
    cpu.set_state(gen.get_state())
    _lent += 1
    try:
        return draw()
    finally:
        _lent -= 1
        gen.set_state(cpu.get_state())
        cpu.set_state(kept)


def run_mirrored(func, args, kwargs):
    """A random kernel on the device: drawn from the CPU generator, as the CPU original draws (mirrored)."""
    global mirrored_draws
    if kwargs.get("generator") is None and not _lent:
        mirrored_draws += 1
    return func(*args, **kwargs)
