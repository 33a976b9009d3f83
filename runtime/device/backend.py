"""The PrivateUse1 backend that computes the device's ops: its registration, its module, its kernels.

``register()`` (install() calls it) renames PrivateUse1 to ``state.backend`` ("simcuda"), gives
torch its module (torch.simcuda: what torch asks of a backend) and registers the kernels torch
calls where a device tensor is made with no SimTensor in the call, so that __torch_dispatch__
never sees it: the empty tensors of a factory with device="cuda", a copy to the device, and a
scalar read of a device tensor inside torch's tensor building.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from . import sim_tensor, state
from .rng import device_generator, seed_device
from .sim_tensor import SimTensor

aten = torch.ops.aten

_aten_lib: Any = None  # register()'s kernel registrations (a torch.library.Library)


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return SimTensor(torch.empty(size, dtype=dtype, memory_format=memory_format or torch.contiguous_format))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return SimTensor(torch.empty_strided(size, stride, dtype=dtype))


def _to_copy_kernel(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    # A copy to the device (x.to("cuda") of a CPU tensor), which __torch_dispatch__ never sees.
    def copy(func, args, kwargs):
        return SimTensor(aten._to_copy.default(x, dtype=dtype, memory_format=memory_format))

    if sim_tensor.watcher is not None:  # verify --speed: counted as the device's copy from the host
        return sim_tensor.watcher.op(aten._to_copy.default, (x,), {"dtype": dtype, "device": state.real,
                                                                   "non_blocking": non_blocking}, copy)
    return copy(None, None, None)


def _local_scalar_dense_kernel(x):
    # Every scalar read (item, int, float, bool, __index__) ends in _local_scalar_dense. torch builds a
    # tensor from Python data (torch.tensor([t, ...]), as_tensor, new_tensor, torch.LongTensor([[t]]))
    # below the Python dispatch key, so that dispatch modes do not see it, and reads each element that
    # is a tensor with item(): a device element arrives here, not in __torch_dispatch__. Real CUDA
    # copies it to the host.
    if not isinstance(x, SimTensor):  # no values to read: the simulation's limit, as before
        raise NotImplementedError(f"Could not run 'aten::_local_scalar_dense' with arguments from the "
                                  f"'{state.backend}' backend.")
    if sim_tensor.watcher is not None:  # verify --speed: a scalar read, as one through the dispatch
        return sim_tensor.watcher.op(aten._local_scalar_dense.default, (x,), {},
                                     lambda func, args, kwargs: aten._local_scalar_dense.default(x._e))
    return aten._local_scalar_dense.default(x._e)


class _SimBackendModule:
    """torch.simcuda: what torch asks of a PrivateUse1 backend."""

    def is_initialized(self):
        return state.is_initialized()

    def is_available(self):
        return True

    def current_device(self):
        state.lazy_init()
        return 0

    def device_count(self):
        return 1

    def _is_in_bad_fork(self):
        return state.in_bad_fork()  # torch.manual_seed skips the device of a bad fork, as it does for CUDA

    def manual_seed_all(self, seed):
        seed_device(seed)

    def get_rng_state(self, device=None):
        return device_generator.get_state()

    def set_rng_state(self, state, device=None):
        device_generator.set_state(state)

    def get_amp_supported_dtype(self):
        return [torch.float16, torch.bfloat16]


def register() -> None:
    """Make PrivateUse1 the simulated device's backend, under its name, with its module and kernels."""
    global _aten_lib
    _setup_privateuseone_for_python_backend(state.backend, backend_module=_SimBackendModule())
    state.backend_registered()

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    lib.impl("_to_copy", _to_copy_kernel, "PrivateUse1")
    lib.impl("_local_scalar_dense", _local_scalar_dense_kernel, "PrivateUse1")
    _aten_lib = lib  # kept alive: dropping it unregisters the kernels
