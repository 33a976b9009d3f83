"""Module.to swaps parameters, load_state_dict copies into them.

Module.to keeps each Parameter object (the optimizer may hold it already), as
it does on real CUDA; a CPU Parameter cannot take a device wrapper by
`.data =`, so the move swaps them. load_state_dict must not swap: real torch
copies the checkpoint into the parameters in place, which works while an
autograd graph holds them, where a swap is refused ("Expected use_count of t1
to be 1 or 2 ..."), e.g. loading the best weights after the training loop.
Where a module's move itself is refused because a tensor the module keeps holds a
graph over its parameters (the old ``weight_norm`` keeps ``weight`` computed from
``weight_g`` and ``weight_v``, and makes it again on every call), that tensor is
detached and the move tried once more: the Parameter objects stay the same, as on CUDA.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

_script_swaps = False  # what the script itself set in torch.__future__ (torch's default: copy)
_loading = threading.local()
_applying = threading.local()
_orig_swap_tensors = torch.utils.swap_tensors


_SWAP_REFUSED = "_apply(): Couldn't swap"


def _swap_on_conversion() -> bool:
    if getattr(_loading, "depth", 0):
        return _script_swaps
    return True


def _detach_kept_graphs(module) -> bool:
    """Detach the tensors the module keeps as plain attributes that hold an autograd graph; whether any."""
    kept = [name for name, value in vars(module).items()
            if isinstance(value, torch.Tensor) and value.grad_fn is not None
            and not isinstance(value, torch.nn.Parameter)]
    for name in kept:
        module.__dict__[name] = module.__dict__[name].detach()
    return bool(kept)


def _set_swap_on_conversion(value: bool) -> None:
    global _script_swaps
    _script_swaps = bool(value)


def _swap_or_set_data(t1, t2):
    # Inside Module._apply, swap only across the CPU and the device. A move
    # that stays put (model.to(device) again, .double() on the device) takes
    # `.data =` as on real torch: a swap is refused while a graph holds the
    # parameter and poisons its gradient node for a backward still to come.
    if getattr(_applying, "depth", 0) and torch._has_compatible_shallow_copy_type(t1, t2):
        t1.data = t2
        return
    _orig_swap_tensors(t1, t2)


def _tracking_apply(orig):
    @functools.wraps(orig)
    def _apply(self, *args, **kwargs):
        _applying.depth = getattr(_applying, "depth", 0) + 1
        try:
            return orig(self, *args, **kwargs)
        except RuntimeError as e:
            if not str(e).startswith(_SWAP_REFUSED) or not _detach_kept_graphs(self):
                raise
            return orig(self, *args, **kwargs)  # its children are moved already; its own parameters now
        finally:
            _applying.depth -= 1

    return _apply


def _copying_load(orig):
    @functools.wraps(orig)
    def _load_from_state_dict(self, *args, **kwargs):
        _loading.depth = getattr(_loading, "depth", 0) + 1
        try:
            return orig(self, *args, **kwargs)
        finally:
            _loading.depth -= 1

    return _load_from_state_dict


def swap_on_move_copy_on_load() -> None:
    """Module.to swaps the parameters it moves across the CPU and the device; load_state_dict copies
    into them (or swaps, where the script set torch.__future__ to swap)."""
    future: Any = torch.__future__  # patched
    # torch.nn.utils.parametrize imported the getter itself: it reads this flag.
    future.set_swap_module_params_on_conversion(True)
    future.get_swap_module_params_on_conversion = _swap_on_conversion
    future.set_swap_module_params_on_conversion = _set_swap_on_conversion
    module: Any = torch.nn.Module  # patched
    module._load_from_state_dict = _copying_load(module._load_from_state_dict)
    module._apply = _tracking_apply(module._apply)
    torch.utils.swap_tensors = _swap_or_set_data
