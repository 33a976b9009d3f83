"""SimTensor, a tensor on the simulated device, and its ``__torch_dispatch__``.

A SimTensor is a wrapper whose C++ device is the PrivateUse1 backend (renamed "simcuda"), which
shows ``cuda:0`` to Python and computes on a plain CPU tensor inside (``_e``). Its dispatch
unwraps the operands, refuses what real CUDA refuses (a CPU tensor meeting a device one, a CPU
generator for a device draw) with the messages real CUDA gives, runs the op on the CPU values and
wraps the results. The ops that need more than that have their handlers in ``OP_HANDLERS``
(special_ops fills it). ``x.type()`` of a SimTensor also takes the legacy types
(torch.cuda.FloatTensor & co.), which are recognised here, where their instances are.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from . import state
from .rng import run_mirrored

_NOMINAL_STORAGE = 2**48
original_to = torch._C.TensorBase.to  # Tensor.to as torch defines it (install() patches torch.Tensor.to)
OP_HANDLERS: dict[Any, Any] = {}  # op -> handler(func, args, kwargs) for the ops that need more than run_op
# The storages (data pointers) of device tensors that the torch.save in progress pickles: the
# checkpoint tags them as the device's.
storage_ptrs_being_saved: set = set()
# What verify --speed watches (speed.counts.Counter), else None: every op of the dispatch goes through its
# op(func, args, kwargs, dispatch), every new device tensor through made(elem), and the reads of a device
# tensor's values that bypass the dispatch (tolist, numpy, print) through read(tensor, how).
watcher: Any = None


class SimTensor(torch.Tensor):
    """A tensor on the simulated CUDA device; ``_e`` holds its CPU values."""

    # Python-level calls pass straight to C++; the checks live in dispatch.
    # (torch's C function, not the classmethod signature the stubs give Tensor)
    __torch_function__: Any = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        state.lazy_init()  # the first device tensor initialises "CUDA"; in a bad fork it raises
        if state.kind == "mps" and elem.dtype is torch.float64:
            raise TypeError(state.FLOAT64)  # every tensor made on (or moved to) the device passes here
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=state.real,
            requires_grad=elem.requires_grad,
            # The wrapper holds no memory; a large nominal size lets an
            # in-place resize (an out= op) pass the bounds check of as_strided_.
            storage_size=_NOMINAL_STORAGE,
        )
        r._e = elem
        if watcher is not None:
            watcher.made(elem)
        return r

    @property
    def device(self):
        return state.nominal

    @property
    def is_cuda(self):
        return state.kind == "cuda"

    @property
    def is_mps(self):
        return state.kind == "mps"

    @property
    def is_cpu(self):
        return False

    def numpy(self, *, force=False):
        if force:  # numpy(force=True) copies to the host, as on CUDA
            if watcher is not None:
                watcher.read(self, "numpy")
            return self._e.detach().numpy().copy()
        raise TypeError(state.NUMPY)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(state.NUMPY)

    def tolist(self):
        if watcher is not None:
            watcher.read(self, "tolist")
        return self._e.tolist()  # real CUDA copies to the host here, which is allowed

    def __repr__(self, *, tensor_contents=None):
        # Print as real CUDA does: the values, then device='cuda:0'.
        if watcher is not None:
            watcher.read(self, "print")
        body = repr(self._e.detach())
        extra = f", device='{state.nominal}'"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return body[:-1] + extra + ")" if body.endswith(")") else body

    def __reduce_ex__(self, proto):
        # Saved as a CUDA tensor would be: the storage is tagged "cuda:0".
        e = self._e.detach()
        storage_ptrs_being_saved.add(e.untyped_storage().data_ptr())
        return e.__reduce_ex__(proto)

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = SimTensor(self._e.clone())
        if self.requires_grad:
            new.requires_grad_(True)
        if getattr(self, "_is_param", False):
            new._is_param = True
        memo[id(self)] = new
        return new

    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, value):
        # C++ takes the new sizes, dtype and (nominal) storage; the values live in _e.
        torch._C.TensorBase.data.__set__(self, value)
        self._e = value._e

    def __format__(self, format_spec):
        # Tensor.__format__ formats a 0-dim tensor as its number only for an
        # exact torch.Tensor; on real CUDA a 0-dim tensor is one (a Parameter is not).
        if self.dim() == 0 and not getattr(self, "_is_param", False):
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def type(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None:
            return self._e.type().replace("torch.", f"torch.{state.kind}.", 1)
        legacy = to_legacy_type(self, dtype, non_blocking)
        if legacy is not None:
            return legacy
        return original_to(self, self._e.new_empty(0).type(dtype).dtype, non_blocking=non_blocking)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if state.in_bad_fork():
            raise RuntimeError(state.BAD_FORK)  # a device tensor inherited across the fork
        if watcher is not None:
            return watcher.op(func, args, kwargs or {}, dispatch)
        return dispatch(func, args, kwargs or {})


def dispatch(func, args, kwargs):
    """An op on the device: its handler's, else run_op's."""
    special = OP_HANDLERS.get(func)
    if special is not None:
        return special(func, args, kwargs)
    return run_op(func, args, kwargs)


def device_mismatch(func, argname: str | None):
    """The error real CUDA raises for a CPU tensor given to ``func`` (as ``argname``) with device ones."""
    # Pointwise ops report the bare message, like TensorIterator on CUDA; the
    # others name the argument, like the generated CUDA wrappers.
    if argname is None or torch.Tag.pointwise in func.tags:
        return RuntimeError(state.MISMATCH)
    op = func._schema.name.split("::")[-1]
    return RuntimeError(
        f"{state.MISMATCH} (when checking argument for argument {argname} in method wrapper_CUDA_{op})"
    )


def unwrap_args(func, args, kwargs, allow_cpu=False):
    """Unwrap SimTensors; raise where a CPU tensor (not 0-dim) meets one."""
    ids = {}
    bad = None
    new_args = list(args)
    for i, a in enumerate(args):
        if isinstance(a, SimTensor):
            new_args[i] = a._e
            ids[id(a._e)] = a
        elif isinstance(a, torch.Tensor):
            ids[id(a)] = a
            if bad is None and a.dim() > 0:
                bad = i
        elif isinstance(a, (list, tuple)) and a and any(isinstance(x, torch.Tensor) for x in a):
            items = list(a)
            for j, x in enumerate(items):
                if isinstance(x, SimTensor):
                    items[j] = x._e
                    ids[id(x._e)] = x
                elif isinstance(x, torch.Tensor):
                    ids[id(x)] = x
                    if bad is None and x.dim() > 0:
                        bad = i
            new_args[i] = type(a)(items) if isinstance(a, tuple) else items
    new_kwargs = kwargs
    if kwargs:
        new_kwargs = {}
        for k, v in kwargs.items():
            if isinstance(v, SimTensor):
                ids[id(v._e)] = v
                v = v._e
            elif isinstance(v, torch.Tensor):
                ids[id(v)] = v
                if bad is None and v.dim() > 0 and k != "out":
                    bad = k
            elif isinstance(v, torch.device) and v.type == state.backend:
                v = state.CPU
            elif k == "generator" and v is not None and v.device.type == "cpu":
                raise RuntimeError(state.GENERATOR)
            new_kwargs[k] = v
    if bad is not None and not allow_cpu:
        error = device_mismatch(func, bad if isinstance(bad, str) else _argname(func, bad))
        # the CPU tensor the op received (the indices of an embedding): what the diagnosis names
        error.cpu_operand = _cpu_operand(kwargs[bad] if isinstance(bad, str) else args[bad])  # type: ignore[attr-defined]
        raise error
    return new_args, new_kwargs, ids


def _cpu_operand(arg):
    if isinstance(arg, (list, tuple)):
        return next((x for x in arg if isinstance(x, torch.Tensor) and not isinstance(x, SimTensor) and x.dim() > 0),
                    None)
    return arg


def _argname(func, i: int) -> str | None:
    try:
        return func._schema.arguments[i].name
    except (AttributeError, IndexError):
        return None


def wrap_result(out, ids):
    """An op's results on the device: the wrapper of an operand it returned, else a new SimTensor."""
    if out is None:
        return None
    if isinstance(out, torch.Tensor):
        known = ids.get(id(out))
        if known is None:
            return SimTensor(out)
        if known is not out and (known.shape != out.shape or known.stride() != out.stride()):
            _sync_metadata(known, out)
        return known
    if isinstance(out, (list, tuple)):
        return type(out)(wrap_result(o, ids) for o in out)
    return out


def _sync_metadata(wrapper, elem):
    # An in-place view op (transpose_, squeeze_, resize_ ...) changed the
    # inner tensor's shape; give the wrapper the same, below dispatch.
    with torch._C._DisableTorchDispatch():
        wrapper.as_strided_(elem.size(), elem.stride(), elem.storage_offset())


def run_op(func, args, kwargs):
    """An op on the device: unwrapped and checked, run on the CPU values, its results wrapped."""
    new_args, new_kwargs, ids = unwrap_args(func, args, kwargs)
    if torch.Tag.nondeterministic_seeded in func.tags:
        out = run_mirrored(func, new_args, new_kwargs)
    else:
        out = func(*new_args, **new_kwargs)
    _bump_written_lists(func, args, kwargs)
    return wrap_result(out, ids)


@functools.lru_cache(maxsize=None)
def _written_lists(func) -> tuple:
    """(position, name) of each tensor list the op writes: the foreach ops, _fused_adam_ ..."""
    return tuple(
        (i, a.name) for i, a in enumerate(func._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write and isinstance(a.type, torch.ListType)
    )


def _bump_written_lists(func, args, kwargs):
    # An in-place op on one tensor bumps its version counter above dispatch
    # (ADInplaceOrView), but the foreach ops have no such kernel: real CUDA
    # bumps inside its kernels, the CPU in the per-tensor ops it loops over.
    # Here they run on the inner tensors, so bump the wrappers, or a backward
    # through a graph that saved a parameter the optimizer has since changed
    # would pass where CUDA raises "modified by an inplace operation".
    for i, name in _written_lists(func):
        tensors = args[i] if i < len(args) else kwargs.get(name)
        if tensors:
            torch.autograd.graph.increment_version([t for t in tensors if isinstance(t, SimTensor)])


# -- the legacy tensor types as SimTensor.type() sees them (legacy_types builds them) ------------

LEGACY_TYPES = ("DoubleTensor FloatTensor HalfTensor BFloat16Tensor LongTensor IntTensor ShortTensor "
                "CharTensor ByteTensor BoolTensor").split()


class LegacyCudaType(type):
    """The class of torch.cuda.FloatTensor & co.: their instances are the device tensors of their dtype."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, SimTensor) and obj.dtype == cls.dtype

    def __repr__(cls):
        return f"<class 'torch.cuda.{cls.__name__}'>"


def legacy_target(dtype):
    """(the CPU type, on the device) for a legacy tensor type named or given as a class; else None."""
    if isinstance(dtype, LegacyCudaType):
        return getattr(torch, dtype.__name__), True
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type):
        name = f"{dtype.__module__}.{dtype.__name__}"
    else:
        return None
    module, _, short = name.rpartition(".")
    if short not in LEGACY_TYPES or module not in ("torch", "torch.cuda"):
        return None
    return getattr(torch, short), module == "torch.cuda"


def to_legacy_type(t, dtype, non_blocking):
    """``t.type(dtype)`` for a legacy type (else None), which names a device too: x.type(torch.FloatTensor)
    of a CUDA tensor is on the CPU."""
    target = legacy_target(dtype)
    if target is None:
        return None
    cpu_type, on_device = target
    return original_to(t, state.real if on_device else state.CPU, cpu_type.dtype, non_blocking=non_blocking)
