"""What the values on a failing line of the user's code are.

A tensor on the CPU or on a device, the device of a module's weights, a tensor kept as a plain attribute
of a module or a value held in a plain list or dict on it, a move whose result was thrown away, the
module whose own forward raised, an optimizer whose state stayed on the CPU, how a failing load began.
The culprits (culprits.py) and the diagnosis (diagnose.py) ask these of the values the frames hold.
"""

from __future__ import annotations

import linecache
import re

import torch

from .frames import Frame


def param_device(module):
    """The device type of the module's first parameter (else buffer); None when it has neither."""
    p = next(module.parameters(), None)
    if p is None:
        p = next(module.buffers(), None)
    return None if p is None else p.device.type


def is_cpu(t):
    """A CPU tensor with dimensions (a 0-dim one joins device tensors as a number does)."""
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0


def on_device(t):
    """A tensor on an accelerator."""
    return isinstance(t, torch.Tensor) and t.device.type in ("cuda", "mps", "xpu")


def plain_attribute(name, value, fr: Frame):
    """'self.mask' -> (owner, 'mask') when it is a tensor that is neither a
    parameter nor a buffer of its module."""
    if "." not in name:
        return None
    owner_name, attr = name.rsplit(".", 1)
    ok, owner = fr.resolve(owner_name.split("."))
    if not ok or not isinstance(owner, torch.nn.Module):
        return None
    if attr in owner._parameters or attr in owner._buffers:
        return None
    if attr in owner.__dict__ and isinstance(owner.__dict__[attr], torch.Tensor):
        return owner
    return None


_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))


def held_in_plain_container(owner, value):
    """The attribute of ``owner`` (a plain list, tuple or dict) that holds ``value``, if any."""
    if not isinstance(owner, torch.nn.Module):
        return None
    for attr, held in vars(owner).items():
        if attr in _MODULE_INTERNALS:
            continue  # _modules, _parameters, _buffers: where a module registers what it holds
        items = held.values() if isinstance(held, dict) else held if isinstance(held, (list, tuple)) else ()
        if any(item is value for item in items):
            return attr
    return None


def bare_move(fr: Frame, name: str):
    """(line, code) of a statement ``name.to(...)`` / ``name.cuda()`` alone, earlier in the function."""
    pattern = re.compile(rf"^\s*({re.escape(name)}\.(?:to|cuda)\(.*\))\s*(?:#.*)?$")
    for number in range(fr.frame.f_code.co_firstlineno, fr.lineno):
        match = pattern.match(linecache.getline(fr.file, number))
        if match:
            return number, match.group(1)
    return None


def device_argument(fr: Frame):
    """The name of an argument of the frame's function that is a device tensor."""
    for name in sorted(fr.args):
        if on_device(fr.frame.f_locals.get(name)):
            return name
    return None


def failing_module(tb):
    """The module whose own forward raised (a torch layer, below the user's frames)."""
    found = None
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module):
            found = owner
        tb = tb.tb_next
    return found


def module_seen_on_device(rec, module) -> bool:
    """The run called ``module`` on the device (before it failed)."""
    r = rec.modules.get(id(module))
    return r is not None and r.ref() is module and r.device_calls > 0


def same_data(value, operand) -> bool:
    """``value`` is the CPU tensor the failing op received, or the tensor it is a view of (``x`` for ``x[i]``)."""
    if operand is None or not isinstance(value, torch.Tensor):
        return False
    if value is operand:
        return True
    try:
        return value.untyped_storage().data_ptr() == operand.untyped_storage().data_ptr() \
            and value.device == operand.device
    except (RuntimeError, NotImplementedError):
        return False


def module_attribute(name: str, fr: Frame) -> bool:
    """``self.fc.weight``, ``model.bias``: the module it belongs to is what the script forgot."""
    owner = name.split("[", 1)[0].rsplit(".", 1)[0] if "." in name.split("[", 1)[0] else None
    if owner is None:
        return False
    ok, value = fr.resolve(owner.split("."))
    return ok and isinstance(value, torch.nn.Module)


def optimizer_with_cpu_state(fr: Frame):
    """The name of an optimizer on the line whose state is on the CPU and its parameters on the device."""
    for name, value in fr.names():
        if not isinstance(value, torch.optim.Optimizer):
            continue
        for param, state in value.state.items():
            if param.device.type in ("cuda", "mps", "xpu") and any(is_cpu(v) for v in state.values()):
                return name
    return None


def load_entry(tb) -> str | None:
    """How the failing deserialization began: "torch.load" when torch.load was
    called, "unpickle" when pickle met a tensor storage (its bytes are read by
    torch.storage._load_from_bytes, with no map_location anyone could pass)."""
    load_code = torch.serialization.load.__code__
    from_bytes = getattr(torch.storage, "_load_from_bytes", None)
    bytes_code = from_bytes.__code__ if from_bytes is not None else None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code is load_code:
            return "torch.load"
        if code is bytes_code:
            return "unpickle"
        tb = tb.tb_next
    return None
