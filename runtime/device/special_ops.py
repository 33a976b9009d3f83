"""The ops that need more than SimTensor's unwrap-and-check, and their handlers.

Copies across devices (``.to``, ``.cpu()``, ``copy_``), indexing (CPU indices into a device tensor
are fine, device indices into a CPU one are not), convolution (real CUDA's words for an input and
a weight on two devices), packed sequences (their lengths stay on the CPU) and the fused RNN
cells, which a CPU build has no kernel for. ``route()`` (install() calls it) hands them to
SimTensor's dispatch.
"""

from __future__ import annotations

import torch

from . import fused_rnn_cells, state
from .sim_tensor import OP_HANDLERS, SimTensor, device_mismatch, run_op, unwrap_args, wrap_result

aten = torch.ops.aten


def _type_name(t: torch.Tensor) -> str:
    name = t._e.type() if isinstance(t, SimTensor) else t.type()
    return name.replace("torch.", f"torch.{state.kind}.", 1) if isinstance(t, SimTensor) else name


def _to_copy(func, args, kwargs):
    new_args, new_kwargs, ids = unwrap_args(func, args, kwargs, allow_cpu=True)
    device = kwargs.get("device")
    out = func(*new_args, **new_kwargs)
    if device is not None and device.type == "cpu":
        return out  # .cpu(): a plain tensor
    return SimTensor(out)


def _copy(func, args, kwargs):
    # copy_ crosses devices on real CUDA too, in both directions.
    new_args, new_kwargs, ids = unwrap_args(func, args, kwargs, allow_cpu=True)
    func(*new_args, **new_kwargs)
    return args[0]


def _check_indices(self_t, indices):
    if not isinstance(self_t, SimTensor) and any(isinstance(i, SimTensor) for i in indices if i is not None):
        raise RuntimeError(state.INDEX)


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
        raise device_mismatch(func, "values")
    ids = {}
    if isinstance(self_t, SimTensor):
        ids[id(self_t._e)] = self_t
        self_e = self_t._e
    else:
        self_e = self_t
    idx = [i._e if isinstance(i, SimTensor) else i for i in indices]
    rest = [r._e if isinstance(r, SimTensor) else r for r in rest]
    out = func(self_e, idx, *rest, **kwargs)
    return wrap_result(out, ids)


def _convolution(func, args, kwargs):
    inp, weight = args[0], args[1]
    if isinstance(inp, SimTensor) != isinstance(weight, SimTensor):
        msg = f"Input type ({_type_name(inp)}) and weight type ({_type_name(weight)}) should be the same"
        if not isinstance(inp, SimTensor):
            msg += " or input should be a MKLDNN tensor and weight is a dense tensor"
        raise RuntimeError(msg)
    return run_op(func, args, kwargs)


def _stand_in(fn):
    def run(func, args, kwargs):
        new_args, new_kwargs, ids = unwrap_args(func, args, kwargs)
        return wrap_result(fn(*new_args, **new_kwargs), ids)

    return run


def _pack(func, args, kwargs):
    # Sequence lengths and batch sizes live on the CPU on real CUDA too.
    new_args, new_kwargs, ids = unwrap_args(func, args, kwargs, allow_cpu=True)
    data, batch_sizes = func(*new_args, **new_kwargs)
    return SimTensor(data), batch_sizes


def _pack_backward(func, args, kwargs):
    new_args, new_kwargs, ids = unwrap_args(func, args, kwargs, allow_cpu=True)
    return SimTensor(func(*new_args, **new_kwargs))


_HANDLERS = {
    aten._pack_padded_sequence.default: _pack,
    aten._pack_padded_sequence_backward.default: _pack_backward,
    aten.convolution.default: _convolution,
    aten._thnn_fused_lstm_cell.default: _stand_in(fused_rnn_cells.lstm_cell),
    aten._thnn_fused_lstm_cell_backward_impl.default: _stand_in(fused_rnn_cells.lstm_cell_backward),
    aten._thnn_fused_gru_cell.default: _stand_in(fused_rnn_cells.gru_cell),
    aten._thnn_fused_gru_cell_backward.default: _stand_in(fused_rnn_cells.gru_cell_backward),
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy,
    aten.index.Tensor: _index,
    aten.index_put_.default: _index,
    aten.index_put.default: _index,
    aten._index_put_impl_.default: _index,
}


def route() -> None:
    """Send these ops of SimTensor's dispatch to their handlers."""
    OP_HANDLERS.update(_HANDLERS)
