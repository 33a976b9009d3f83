"""The legacy tensor types: torch.cuda.FloatTensor & co., and Tensor.type() with them.

Old scripts pick a type, `Tensor = torch.cuda.FloatTensor if cuda else
torch.FloatTensor`, then build with it (`Tensor(n, 1)`, `Tensor(ndarray)`),
convert with it (`x.type(Tensor)`) and test with it (isinstance). A CPU build
refuses every use of the torch.cuda ones: they are replaced by classes that
do the same on the simulated device. (Their class, LegacyCudaType, and the
conversion to them live with SimTensor, whose type() takes them too.)
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from .entry_points import names_device
from .sim_tensor import LEGACY_TYPES, LegacyCudaType, SimTensor, legacy_target, to_legacy_type

aten = torch.ops.aten


def _tensor_type(self, dtype=None, non_blocking=False, **kwargs):
    if dtype is None:
        return torch._C.TensorBase.type(self)
    legacy = to_legacy_type(self, dtype, non_blocking)
    if legacy is not None:
        return legacy
    return torch._C.TensorBase.type(self, dtype, non_blocking, **kwargs)


def _legacy_new(cls, args, kwargs):
    """torch.cuda.FloatTensor(...): what the CPU type builds, on the device."""
    device = kwargs.pop("device", None)
    if device is not None and not names_device(device):
        raise RuntimeError(f"legacy constructor expects device type: cuda but device type: "
                           f"{torch.device(device).type} was passed")
    if len(args) == 1 and isinstance(args[0], torch.Tensor):
        other = args[0]
        if not isinstance(other, cls):
            raise TypeError(f"expected torch.cuda.{cls.__name__} (got {other.type()})")
        return aten.alias.default(other)
    return SimTensor(getattr(torch, cls.__name__)(*args, **kwargs))


def _default_tensor_type(orig):
    # torch.set_default_tensor_type(torch.cuda.FloatTensor) sets the default
    # dtype and puts new tensors on the GPU: the device half is the default device.
    on_device = [False]

    @functools.wraps(orig)
    def set_default_tensor_type(t):
        target = legacy_target(t)
        if target is not None and target[1]:
            orig(target[0])  # the dtype half; it refuses an integer type as on CUDA
            torch.set_default_device("cuda")
            on_device[0] = True
            return
        orig(t)
        if on_device[0]:
            torch.set_default_device(None)
            on_device[0] = False

    return set_default_tensor_type


def _cuda_type(name: str):
    return LegacyCudaType(name, (), {
        "__new__": lambda cls, *args, **kwargs: _legacy_new(cls, args, kwargs),
        "__module__": "torch.cuda",
        "dtype": getattr(torch, name).dtype,
        "is_cuda": True,
        "is_sparse": False,
    })


def patch_tensor_type() -> None:
    """Tensor.type() of a CPU tensor: a torch.cuda type moves it to the device."""
    T: Any = torch.Tensor  # patched
    T.type = _tensor_type


def patch_cuda_types() -> None:
    """torch.cuda.FloatTensor & co. build on the device; set_default_tensor_type(one) puts new tensors there."""
    for name in LEGACY_TYPES:
        setattr(torch.cuda, name, _cuda_type(name))
    torch.set_default_tensor_type = _default_tensor_type(torch.set_default_tensor_type)
