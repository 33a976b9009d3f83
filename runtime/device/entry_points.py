"""The Python calls that name or reach the device, made to put their tensors on the simulated one.

``Tensor.to``/``.cuda``/``.pin_memory``, the factories (``torch.zeros(..., device="cuda")``) and
``Tensor.new_*``, ``torch.set_default_device``, ``DataParallel``'s scatter, ``torch.Generator(device="cuda")``
and the draws given one (rng.DeviceGenerator: the factories, ``torch.bernoulli``/``multinomial``/``poisson``
and the Tensor's random methods draw on the device from it, and refuse it for a CPU draw with CUDA's
words; ``torch.cuda.default_generators``), and the checks that real
CUDA makes before dispatch, which would otherwise name the backend ("simcuda") or abort the
simulated device's autograd thread: a CPU gradient for a device output, an RNN's input and state on
two devices. ``patch_entry_points(kind)`` (install() calls it) puts them in torch.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.jit import _builtins as jit_builtins

from . import rng, state
from .sim_tensor import SimTensor, original_to


def _map_device(d):
    """'cuda', 'cuda:0', torch.device('cuda'), 0 -> the simulated device (or 'mps'... when it plays MPS)."""
    if isinstance(d, str):
        if not d.startswith(state.kind):
            return d
        d = torch.device(d)
    elif isinstance(d, int) and not isinstance(d, bool) and state.kind == "cuda":
        d = torch.device("cuda", d)
    if isinstance(d, torch.device) and d.type == state.kind:
        if d.index not in (None, 0):
            raise RuntimeError("CUDA error: invalid device ordinal" if state.kind == "cuda" else
                               f"Invalid device index {d.index} for {state.kind}")
        return state.real
    return d


def names_device(d) -> bool:
    """Whether ``d`` names the device the simulator plays: 'cuda', 'cuda:1', torch.device('cuda'), 0 ..."""
    if isinstance(d, str):
        return d.startswith(state.kind)
    if isinstance(d, torch.device):
        return d.type == state.kind
    return isinstance(d, int) and not isinstance(d, bool) and state.kind == "cuda"


def _tensor_to(self, *args, **kwargs):
    if args:
        a0 = args[0]
        if isinstance(a0, (str, torch.device)) or (isinstance(a0, int) and not isinstance(a0, bool)):
            args = (_map_device(a0),) + args[1:]
    d = kwargs.get("device")
    if d is not None:
        kwargs["device"] = _map_device(d)
    return original_to(self, *args, **kwargs)


def _tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    target = _map_device(device if device is not None else "cuda")
    return original_to(self, target, non_blocking=non_blocking, memory_format=memory_format)


def _lands_on_device(d, args, kwargs) -> bool:
    """Whether a call's result is on the device: the device it names, else its first tensor's (the
    *_like factories, torch.normal(mean, std), torch.bernoulli(p) ...), else the default device."""
    if d is not None:
        return names_device(d) or torch.device(d).type == state.backend
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            return isinstance(a, SimTensor)
    return torch.get_default_device().type == state.backend


def _drawn_from(gen, call, args, kwargs):
    """``call(*args, **kwargs)``, a draw on the device given the device generator ``gen``: run without it,
    drawing from it (rng.draw_from)."""
    del kwargs["generator"]
    return rng.draw_from(gen, lambda: call(*args, **kwargs))


def _factory(orig):
    @functools.wraps(orig)
    def make(*args, **kwargs):
        d = kwargs.get("device")
        g = kwargs.get("generator")
        if d is not None and names_device(d):
            kwargs["device"] = _map_device(d)
            if g is not None and g.device.type == "cpu":
                raise RuntimeError(state.GENERATOR)
        if isinstance(g, rng.DeviceGenerator):
            if not _lands_on_device(d, args, kwargs):
                raise RuntimeError(state.CPU_GENERATOR)  # CUDA's CPU kernels refuse a CUDA generator
            return _drawn_from(g, orig, args, kwargs)
        return orig(*args, **kwargs)

    return make


def _drawing_method(orig):
    """A Tensor's random method (normal_, bernoulli, multinomial ...) given a device generator: drawn from
    it on the device, refused on the CPU. (Its generator is keyword-only.)"""

    @functools.wraps(orig)
    def draw(self, *args, **kwargs):
        g = kwargs.get("generator")
        if isinstance(g, rng.DeviceGenerator):
            if not isinstance(self, SimTensor):
                raise RuntimeError(state.CPU_GENERATOR)
            return _drawn_from(g, orig, (self, *args), kwargs)
        return orig(self, *args, **kwargs)

    return draw


class _GeneratorClass(type(torch._C.Generator)):  # type: ignore[misc]  # its metaclass (OpaqueBaseMeta)
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch._C.Generator) if cls is _Generator else super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, torch._C.Generator) if cls is _Generator else super().__subclasscheck__(sub)


class _Generator(torch._C.Generator, metaclass=_GeneratorClass):
    """torch.Generator: a generator on the device where one is named (rng.DeviceGenerator), else torch's;
    every torch._C.Generator is an instance."""

    def __new__(cls, device=None):
        if device is not None and names_device(device):
            return rng.DeviceGenerator(torch.device(state.kind, device) if isinstance(device, int) else device)
        if cls is not _Generator:  # a subclass the script defines
            return torch._C.Generator.__new__(cls, device)
        return torch._C.Generator(device)


_Generator.__module__, _Generator.__name__, _Generator.__qualname__ = "torch._C", "Generator", "Generator"
_Generator.__doc__ = torch._C.Generator.__doc__


_FACTORIES = (
    "zeros ones empty full rand randn randint randperm arange range linspace logspace eye "
    "tensor as_tensor asarray scalar_tensor empty_strided zeros_like ones_like empty_like "
    "full_like rand_like randn_like randint_like normal tril_indices triu_indices"
).split()
_NEW_METHODS = "new_tensor new_zeros new_ones new_empty new_full".split()
_DRAWS = "bernoulli multinomial poisson".split()  # torch's draws from a tensor given (normal is a factory)
_DRAWING_METHODS = ("normal_ uniform_ random_ bernoulli_ exponential_ geometric_ log_normal_ cauchy_ "
                    "bernoulli multinomial").split()


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
                raise RuntimeError(f"invalid gradient at index {i} - expected device {state.nominal} but got cpu")
        return orig(*args, **kwargs)

    return run


def _pin_memory(self, device=None):
    return self  # nothing to pin: the device memory is host memory here


def _data_parallel_scatter(self, inputs, kwargs, device_ids):
    # One simulated GPU: scatter is a move of every tensor to it, as on one real GPU.
    def move(x):
        if isinstance(x, torch.Tensor):
            return _tensor_to(x, state.real)
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            return type(x)(move(y) for y in x)
        if isinstance(x, dict):
            return type(x)((k, move(v)) for k, v in x.items())
        return x

    return (move(tuple(inputs)),), (move(dict(kwargs or {})),)


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


def patch_entry_points(kind: str) -> None:
    """Put these entry points in torch, for the device ``kind`` ("cuda" or "mps")."""
    T: Any = torch.Tensor  # patched
    T.to = _tensor_to
    if kind == "cuda":
        T.cuda = _tensor_cuda
    T.pin_memory = _pin_memory
    for name in _NEW_METHODS:
        setattr(T, name, _factory(getattr(torch._C.TensorBase, name)))
    for name in _DRAWING_METHODS:
        setattr(T, name, _drawing_method(getattr(T, name)))
    for name in _FACTORIES + _DRAWS:
        if hasattr(torch, name):
            orig = getattr(torch, name)
            setattr(torch, name, _factory(orig))
            op = jit_builtins._get_builtin_table().get(id(orig))
            if op is not None:  # TorchScript (torch.distributed.optim scripts its optimizers) sees the op
                jit_builtins._register_builtin(getattr(torch, name), op)
    torch_module: Any = torch  # patched
    torch_module.Generator = _Generator
    if kind == "cuda":
        torch.cuda.default_generators = (rng.device_generator,)
    data_parallel: Any = torch.nn.DataParallel  # patched
    data_parallel.scatter = _data_parallel_scatter
    _orig_set_default = torch.set_default_device
    torch.set_default_device = lambda device: _orig_set_default(_map_device(device) if device is not None else None)

    torch.autograd.backward = _gradients_checked(torch.autograd.backward, 1, "grad_tensors")
    torch.autograd.grad = _gradients_checked(torch.autograd.grad, 2, "grad_outputs")

    vf = torch._VF
    for name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        setattr(vf, name, _wrap_rnn(getattr(vf, name)))
