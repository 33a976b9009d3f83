"""A simulated CUDA device for machines without a GPU.

Tensors moved to "cuda" become SimTensor: a wrapper whose C++ device is the
PrivateUse1 backend (renamed "simcuda"), which shows ``cuda:0`` to Python and
computes on a plain CPU tensor inside. ``__torch_dispatch__`` refuses what real
CUDA refuses (mixed devices, CUDA indices into a CPU tensor, a CPU generator
for a device draw), with the messages real CUDA gives, so a script that passes
here does not crash on a GPU for a placement reason.

``install()`` changes torch process-wide and cannot be undone: call it once, in
a fresh process, before the script runs.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from . import sim_kernels

BACKEND = "simcuda"
CUDA0 = torch.device("cuda", 0)
CPU = torch.device("cpu")
aten = torch.ops.aten

_installed = False
_aten_lib: Any = None  # install()'s kernel registrations (a torch.library.Library)
_sim0: torch.device  # the real (C++) device of every SimTensor, set by install()
# The device the simulator plays, set by install(kind): "cuda" (an NVIDIA GPU) or "mps" (an Apple GPU,
# which also refuses float64). The messages below name it; install() rewrites them for "mps".
_kind = "cuda"
_nominal = CUDA0  # what SimTensor.device reports: cuda:0 or mps:0

# The device RNG. Real CUDA draws from its own generator (Philox), so a migration that draws on the
# device (torch.randn(..., device=device), dropout) gets other numbers than the CPU original. The
# simulated device instead mirrors the draws: its random kernels run on the CPU generator, in the
# order the script draws, so such a migration gets the original's numbers and compares step by step.
# torch.cuda's seeding and RNG state functions keep a generator of their own (_device_gen), which
# draws nothing: the CPU original ignores them as well.
_device_gen = torch.Generator()
_DEVICE_SEED_SALT = 0x5DEECE66D
mirrored_draws = 0  # random kernels run on the simulated device, drawn from the CPU generator

_MISMATCH = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
_NUMPY = "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
_INDEX = "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
_GENERATOR = "Expected a 'cuda' device type for generator but found 'cpu'"
_FLOAT64 = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
            "Please use float32 instead.")
# torch.cuda._lazy_init's words in a process forked after CUDA was initialised (a DataLoader worker).
_BAD_FORK = ("Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
             "multiprocessing, you must use the 'spawn' start method")

# Lazy initialisation, as torch.cuda does it: the first device work of a process (a device tensor
# made or moved, torch.cuda.current_device(), synchronize() ...) initialises "CUDA" there;
# is_available() and device_count() do not. A process forked after that is a bad fork (real
# CUDA cannot be used across fork()): its first device work raises _BAD_FORK. A fork of a process
# that never initialised CUDA is fine, and the child may initialise it itself. Only for "cuda":
# torch.mps raises nothing of the kind (its bad-fork flag only skips seeding in the child).
_init_pid: int | None = None  # the process that initialised the device; None until then
_bad_fork = False  # set in a child forked after _init_pid initialised (os.register_at_fork)


def _after_fork_in_child() -> None:
    global _bad_fork
    if _init_pid is not None and _kind == "cuda":
        _bad_fork = True


def _lazy_init() -> None:
    """torch.cuda._lazy_init: initialise the device in this process, or refuse in a bad fork."""
    global _init_pid
    if _bad_fork:
        raise RuntimeError(_BAD_FORK)
    if _init_pid is None:
        _init_pid = os.getpid()


def _is_initialized() -> bool:
    return _init_pid is not None and not _bad_fork


def _in_bad_fork() -> bool:
    return _bad_fork


_NOMINAL_STORAGE = 2**48


class SimTensor(torch.Tensor):
    """A tensor on the simulated CUDA device; ``_e`` holds its CPU values."""

    # Python-level calls pass straight to C++; the checks live in dispatch.
    # (torch's C function, not the classmethod signature the stubs give Tensor)
    __torch_function__: Any = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        if _bad_fork or _init_pid is None:
            _lazy_init()  # the first device tensor initialises "CUDA"; in a bad fork it raises
        if _kind == "mps" and elem.dtype is torch.float64:
            raise TypeError(_FLOAT64)  # every tensor made on (or moved to) the device passes here
        r = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=_sim0,
            requires_grad=elem.requires_grad,
            # The wrapper holds no memory; a large nominal size lets an
            # in-place resize (an out= op) pass the bounds check of as_strided_.
            storage_size=_NOMINAL_STORAGE,
        )
        r._e = elem
        return r

    @property
    def device(self):
        return _nominal

    @property
    def is_cuda(self):
        return _kind == "cuda"

    @property
    def is_mps(self):
        return _kind == "mps"

    @property
    def is_cpu(self):
        return False

    def numpy(self, *, force=False):
        if force:  # numpy(force=True) copies to the host, as on CUDA
            return self._e.detach().numpy().copy()
        raise TypeError(_NUMPY)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(_NUMPY)

    def tolist(self):
        return self._e.tolist()  # real CUDA copies to the host here, which is allowed

    def __repr__(self, *, tensor_contents=None):
        # Print as real CUDA does: the values, then device='cuda:0'.
        body = repr(self._e.detach())
        extra = f", device='{_nominal}'"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return body[:-1] + extra + ")" if body.endswith(")") else body

    def __reduce_ex__(self, proto):
        # Saved as a CUDA tensor would be: the storage is tagged "cuda:0".
        e = self._e.detach()
        _saving_ptrs.add(e.untyped_storage().data_ptr())
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
            return self._e.type().replace("torch.", f"torch.{_kind}.", 1)
        legacy = _to_legacy_type(self, dtype, non_blocking)
        if legacy is not None:
            return legacy
        return _orig_to(self, self._e.new_empty(0).type(dtype).dtype, non_blocking=non_blocking)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if _bad_fork:
            raise RuntimeError(_BAD_FORK)  # a device tensor inherited across the fork
        special = _SPECIAL.get(func)
        if special is not None:
            return special(func, args, kwargs or {})
        return _run(func, args, kwargs or {})


def _type_name(t: torch.Tensor) -> str:
    name = t._e.type() if isinstance(t, SimTensor) else t.type()
    return name.replace("torch.", f"torch.{_kind}.", 1) if isinstance(t, SimTensor) else name


def _mismatch(func, argname: str | None):
    # Pointwise ops report the bare message, like TensorIterator on CUDA; the
    # others name the argument, like the generated CUDA wrappers.
    if argname is None or torch.Tag.pointwise in func.tags:
        return RuntimeError(_MISMATCH)
    op = func._schema.name.split("::")[-1]
    return RuntimeError(
        f"{_MISMATCH} (when checking argument for argument {argname} in method wrapper_CUDA_{op})"
    )


def _unwrap(func, args, kwargs, allow_cpu=False):
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
            elif isinstance(v, torch.device) and v.type == BACKEND:
                v = CPU
            elif k == "generator" and v is not None and v.device.type == "cpu":
                raise RuntimeError(_GENERATOR)
            new_kwargs[k] = v
    if bad is not None and not allow_cpu:
        error = _mismatch(func, bad if isinstance(bad, str) else _argname(func, bad))
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


def _wrap(out, ids):
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
        return type(out)(_wrap(o, ids) for o in out)
    return out


def _sync_metadata(wrapper, elem):
    # An in-place view op (transpose_, squeeze_, resize_ ...) changed the
    # inner tensor's shape; give the wrapper the same, below dispatch.
    with torch._C._DisableTorchDispatch():
        wrapper.as_strided_(elem.size(), elem.stride(), elem.storage_offset())


def _run(func, args, kwargs):
    new_args, new_kwargs, ids = _unwrap(func, args, kwargs)
    if torch.Tag.nondeterministic_seeded in func.tags:
        out = _on_device_rng(func, new_args, new_kwargs)
    else:
        out = func(*new_args, **new_kwargs)
    _bump_written_lists(func, args, kwargs)
    return _wrap(out, ids)


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


def _on_device_rng(func, args, kwargs):
    """A random kernel on the device: drawn from the CPU generator, as the CPU original draws (mirrored)."""
    global mirrored_draws
    if kwargs.get("generator") is None:
        mirrored_draws += 1
    return func(*args, **kwargs)


# -- ops that need more than unwrap-and-check ---------------------------------


def _to_copy(func, args, kwargs):
    new_args, new_kwargs, ids = _unwrap(func, args, kwargs, allow_cpu=True)
    device = kwargs.get("device")
    out = func(*new_args, **new_kwargs)
    if device is not None and device.type == "cpu":
        return out  # .cpu(): a plain tensor
    return SimTensor(out)


def _copy(func, args, kwargs):
    # copy_ crosses devices on real CUDA too, in both directions.
    new_args, new_kwargs, ids = _unwrap(func, args, kwargs, allow_cpu=True)
    func(*new_args, **new_kwargs)
    return args[0]


def _check_indices(self_t, indices):
    if not isinstance(self_t, SimTensor) and any(isinstance(i, SimTensor) for i in indices if i is not None):
        raise RuntimeError(_INDEX)


def _index(func, args, kwargs):
    # CPU indices into a device tensor are fine; device indices into a CPU one are not.
    self_t, indices = args[0], args[1]
    _check_indices(self_t, indices)
    rest = list(args[2:])
    values_bad = (
        rest
        and isinstance(self_t, SimTensor)
        and isinstance(rest[0], torch.Tensor)
        and not isinstance(rest[0], SimTensor)
        and rest[0].dim() > 0
    )
    if values_bad:
        raise _mismatch(func, "values")
    ids = {}
    if isinstance(self_t, SimTensor):
        ids[id(self_t._e)] = self_t
        self_e = self_t._e
    else:
        self_e = self_t
    idx = [i._e if isinstance(i, SimTensor) else i for i in indices]
    rest = [r._e if isinstance(r, SimTensor) else r for r in rest]
    out = func(self_e, idx, *rest, **kwargs)
    return _wrap(out, ids)


def _rnn_check(input, hx):
    hs = hx if isinstance(hx, (list, tuple)) else (hx,)
    for h in hs:
        if isinstance(h, torch.Tensor) and isinstance(h, SimTensor) != isinstance(input, SimTensor):
            raise RuntimeError(
                "Input and hidden tensors are not at the same device, found input tensor at "
                f"{input.device} and hidden tensor at {h.device}"
            )


def _rnn_param_check(input, params):
    for p in params:
        if isinstance(p, torch.Tensor) and isinstance(p, SimTensor) != isinstance(input, SimTensor):
            raise RuntimeError(
                "Input and parameter tensors are not at the same device, found input tensor at "
                f"{input.device} and parameter tensor at {p.device}"
            )


def _wrap_rnn(orig):
    # The C++ RNN checks run before dispatch and would name the backend
    # "simcuda"; check here first, with the words real CUDA uses.
    @functools.wraps(orig)
    def rnn(*args, **kwargs):
        if len(args) >= 3 and isinstance(args[0], torch.Tensor):
            inp, second, third = args[0], args[1], args[2]
            if isinstance(second, torch.Tensor) and second.dtype == torch.int64 and second.dim() == 1:
                # packed form: (data, batch_sizes, hx, params, ...)
                _rnn_check(inp, third)
                if len(args) > 3:
                    _rnn_param_check(inp, args[3])
            else:
                _rnn_check(inp, second)
                _rnn_param_check(inp, third)
        return orig(*args, **kwargs)

    return rnn


def _convolution(func, args, kwargs):
    inp, weight = args[0], args[1]
    if isinstance(inp, SimTensor) != isinstance(weight, SimTensor):
        msg = f"Input type ({_type_name(inp)}) and weight type ({_type_name(weight)}) should be the same"
        if not isinstance(inp, SimTensor):
            msg += " or input should be a MKLDNN tensor and weight is a dense tensor"
        raise RuntimeError(msg)
    return _run(func, args, kwargs)


def _stand_in(fn):
    def run(func, args, kwargs):
        new_args, new_kwargs, ids = _unwrap(func, args, kwargs)
        return _wrap(fn(*new_args, **new_kwargs), ids)

    return run


def _pack(func, args, kwargs):
    # Sequence lengths and batch sizes live on the CPU on real CUDA too.
    new_args, new_kwargs, ids = _unwrap(func, args, kwargs, allow_cpu=True)
    data, batch_sizes = func(*new_args, **new_kwargs)
    return SimTensor(data), batch_sizes


def _pack_backward(func, args, kwargs):
    new_args, new_kwargs, ids = _unwrap(func, args, kwargs, allow_cpu=True)
    return SimTensor(func(*new_args, **new_kwargs))


_SPECIAL = {
    aten._pack_padded_sequence.default: _pack,
    aten._pack_padded_sequence_backward.default: _pack_backward,
    aten.convolution.default: _convolution,
    aten._thnn_fused_lstm_cell.default: _stand_in(sim_kernels.lstm_cell),
    aten._thnn_fused_lstm_cell_backward_impl.default: _stand_in(sim_kernels.lstm_cell_backward),
    aten._thnn_fused_gru_cell.default: _stand_in(sim_kernels.gru_cell),
    aten._thnn_fused_gru_cell_backward.default: _stand_in(sim_kernels.gru_cell_backward),
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy,
    aten.index.Tensor: _index,
    aten.index_put_.default: _index,
    aten.index_put.default: _index,
    aten._index_put_impl_.default: _index,
}


# -- PrivateUse1 kernels: a device tensor made with no SimTensor in the call ---


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return SimTensor(torch.empty(size, dtype=dtype, memory_format=memory_format or torch.contiguous_format))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return SimTensor(torch.empty_strided(size, stride, dtype=dtype))


def _to_copy_kernel(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    return SimTensor(aten._to_copy.default(x, dtype=dtype, memory_format=memory_format))


def _local_scalar_dense_kernel(x):
    # Every scalar read (item, int, float, bool, __index__) ends in _local_scalar_dense. torch builds a
    # tensor from Python data (torch.tensor([t, ...]), as_tensor, new_tensor, torch.LongTensor([[t]]))
    # below the Python dispatch key, so that dispatch modes do not see it, and reads each element that
    # is a tensor with item(): a device element arrives here, not in __torch_dispatch__. Real CUDA
    # copies it to the host.
    if not isinstance(x, SimTensor):  # no values to read: the simulation's limit, as before
        raise NotImplementedError(f"Could not run 'aten::_local_scalar_dense' with arguments from the "
                                  f"'{BACKEND}' backend.")
    return aten._local_scalar_dense.default(x._e)


# -- Python entry points that name a device -------------------------------------


def _map_device(d):
    """'cuda', 'cuda:0', torch.device('cuda'), 0 -> the simulated device (or 'mps'... when it plays MPS)."""
    if isinstance(d, str):
        if not d.startswith(_kind):
            return d
        d = torch.device(d)
    elif isinstance(d, int) and not isinstance(d, bool) and _kind == "cuda":
        d = torch.device("cuda", d)
    if isinstance(d, torch.device) and d.type == _kind:
        if d.index not in (None, 0):
            raise RuntimeError("CUDA error: invalid device ordinal" if _kind == "cuda" else
                               f"Invalid device index {d.index} for {_kind}")
        return _sim0
    return d


def _is_cuda_device(d) -> bool:
    if isinstance(d, str):
        return d.startswith(_kind)
    if isinstance(d, torch.device):
        return d.type == _kind
    return isinstance(d, int) and not isinstance(d, bool) and _kind == "cuda"


_orig_to = torch._C.TensorBase.to


def _tensor_to(self, *args, **kwargs):
    if args:
        a0 = args[0]
        if isinstance(a0, (str, torch.device)) or (isinstance(a0, int) and not isinstance(a0, bool)):
            args = (_map_device(a0),) + args[1:]
    d = kwargs.get("device")
    if d is not None:
        kwargs["device"] = _map_device(d)
    return _orig_to(self, *args, **kwargs)


def _tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    target = _map_device(device if device is not None else "cuda")
    return _orig_to(self, target, non_blocking=non_blocking, memory_format=memory_format)


def _tensor_type(self, dtype=None, non_blocking=False, **kwargs):
    if dtype is None:
        return torch._C.TensorBase.type(self)
    legacy = _to_legacy_type(self, dtype, non_blocking)
    if legacy is not None:
        return legacy
    return torch._C.TensorBase.type(self, dtype, non_blocking, **kwargs)


# -- the legacy tensor types: torch.cuda.FloatTensor & co. -----------------------
#
# Old scripts pick a type, `Tensor = torch.cuda.FloatTensor if cuda else
# torch.FloatTensor`, then build with it (`Tensor(n, 1)`, `Tensor(ndarray)`),
# convert with it (`x.type(Tensor)`) and test with it (isinstance). A CPU build
# refuses every use of the torch.cuda ones: they are replaced by classes that
# do the same on the simulated device.

_LEGACY_TYPES = ("DoubleTensor FloatTensor HalfTensor BFloat16Tensor LongTensor IntTensor ShortTensor "
                 "CharTensor ByteTensor BoolTensor").split()


class _CudaTypeMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, SimTensor) and obj.dtype == cls.dtype

    def __repr__(cls):
        return f"<class 'torch.cuda.{cls.__name__}'>"


def _legacy_target(dtype):
    """(the CPU type, on the device) for a legacy tensor type named or given as a class; else None."""
    if isinstance(dtype, _CudaTypeMeta):
        return getattr(torch, dtype.__name__), True
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type):
        name = f"{dtype.__module__}.{dtype.__name__}"
    else:
        return None
    module, _, short = name.rpartition(".")
    if short not in _LEGACY_TYPES or module not in ("torch", "torch.cuda"):
        return None
    return getattr(torch, short), module == "torch.cuda"


def _to_legacy_type(t, dtype, non_blocking):
    # A legacy type names a device too: x.type(torch.FloatTensor) of a CUDA tensor is on the CPU.
    target = _legacy_target(dtype)
    if target is None:
        return None
    cpu_type, on_device = target
    return _orig_to(t, _sim0 if on_device else CPU, cpu_type.dtype, non_blocking=non_blocking)


def _legacy_new(cls, args, kwargs):
    """torch.cuda.FloatTensor(...): what the CPU type builds, on the device."""
    device = kwargs.pop("device", None)
    if device is not None and not _is_cuda_device(device):
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
        target = _legacy_target(t)
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
    return _CudaTypeMeta(name, (), {
        "__new__": lambda cls, *args, **kwargs: _legacy_new(cls, args, kwargs),
        "__module__": "torch.cuda",
        "dtype": getattr(torch, name).dtype,
        "is_cuda": True,
        "is_sparse": False,
    })


def _factory(orig):
    @functools.wraps(orig)
    def make(*args, **kwargs):
        d = kwargs.get("device")
        if d is not None and _is_cuda_device(d):
            kwargs["device"] = _map_device(d)
            g = kwargs.get("generator")
            if g is not None and g.device.type == "cpu":
                raise RuntimeError(_GENERATOR)
        return orig(*args, **kwargs)

    return make


_FACTORIES = (
    "zeros ones empty full rand randn randint randperm arange range linspace logspace eye "
    "tensor as_tensor asarray scalar_tensor empty_strided zeros_like ones_like empty_like "
    "full_like rand_like randn_like randint_like normal tril_indices triu_indices"
).split()
_NEW_METHODS = "new_tensor new_zeros new_ones new_empty new_full".split()


def _gradients_checked(orig, grads_at: int, grads_name: str):
    """torch.autograd.backward / grad: a CPU gradient given for an output on the device raises as on CUDA,
    where the engine checks it on the calling thread ("invalid gradient at index 0 - expected device cuda:0
    but got cpu"); unchecked, the simulated device's worker thread aborts the process. A 0-dim gradient is
    let through: the engine moves it."""

    @functools.wraps(orig)
    def run(*args, **kwargs):
        outputs = args[0] if args else kwargs.get("tensors", kwargs.get("outputs"))
        grads = args[grads_at] if len(args) > grads_at else kwargs.get(grads_name)
        outs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs or ())
        given = (grads,) if isinstance(grads, torch.Tensor) else tuple(grads or ())
        for i, (out, grad) in enumerate(zip(outs, given)):
            if isinstance(out, SimTensor) and isinstance(grad, torch.Tensor) and not isinstance(grad, SimTensor) \
                    and grad.dim() > 0:
                raise RuntimeError(f"invalid gradient at index {i} - expected device {_nominal} but got cpu")
        return orig(*args, **kwargs)

    return run


def _pin_memory(self, device=None):
    return self  # nothing to pin: the device memory is host memory here


# -- torch.cuda / torch.accelerator as a one-GPU machine answers ------------


class _DeviceProperties:
    name = "Simulated CUDA device (cpu2gpu sim)"
    major, minor = 8, 0
    total_memory = 16 * 1024**3
    multi_processor_count = 1

    def __repr__(self):
        return f"_CudaDeviceProperties(name='{self.name}', major=8, minor=0, total_memory=16384MB)"


def _seed_device(seed: int) -> None:
    _device_gen.manual_seed((int(seed) ^ _DEVICE_SEED_SALT) & 0xFFFFFFFFFFFFFFFF)


class _DeviceContext:
    def __init__(self, device=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _SimBackendModule:
    """torch.simcuda: what torch asks of a PrivateUse1 backend."""

    def is_initialized(self):
        return _is_initialized()

    def is_available(self):
        return True

    def current_device(self):
        _lazy_init()
        return 0

    def device_count(self):
        return 1

    def _is_in_bad_fork(self):
        return _bad_fork  # torch.manual_seed skips the device of a bad fork, as it does for CUDA

    def manual_seed_all(self, seed):
        _seed_device(seed)

    def get_rng_state(self, device=None):
        return _device_gen.get_state()

    def set_rng_state(self, state, device=None):
        _device_gen.set_state(state)

    def get_amp_supported_dtype(self):
        return [torch.float16, torch.bfloat16]


class _Event:
    """torch.cuda.Event: times on the host clock; everything is synchronous here."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self._t = None

    def record(self, stream=None):
        import time

        _lazy_init()  # on the current stream: initialises CUDA

        self._t = time.perf_counter()

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        return (end._t - self._t) * 1000.0


class _Stream:
    def __init__(self, *args, **kwargs):
        _lazy_init()  # torch.cuda.Stream() initialises CUDA

    def synchronize(self):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event or _Event()
        event.record()
        return event


def _data_parallel_scatter(self, inputs, kwargs, device_ids):
    # One simulated GPU: scatter is a move of every tensor to it, as on one real GPU.
    def move(x):
        if isinstance(x, torch.Tensor):
            return _tensor_to(x, _sim0)
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            return type(x)(move(y) for y in x)
        if isinstance(x, dict):
            return type(x)((k, move(v)) for k, v in x.items())
        return x

    return (move(tuple(inputs)),), (move(dict(kwargs or {})),)


def _const(value):
    # A fresh function per name: torch._dynamo refuses one object under two names.
    def f(*args, **kwargs):
        return value

    return f


def _initializing(value):
    # A torch.cuda call that initialises CUDA (it calls _lazy_init) and answers `value`.
    def f(*args, **kwargs):
        _lazy_init()
        return value

    return f


def _patch_cuda_module() -> None:
    c: Any = torch.cuda  # patched: its stand-ins are not torch's signatures
    # What initialises CUDA on a real machine goes through _lazy_init; is_available(), device_count(),
    # the memory counters, empty_cache() and the seeding (queued until the initialisation) do not.
    for name in ("init", "_lazy_init", "set_device", "synchronize"):
        setattr(c, name, _initializing(None))
    for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "reset_max_memory_allocated"):
        setattr(c, name, _const(None))
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        setattr(c, name, _const(0))
    c.current_device = _initializing(0)
    c.is_available = _const(True)
    c.is_bf16_supported = _initializing(True)
    c.is_initialized = _is_initialized
    c._is_in_bad_fork = _in_bad_fork  # torch.manual_seed asks it before seeding the device
    c.device_count = _const(1)
    c.get_device_name = _initializing(_DeviceProperties.name)
    c.get_device_capability = _initializing((8, 0))
    def get_device_properties(device=None):
        _lazy_init()
        return _DeviceProperties()

    def get_rng_state(device="cuda"):
        _lazy_init()
        return _device_gen.get_state()

    def get_rng_state_all():
        _lazy_init()
        return [_device_gen.get_state()]

    c.get_device_properties = get_device_properties
    c.manual_seed = lambda seed: _seed_device(seed)
    c.manual_seed_all = lambda seed: _seed_device(seed)
    c.seed = lambda: _device_gen.seed()
    c.seed_all = lambda: _device_gen.seed()
    c.initial_seed = lambda: _device_gen.initial_seed()
    c.get_rng_state = get_rng_state
    c.get_rng_state_all = get_rng_state_all
    c.set_rng_state = lambda state, device="cuda": _device_gen.set_state(state)
    c.set_rng_state_all = lambda states: _device_gen.set_state(states[0])
    c.device = _DeviceContext
    c.device_of = _DeviceContext
    c.Event = _Event
    c.Stream = _Stream
    c.current_stream = lambda device=None: _Stream()
    c.default_stream = lambda device=None: _Stream()
    c.stream = lambda stream=None: _DeviceContext()
    torch.backends.cuda.is_built = _const(True)
    # cuDNN is not there: say "not acceptable" quietly, as for an unsupported input.
    torch.backends.cudnn.is_acceptable = _const(False)


cuda_queries = 0  # sim-mps: how often the script asked torch.cuda.is_available() (answered False)


def _patch_mps_module():
    """An Apple machine: torch.backends.mps answers yes, torch.cuda stays as it is (no CUDA there)."""
    cuda_is_available = torch.cuda.is_available

    def is_available():
        global cuda_queries
        cuda_queries += 1
        return cuda_is_available()

    torch.cuda.is_available = is_available
    mps = torch.backends.mps
    mps.is_available = _const(True)
    mps.is_built = _const(True)
    m = torch.mps
    for name in ("synchronize", "empty_cache", "set_per_process_memory_fraction"):
        setattr(m, name, _const(None))
    for name in ("current_allocated_memory", "driver_allocated_memory"):
        setattr(m, name, _const(0))
    m.recommended_max_memory = _const(16 * 2**30)
    m.device_count = _const(1)
    m.manual_seed = lambda seed: _seed_device(seed)
    m.seed = lambda: _device_gen.seed()
    m.get_rng_state = lambda device="mps": _device_gen.get_state()
    m.set_rng_state = lambda state, device="mps": _device_gen.set_state(state)


def _patch_accelerator():
    acc = torch.accelerator
    acc.is_available = _const(True)
    acc.current_accelerator = lambda check_available=False: torch.device(_kind)
    acc.device_count = _const(1)
    acc.current_device_index = _initializing(0)  # these initialise the device, as in torch
    acc.current_device_idx = _initializing(0)
    acc.set_device_index = _initializing(None)
    acc.set_device_idx = _initializing(None)
    acc.synchronize = _initializing(None)
    acc.get_device_capability = _const({})


# -- checkpoints: a CUDA checkpoint, as a CPU-only machine sees it ------------

_saving_ptrs: set = set()


def _sim_tag(storage):
    if storage.data_ptr() in _saving_ptrs:
        return f"{_kind}:0"
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
        return obj.to(_kind)  # a whole pickled model: map_location puts its parameters on the device
    if isinstance(obj, torch.nn.Parameter):
        return torch.nn.Parameter(_to_sim_tree(obj.data), obj.requires_grad)
    if isinstance(obj, torch.Tensor):
        return SimTensor(obj.detach()) if not obj.requires_grad else _orig_to(obj, _sim0)
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
            _saving_ptrs.clear()

    return save


def _wrap_load(orig):
    @functools.wraps(orig)
    def load(f, map_location=None, *args, **kwargs):
        if map_location is not None and _is_cuda_device(map_location) and not callable(map_location):
            return _to_sim_tree(orig(f, *args, map_location="cpu", **kwargs))
        return orig(f, map_location, *args, **kwargs)

    return load


# -- Module.to swaps parameters, load_state_dict copies into them -------------
#
# Module.to keeps each Parameter object (the optimizer may hold it already), as
# it does on real CUDA; a CPU Parameter cannot take a device wrapper by
# `.data =`, so the move swaps them. load_state_dict must not swap: real torch
# copies the checkpoint into the parameters in place, which works while an
# autograd graph holds them, where a swap is refused ("Expected use_count of t1
# to be 1 or 2 ..."), e.g. loading the best weights after the training loop.

_script_swaps = False  # what the script itself set in torch.__future__ (torch's default: copy)
_loading = threading.local()
_applying = threading.local()
_orig_swap_tensors = torch.utils.swap_tensors


def _swap_on_conversion() -> bool:
    if getattr(_loading, "depth", 0):
        return _script_swaps
    return True


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


def _swap_on_move_copy_on_load() -> None:
    future: Any = torch.__future__  # patched
    # torch.nn.utils.parametrize imported the getter itself: it reads this flag.
    future.set_swap_module_params_on_conversion(True)
    future.get_swap_module_params_on_conversion = _swap_on_conversion
    future.set_swap_module_params_on_conversion = _set_swap_on_conversion
    module: Any = torch.nn.Module  # patched
    module._load_from_state_dict = _copying_load(module._load_from_state_dict)
    module._apply = _tracking_apply(module._apply)
    torch.utils.swap_tensors = _swap_or_set_data


# -- install ------------------------------------------------------------------


def install(kind: str = "cuda") -> None:
    """Make this process a one-GPU machine whose GPU computes on the CPU.

    ``kind`` is the GPU it plays: "cuda" (NVIDIA) or "mps" (Apple: the device is ``mps:0``,
    torch.cuda says no GPU, and float64 on the device raises as MPS does).
    """
    global _installed, _sim0, _kind, _nominal, BACKEND, _MISMATCH, _NUMPY, _GENERATOR, _aten_lib
    if _installed:
        return
    if kind not in ("cuda", "mps"):
        raise ValueError(f"unknown simulated device {kind!r}")
    if kind != "cuda":
        _kind, _nominal, BACKEND = kind, torch.device(kind, 0), f"sim{kind}"
        _MISMATCH = _MISMATCH.replace("cuda:0", f"{kind}:0")
        _NUMPY = _NUMPY.replace("cuda:0", f"{kind}:0")
        _GENERATOR = _GENERATOR.replace("'cuda'", f"'{kind}'")
    # The default-device mode knows the factories by identity: let it learn
    # them before they are wrapped.
    from torch.utils import _device as _device_mod

    _device_mod._device_constructors()
    _setup_privateuseone_for_python_backend(BACKEND, backend_module=_SimBackendModule())
    _sim0 = torch.device(BACKEND, 0)

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    lib.impl("_to_copy", _to_copy_kernel, "PrivateUse1")
    lib.impl("_local_scalar_dense", _local_scalar_dense_kernel, "PrivateUse1")
    _aten_lib = lib  # kept alive: dropping it unregisters the kernels

    T: Any = torch.Tensor  # patched
    T.to = _tensor_to
    if kind == "cuda":
        T.cuda = _tensor_cuda
    T.type = _tensor_type
    T.pin_memory = _pin_memory
    for name in _NEW_METHODS:
        setattr(T, name, _factory(getattr(torch._C.TensorBase, name)))
    from torch.jit import _builtins as jit_builtins

    for name in _FACTORIES:
        if hasattr(torch, name):
            orig = getattr(torch, name)
            setattr(torch, name, _factory(orig))
            op = jit_builtins._get_builtin_table().get(id(orig))
            if op is not None:  # TorchScript (torch.distributed.optim scripts its optimizers) sees the op
                jit_builtins._register_builtin(getattr(torch, name), op)
    data_parallel: Any = torch.nn.DataParallel  # patched
    data_parallel.scatter = _data_parallel_scatter
    _orig_set_default = torch.set_default_device
    torch.set_default_device = lambda device: _orig_set_default(_map_device(device) if device is not None else None)

    torch.autograd.backward = _gradients_checked(torch.autograd.backward, 1, "grad_tensors")
    torch.autograd.grad = _gradients_checked(torch.autograd.grad, 2, "grad_outputs")

    vf = torch._VF
    for name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        setattr(vf, name, _wrap_rnn(getattr(vf, name)))

    if kind == "cuda":
        _patch_cuda_module()
        for name in _LEGACY_TYPES:
            setattr(torch.cuda, name, _cuda_type(name))
        torch.set_default_tensor_type = _default_tensor_type(torch.set_default_tensor_type)
    else:
        _patch_mps_module()
    _patch_accelerator()
    torch.serialization.register_package(1, _sim_tag, _sim_deserialize)
    torch.save = _wrap_save(torch.save)
    torch.load = _wrap_load(torch.load)

    # The optimizers take their multi-tensor (foreach) path on CUDA: take it
    # here too (one dispatch per step instead of one per parameter).
    from torch.optim import optimizer as _optimizer

    _optimizer._foreach_supported_types.append(SimTensor)

    _swap_on_move_copy_on_load()
    _seed_device(torch.initial_seed())
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _installed = True


def seed(seed: int) -> None:
    _seed_device(seed)


def mirrored() -> int:
    """How many random kernels ran on the simulated device, drawn from the CPU generator."""
    return mirrored_draws


__all__ = ["install", "SimTensor", "BACKEND", "mirrored", "seed"]
