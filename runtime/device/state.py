"""The simulated device's process-wide state: which GPU it plays, and whether it is initialised here.

``play(kind)`` (install() calls it) picks the GPU: "cuda" (an NVIDIA GPU) or "mps" (an Apple GPU,
which also refuses float64). The devices and the error messages below name it; the other modules
read them as attributes of this module (``state.kind``), since play() rewrites them.

Lazy initialisation, as torch.cuda does it: the first device work of a process (a device tensor
made or moved, torch.cuda.current_device(), synchronize() ...) initialises "CUDA" there;
is_available() and device_count() do not. A process forked after that is a bad fork (real
CUDA cannot be used across fork()): its first device work raises BAD_FORK. A fork of a process
that never initialised CUDA is fine, and the child may initialise it itself. Only for "cuda":
torch.mps raises nothing of the kind (its bad-fork flag only skips seeding in the child).
"""

from __future__ import annotations

import os

import torch

CUDA0 = torch.device("cuda", 0)
CPU = torch.device("cpu")

kind = "cuda"  # the GPU the simulator plays: "cuda" or "mps"
nominal = CUDA0  # what a device tensor's .device reports: cuda:0 or mps:0
backend = "simcuda"  # the name of the PrivateUse1 backend that computes the device's ops
real: torch.device  # the real (C++) device of every device tensor, set once the backend is registered

MISMATCH = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
NUMPY = "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
INDEX = "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
GENERATOR = "Expected a 'cuda' device type for generator but found 'cpu'"
CPU_GENERATOR = "Expected a 'cpu' device type for generator but found 'cuda'"  # a device generator for a CPU draw
FLOAT64 = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
           "Please use float32 instead.")
# torch.cuda._lazy_init's words in a process forked after CUDA was initialised (a DataLoader worker).
BAD_FORK = ("Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
            "multiprocessing, you must use the 'spawn' start method")

_init_pid: int | None = None  # the process that initialised the device; None until then
_bad_fork = False  # set in a child forked after _init_pid initialised (os.register_at_fork)


def play(gpu: str) -> None:
    """Play ``gpu`` ("cuda" or "mps"): the devices and the messages that name it."""
    global kind, nominal, backend, MISMATCH, NUMPY, GENERATOR, CPU_GENERATOR
    if gpu != "cuda":
        kind, nominal, backend = gpu, torch.device(gpu, 0), f"sim{gpu}"
        MISMATCH = MISMATCH.replace("cuda:0", f"{gpu}:0")
        NUMPY = NUMPY.replace("cuda:0", f"{gpu}:0")
        GENERATOR = GENERATOR.replace("'cuda'", f"'{gpu}'")
        CPU_GENERATOR = CPU_GENERATOR.replace("'cuda'", f"'{gpu}'")


def backend_registered() -> None:
    """The backend is registered under its name: its device is the real device of device tensors."""
    global real
    real = torch.device(backend, 0)


def after_fork_in_child() -> None:
    global _bad_fork
    if _init_pid is not None and kind == "cuda":
        _bad_fork = True


def lazy_init() -> None:
    """torch.cuda._lazy_init: initialise the device in this process, or refuse in a bad fork."""
    global _init_pid
    if _bad_fork:
        raise RuntimeError(BAD_FORK)
    if _init_pid is None:
        _init_pid = os.getpid()


def is_initialized() -> bool:
    return _init_pid is not None and not _bad_fork


def in_bad_fork() -> bool:
    return _bad_fork
