"""Module.to swaps parameters, load_state_dict copies into them.

Module.to keeps each Parameter object (the optimizer may hold it already), as
it does on real CUDA; a CPU Parameter cannot take a device wrapper by
`.data =`, so the move swaps them. load_state_dict must not swap: real torch
copies the checkpoint into the parameters in place, which works while an
autograd graph holds them, where a swap is refused ("Expected use_count of t1
to be 1 or 2 ..."), e.g. loading the best weights after the training loop.
Where a module's move itself is refused (the old ``weight_norm`` keeps ``weight``
computed from ``weight_g``: a graph that holds them), that module's parameters
become new Parameter objects on the device, as torch does for a type it cannot
set by ``.data =``: the move works as on CUDA, but an optimizer built before it
keeps the old ones (the comparison of the losses then shows it).
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
    return not getattr(_applying, "replacing", False)


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
            if not str(e).startswith(_SWAP_REFUSED) or getattr(_applying, "replacing", False):
                raise
            # this module's own parameters, once more, as new Parameters (the children are moved already)
            _applying.replacing = True
            try:
                return orig(self, *args, **kwargs)
            finally:
                _applying.replacing = False
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
