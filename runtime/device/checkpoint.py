"""Checkpoints: torch.save of device tensors writes a CUDA checkpoint, torch.load sees it as a CPU-only machine does.

A device tensor pickles as a CUDA tensor would (its storage tagged "cuda:0"), so the checkpoint a
script saves here is the one it saves on a GPU. Loading one without map_location raises as on a
machine without CUDA; with map_location="cuda" its tensors (a whole pickled model too) land on the
simulated device. ``patch_save_and_load()`` (install() calls it) puts this in torch.
"""

from __future__ import annotations

import functools

import torch

from . import state
from .entry_points import names_device
from .sim_tensor import SimTensor, original_to, storage_ptrs_being_saved


def _sim_tag(storage):
    if storage.data_ptr() in storage_ptrs_being_saved:
        return f"{state.kind}:0"
    return None


def _sim_deserialize(obj, location):
    if location.startswith("cuda"):
        raise RuntimeError(
            "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. "
            "If you are running on a CPU-only machine, please use torch.load with "
            "map_location=torch.device('cpu') to map your storages to the CPU."
        )
    return None


def _to_sim_tree(obj):
    if isinstance(obj, SimTensor):
        return obj
    if isinstance(obj, torch.nn.Module):
        return obj.to(state.kind)  # a whole pickled model: map_location puts its parameters on the device
    if isinstance(obj, torch.nn.Parameter):
        return torch.nn.Parameter(_to_sim_tree(obj.data), obj.requires_grad)
    if isinstance(obj, torch.Tensor):
        return SimTensor(obj.detach()) if not obj.requires_grad else original_to(obj, state.real)
    if isinstance(obj, dict):
        out = type(obj)() if type(obj) is not dict else {}
        for k, v in obj.items():
            out[k] = _to_sim_tree(v)
        return out
    if isinstance(obj, list):
        return [_to_sim_tree(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_sim_tree(v) for v in obj)
    return obj


def _wrap_save(orig):
    @functools.wraps(orig)
    def save(obj, f, *args, **kwargs):
        try:
            return orig(obj, f, *args, **kwargs)
        finally:
            storage_ptrs_being_saved.clear()

    return save


def _wrap_load(orig):
    @functools.wraps(orig)
    def load(f, map_location=None, *args, **kwargs):
        if map_location is not None and names_device(map_location) and not callable(map_location):
            return _to_sim_tree(orig(f, *args, map_location="cpu", **kwargs))
        return orig(f, map_location, *args, **kwargs)

    return load


def patch_save_and_load() -> None:
    """torch.save tags device storages as the device's; torch.load maps them as described above."""
    torch.serialization.register_package(1, _sim_tag, _sim_deserialize)
    torch.save = _wrap_save(torch.save)
    torch.load = _wrap_load(torch.load)
