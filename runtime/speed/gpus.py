"""The GPUs an estimate can be made for: a small table of what each card does at best, as data.

Peak dense FLOP/s (no sparsity) by arithmetic: plain FP32, TF32 on the tensor cores (where the card has it:
a T4 does not), half precision (BF16/FP16) on the tensor cores, FP64; the memory bandwidth; the copies
between the host and the card over PCIe, from pageable and from pinned memory (what a copy reaches in
practice, below the link's peak: pageable memory is staged through a pinned buffer by the driver); the
device-side overhead of a kernel launch; and the cost of a synchronisation's round trip on an idle queue
(the host waits on the stream and for the value's copy back), the same for every card here. The figures are the vendors' data-sheet
peaks; the copies', the launch's and the sync's are typical measurements, rounded. torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

T = 1e12
G = 1e9


@dataclass(frozen=True)
class Gpu:
    key: str  # what --gpu takes
    name: str
    fp32: float  # FLOP/s
    tf32: float
    half: float  # BF16 / FP16 on the tensor cores
    fp64: float
    memory: float  # bytes/s
    pageable: float  # host-to-device bytes/s from pageable memory (and device-to-host into it)
    pinned: float  # from pinned memory
    launch_s: float = 5e-6
    sync_s: float = 20e-6

    def peak(self, math: str) -> float:
        """The FLOP/s of one kind of arithmetic: "fp32", "tf32", "half" or "fp64"."""
        return {"fp32": self.fp32, "tf32": self.tf32, "half": self.half, "fp64": self.fp64}.get(math, self.fp32)


GPUS = {
    g.key: g for g in (
        Gpu("h100", "H100 SXM", fp32=67 * T, tf32=495 * T, half=989 * T, fp64=34 * T, memory=3350 * G,
            pageable=20 * G, pinned=50 * G),
        Gpu("a100", "A100 80GB", fp32=19.5 * T, tf32=156 * T, half=312 * T, fp64=9.7 * T, memory=2039 * G,
            pageable=10 * G, pinned=25 * G),
        Gpu("l4", "L4", fp32=30.3 * T, tf32=60 * T, half=121 * T, fp64=0.49 * T, memory=300 * G,
            pageable=10 * G, pinned=25 * G),
        Gpu("rtx4090", "RTX 4090", fp32=82.6 * T, tf32=82.6 * T, half=165 * T, fp64=1.29 * T, memory=1008 * G,
            pageable=10 * G, pinned=25 * G),
        Gpu("t4", "T4", fp32=8.1 * T, tf32=8.1 * T, half=65 * T, fp64=0.25 * T, memory=320 * G,
            pageable=6 * G, pinned=12 * G),
    )
}
DEFAULT = "h100"


def named(name: str | None) -> Gpu:
    """The card a user named: its key or its name, in any case, spaces and dashes aside ("H100", "rtx-4090",
    "A100 80GB"); None: the default. KeyError for an unknown one."""
    if name is None:
        return GPUS[DEFAULT]
    wanted = _squeeze(name)
    for gpu in GPUS.values():
        if wanted in (gpu.key, _squeeze(gpu.name)) or _squeeze(gpu.name).startswith(wanted) \
                or (len(wanted) > 2 and gpu.key.endswith(wanted)):
            return gpu
    raise KeyError(name)


def _squeeze(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())
