"""One training step replayed on a named GPU: how long it would take, and how much of it the GPU would idle.

A step is its events in order, each after some time of the host's own work: kernels the host queues, host
synchronisations (the host waits until the device has run everything queued before), copies to the device,
waits for a DataLoader's next batch. The host runs ahead of the device while nothing synchronises: a kernel
starts when the host has queued it and the device is free, and takes the launch overhead plus the larger of
its FLOPs at the card's peak and its bytes at the memory bandwidth. A synchronisation makes the host wait for
the device, then pay its round trip. A copy from the host blocks the host until it is done (and, as PyTorch's
``.to(device)`` without ``non_blocking`` does, waits for the device first), except a ``non_blocking`` copy:
from pinned memory the device makes it in its queue while the host goes on, from pageable memory the host still
stages it. The step is replayed a few times in a row, so that one step's device work can overlap the next one's
host work, as it does in a real loop; the step time is the steady one. The GPU idles whenever it runs no
kernel's work: waiting for the host, launching kernels, copying.

What a cause explains is what the step would save without it: the step replayed again with that cause's events
changed (a batch ready at once, a sync gone, a copy pinned or gone). torch-free; the inputs are plain numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from .gpus import Gpu

REPEATS = 4  # the step replayed this many times in a row; the last two give the steady step


@dataclass(frozen=True)
class Event:
    kind: str  # "kernel", "sync", "copy", "wait", "end"
    host_s: float  # the host's own work before it, since the event before
    flops: float = 0.0
    bytes: float = 0.0
    math: str = "fp32"  # a kernel's arithmetic: "fp32", "tf32", "half", "fp64"
    kernels: int = 1  # a kernel event may stand for several (merged)
    pinned: bool = False  # a copy's source
    non_blocking: bool = False
    seconds: float = 0.0  # a wait's
    tag: Any = None  # what the causes find it by


@dataclass(frozen=True)
class Timeline:
    step_s: float  # the steady step
    busy_s: float  # the kernels' own work
    launch_s: float
    copy_s: float
    host_s: float  # the host's own work and its waits for batches
    idle_fraction: float  # of the step, the GPU runs no kernel's work

    @property
    def device_s(self) -> float:
        """The device's queue, busy: work, launches and copies."""
        return self.busy_s + self.launch_s + self.copy_s


def kernel_work(event: Event, gpu: Gpu) -> float:
    """A kernel's own time: its FLOPs at the peak of its arithmetic, or its bytes at the memory bandwidth."""
    return max(event.flops / gpu.peak(event.math), event.bytes / gpu.memory)


def simulate(events: Iterable[Event], gpu: Gpu, repeats: int = REPEATS) -> Timeline:
    """The step of ``events`` on ``gpu``, in its steady state."""
    events = list(events)
    host = free = 0.0  # the host's clock; when the device's queue runs dry
    ends = []
    busy = launch = copy = own = 0.0
    for _ in range(max(2, repeats)):
        busy = launch = copy = own = 0.0
        for e in events:
            host += e.host_s
            own += e.host_s
            if e.kind == "kernel":
                work = kernel_work(e, gpu)
                free = max(free, host) + e.kernels * gpu.launch_s + work
                busy += work
                launch += e.kernels * gpu.launch_s
            elif e.kind == "sync":
                host = max(host, free) + gpu.sync_s + e.bytes / gpu.pageable
            elif e.kind == "copy":
                took = e.bytes / (gpu.pinned if e.pinned else gpu.pageable)
                copy += took
                if e.non_blocking and e.pinned:  # in the device's queue; the host goes on
                    free = max(free, host) + took
                elif e.non_blocking:  # the host stages pageable memory itself
                    host += took
                    free = max(free, host)
                else:  # waits for the device, copies, waits for the copy
                    host = max(host, free) + took + gpu.sync_s
                    free = host
            elif e.kind == "wait":
                host += e.seconds
                own += e.seconds
        ends.append((host, free))
    (host_a, free_a), (host_b, free_b) = ends[-2], ends[-1]
    step = max(host_b - host_a, free_b - free_a, 1e-12)
    return Timeline(step_s=step, busy_s=busy, launch_s=launch, copy_s=copy, host_s=own,
                    idle_fraction=min(1.0, max(0.0, 1.0 - busy / step)))


def saving(events: list[Event], gpu: Gpu, change: Callable[[Event], Event | None],
           base: Timeline | None = None) -> float:
    """How much shorter the step is with each event changed by ``change`` (None: the event is gone; its host
    time stays with the host)."""
    base = base or simulate(events, gpu)
    changed: list[Event] = []
    carry = 0.0
    for e in events:
        new = change(e)
        if new is None:
            carry += e.host_s
            continue
        changed.append(replace(new, host_s=new.host_s + carry) if carry else new)
        carry = 0.0
    if carry:
        changed.append(Event("end", carry))
    return base.step_s - simulate(changed, gpu).step_s


def without_launches(gpu: Gpu) -> Gpu:
    """The card with free launches: the step as one graph of kernels (CUDA graphs, torch.compile)."""
    return replace(gpu, launch_s=0.0)
