"""The culprit of a device mismatch on one line of the user's code, and a finding in a rule's words.

A finding names the cause, the rule that would have caught it (the CG codes of ``cpu2gpu check``) and
where; the cause of a rule's finding is worded as the rule declares it (its runtime side,
cpu2gpu.rules.runtimeside), and so is what shows it. ``frame_findings`` reads the values on one failing
line and says which stayed on the CPU, and ``subject`` what ``cpu2gpu migrate`` follows to the binding
of that value.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from cpu2gpu.rules import RULES_BY_CODE
from cpu2gpu.rules.runtimeside import Symptom

from .frames import Frame, holder
from .values import (bare_move, device_argument, held_in_plain_container, is_cpu, module_attribute, on_device,
                     param_device, plain_attribute, same_data)

RULE_NAMES = {code: rule.name for code, rule in RULES_BY_CODE.items()}

# A tensor made from host data on the line (no name holds it): torch.from_numpy(a), torch.tensor(np_array).
CONVERSION = re.compile(r"\b(?:from_numpy|as_tensor|tensor|Tensor|FloatTensor|LongTensor)\(")
LOSS_WEIGHTS = ("weight", "pos_weight")


def finding(cause: str, rule: str | None, where: dict | None, subject: dict | None = None) -> dict:
    out = {"cause": cause, "rule": rule, "rule_name": RULE_NAMES.get(rule) if rule is not None else None,
           "where": where}
    if subject is not None:
        out["subject"] = subject
    return out


def declared(code: str, case: str) -> Symptom:
    """How rule ``code`` declares its ``case`` shows at runtime, and its words (the rule's runtime side)."""
    return RULES_BY_CODE[code].runtime.symptom(case)


def found(code: str, case: str, where: dict | None, subject: dict | None = None, **fields: Any) -> dict:
    """The finding of rule ``code``'s ``case``: its cause in the words the rule declares, ``fields`` filled in."""
    return finding(declared(code, case).says.format(**fields), code, where, subject)


def raised_as(exc: BaseException, qualified: str) -> bool:
    """``exc`` is an instance of the class named ``qualified`` (module.name, as a rule declares it)."""
    return any(f"{c.__module__}.{c.__qualname__}" == qualified for c in type(exc).__mro__)


def shows(symptom: Symptom, exc: BaseException, msg: str) -> bool:
    """The exception (``msg``: its message) is the rule's ``symptom``: one of its markers in the message,
    and its pattern and its class where it names them."""
    return any(m in msg for m in symptom.markers) \
        and (not symptom.pattern or re.search(symptom.pattern, msg) is not None) \
        and (not symptom.raised or raised_as(exc, symptom.raised))


def subject(fr: Frame, name: str, kind: str, rec=None, device_tensor: str | None = None, value=None) -> dict:
    """The value a finding is about, and the scope that binds it: what ``cpu2gpu migrate`` needs to
    find where the value is bound (the loop header, the assignment, the attribute set in __init__)
    and to write the move there. ``kind``: batch | tensor | attribute | module."""
    frame, lineno, held = (fr.frame, fr.lineno, name) if kind == "attribute" else \
        holder(fr.frame, fr.lineno, name, value, rec)
    code = frame.f_code
    out = {"name": held, "kind": kind, "file": fr.display(code.co_filename), "line": lineno, "func": code.co_name,
           "def_line": code.co_firstlineno if code.co_name != "<module>" else 0}
    if kind == "batch" and rec is not None:  # every batch still on the CPU here: one move at the loop head
        out["batches"] = sorted(n for n, v in frame.f_locals.items() if is_cpu(v) and rec.is_batch(v))
    elif kind == "tensor":  # the CPU tensors of the frame: a loop that binds several moves them at once
        out["cpu_tensors"] = sorted(n for n, v in frame.f_locals.items() if is_cpu(v))
    if isinstance(value, torch.Tensor) and value.is_leaf and value.requires_grad:
        out["leaf"] = True  # trained as it is: .to() would give a copy that is not a leaf
    if frame is not fr.frame:
        return out
    if kind == "attribute":
        owner = plain_attribute(name, None, fr)
        out["owner_class"] = type(owner).__name__ if owner is not None else None
    source = device_tensor if device_tensor in fr.args else device_argument(fr)
    if source is not None and "." not in source and source in fr.args:
        out["device_from"] = source  # a device tensor the function is given: `device=x.device`
    return out


def frame_findings(fr: Frame, rec, in_forward: bool, operand=None):
    """Culprits on one line: a list of (priority, finding). ``operand``: the CPU tensor the failing op was
    given, when the device knows it; the values that hold it come first among the CPU tensors."""
    out: list[tuple[float, Any]] = []  # (rank, a finding; rank 5: ("module", name, value, tensor, frame))
    held: list[str] = []  # CPU tensors the line reads through an object or a container: no name binds them
    values = list(fr.names())
    if operand is not None:
        # the operand's own name first (bound by a name, a move at its binding), then the rest in line order
        values.sort(key=lambda nv: not same_data(nv[1], operand))
    device_tensor = next((n for n, v in values if on_device(v)), None)
    for name, value in values:
        before = len(out)
        if isinstance(value, torch.nn.Module):
            if isinstance(value, torch.nn.modules.loss._Loss):
                for w in LOSS_WEIGHTS:
                    buf = value._buffers.get(w)
                    if is_cpu(buf):
                        out.append((0, found("CG106", "loss-weight", fr.where, name=name, weight=w,
                                             type=type(value).__name__, at=fr.at())))
            elif param_device(value) == "cpu" and device_tensor:
                container = held_in_plain_container(fr.owner, value)
                if container is not None:
                    out.append((0, found("CG109", "on-line", fr.where, name=name, type=type(value).__name__,
                                         container_type=type(vars(fr.owner)[container]).__name__,
                                         container=container, at=fr.at())))
                elif isinstance(fr.owner, torch.nn.Module) and fr.owner is not value \
                        and not any(m is value for m in fr.owner.modules()):
                    out.append((0, found("CG111", "built-in-method", fr.where, layer=f"{name} ({type(value).__name__})",
                                         owner=type(fr.owner).__name__, func=fr.func, at=fr.at())))
                else:
                    out.append((5, ("module", name, value, device_tensor, fr)))
        elif is_cpu(value):
            owner = plain_attribute(name, value, fr)
            stale = held_in_plain_container(fr.owner, value)
            if stale is not None and not any(value is b for b in fr.owner._buffers.values()):
                out.append((1, found("CG114", "stale-copy", fr.where, name=name,
                                     container_type=type(vars(fr.owner)[stale]).__name__, container=stale,
                                     at=fr.at())))
            elif owner is not None:
                out.append((1, found("CG105", "attribute", fr.where, subject(fr, name, "attribute", rec),
                                     name=name, owner=type(owner).__name__, at=fr.at())))
            elif rec.is_batch(value):
                out.append((2, found("CG103", "batch", fr.where, subject(fr, name, "batch", rec, value=value),
                                     name=name, at=fr.at())))
            elif "." in name or "[" in name:
                if not in_forward and not module_attribute(name, fr):
                    held.append(name)  # a data set's attribute, a container's item: moved where it is used
                continue
            elif name in fr.args:
                continue  # passed in: the caller's line names where it came from
            elif (bare := bare_move(fr, name)) is not None:
                out.append((1, found("CG110", "bare-move", fr.where, name=name, at=fr.at(), move=bare[1],
                                     move_line=bare[0])))
            elif not in_forward and name in fr.frame.f_locals and (source := device_argument(fr)) is not None:
                out.append((3, found("CG104", "given-device-tensors", fr.where,
                                     subject(fr, name, "tensor", rec, source, value=value),
                                     name=name, func=fr.func, at=fr.at(), source=source)))
            elif in_forward:
                out.append((3, found("CG104", "in-forward", fr.where,
                                     subject(fr, name, "tensor", rec, device_tensor, value=value),
                                     name=name, owner=type(fr.owner).__name__, func=fr.func, at=fr.at())))
            else:
                out.append((4, found("CG102", "tensor", fr.where,
                                     subject(fr, name, "tensor", rec, device_tensor, value=value),
                                     name=name, at=fr.at())))
            if len(out) > before and same_data(value, operand) and out[-1][0] in (1, 2, 3, 4):
                out[-1] = (out[-1][0] - 0.5, out[-1][1])  # the op's own CPU operand, before others of its rank
    there = device_tensor or next((n for n, v in values if isinstance(v, torch.nn.Module)
                                   and param_device(v) not in (None, "cpu")), None)
    if held and there is not None:
        used = subject(fr, held[0], "use", rec, device_tensor)
        used["expressions"] = held
        out.append((3.9 if any(same_data(v, operand) for n, v in values if n in held) else 4,
                    found("CG102", "at-use", fr.where, used, names=", ".join(held), at=fr.at(), on_device=there)))
    source = device_tensor or device_argument(fr)
    if not out and source is not None and CONVERSION.search(fr.text):
        # made from host data on the line and never bound: `x.masked_fill(torch.from_numpy(mask), 0)`
        out.append((3, found("CG104", "conversion", fr.where, subject(fr, "", "conversion", rec, device_tensor),
                             at=fr.at(), source=source)))
    return out
