"""A simulated CUDA device for machines without a GPU: install() and what the rest of the runtime asks of it.

Tensors moved to "cuda" become SimTensor: a wrapper whose C++ device is the
PrivateUse1 backend (renamed "simcuda"), which shows ``cuda:0`` to Python and
computes on a plain CPU tensor inside. ``__torch_dispatch__`` refuses what real
CUDA refuses (mixed devices, CUDA indices into a CPU tensor, a CPU generator
for a device draw), with the messages real CUDA gives, so a script that passes
here does not crash on a GPU for a placement reason.

``install()`` changes torch process-wide and cannot be undone: call it once, in
a fresh process, before the script runs. The modules beside this one each do
one part of it:

- state: the GPU played (cuda or mps), its devices and messages, its lazy initialisation
- rng: the device's random draws, mirrored from the CPU generator
- sim_tensor: SimTensor and its dispatch
- special_ops (with fused_rnn_cells): the ops that need more than unwrap-and-check
- backend: the PrivateUse1 backend, its module and kernels
- entry_points: the Python calls that name the device (to, cuda, factories ...)
- legacy_types: torch.cuda.FloatTensor & co.
- device_modules: torch.cuda, torch.mps, torch.accelerator
- checkpoint: torch.save and torch.load of device tensors
- parameter_swaps: Module.to swaps parameters, load_state_dict copies into them
"""

from __future__ import annotations

import os

import torch
from torch.optim import optimizer as torch_optimizer
from torch.utils import _device as torch_device_mode

from . import (
    backend,
    checkpoint,
    device_modules,
    entry_points,
    legacy_types,
    parameter_swaps,
    rng,
    special_ops,
    state,
)
from .sim_tensor import SimTensor

_installed = False
cuda_queries = 0  # sim-mps: how often the script asked torch.cuda.is_available() (answered False)


def install(kind: str = "cuda") -> None:
    """Make this process a one-GPU machine whose GPU computes on the CPU.

    ``kind`` is the GPU it plays: "cuda" (NVIDIA) or "mps" (Apple: the device is ``mps:0``,
    torch.cuda says no GPU, and float64 on the device raises as MPS does).
    """
    global _installed
    if _installed:
        return
    if kind not in ("cuda", "mps"):
        raise ValueError(f"unknown simulated device {kind!r}")
    state.play(kind)
    # The default-device mode knows the factories by identity: let it learn
    # them before they are wrapped.
    torch_device_mode._device_constructors()
    backend.register()
    special_ops.route()

    entry_points.patch_entry_points(kind)
    legacy_types.patch_tensor_type()
    if kind == "cuda":
        device_modules.patch_cuda_module()
        legacy_types.patch_cuda_types()
    else:
        device_modules.patch_mps_module(_count_cuda_query)
    device_modules.patch_accelerator()
    checkpoint.patch_save_and_load()

    # The optimizers take their multi-tensor (foreach) path on CUDA: take it
    # here too (one dispatch per step instead of one per parameter).
    torch_optimizer._foreach_supported_types.append(SimTensor)

    parameter_swaps.swap_on_move_copy_on_load()
    rng.seed_device(torch.initial_seed())
    os.register_at_fork(after_in_child=state.after_fork_in_child)
    _installed = True


def seed(seed: int) -> None:
    rng.seed_device(seed)


def mirrored() -> int:
    """How many random kernels ran on the simulated device, drawn from the CPU generator."""
    return rng.mirrored_draws


def _count_cuda_query() -> None:
    global cuda_queries
    cuda_queries += 1


__all__ = ["install", "SimTensor", "mirrored", "seed", "cuda_queries"]
