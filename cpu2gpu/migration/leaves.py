"""The tensors an optimizer trains as they are made (``w = torch.randn(3, 1, requires_grad=True)``).

A run that trains plain tensors on the CPU, or meets one of them beside a device tensor, locates them;
they must be made on the device: ``device=`` on their factory. ``.to(device)`` would give a copy that
is not a leaf, which the optimizer refuses (or, handed the original, trains on the CPU).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ..analysis.facts import Facts
from ..analysis.torchapi import FACTORIES, TENSOR_ARGUMENT_FACTORIES
from .binding import Evidence, FileReading, Scope, find_binding

_FOLLOW_DEPTH = 8  # how far a parameter list is followed through names and containers


def trained_factories(reading: FileReading, facts: Facts) -> list[tuple[cst.Call, Scope, int]]:
    """The factories of the leaves that each ``torch.optim`` optimizer of the file is given, with the
    scope and line of the optimizer (where the device is taken)."""
    found: list[tuple[cst.Call, Scope, int]] = []
    for node, rng in reading.positions.items():
        if not isinstance(node, cst.Call) or facts.imports is None:
            continue
        qualified = facts.imports.resolve(node.func) or ""
        if not qualified.startswith("torch.optim.") or not qualified.rsplit(".", 1)[1][:1].isupper():
            continue
        params = next((a.value for a in node.args if a.keyword is None or a.keyword.value == "params"), None)
        if params is None:
            continue
        scope = _scope_at(reading, rng.start.line)
        for value in _followed(reading, params, scope, rng.start.line, _FOLLOW_DEPTH):
            factory = leaf_factory(value, facts)
            if factory is not None and all(factory is not f for f, _, _ in found):
                found.append((factory, scope, rng.start.line))
    return found


def _followed(reading: FileReading, expr: cst.BaseExpression, scope: Scope, line: int, depth: int) -> list:
    """The expressions a parameter list is built of: literal elements and values, names followed to
    their bindings, ``d.values()``, ``list(x)``."""
    if depth == 0:
        return []
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        return [v for e in expr.elements if not isinstance(e, cst.StarredElement)
                for v in _followed(reading, e.value, scope, line, depth - 1)]
    if isinstance(expr, cst.Dict):
        return [v for e in expr.elements if isinstance(e, cst.DictElement)
                for v in _followed(reading, e.value, scope, line, depth - 1)]
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):  # list(a) + [b]
        return _followed(reading, expr.left, scope, line, depth - 1) + \
            _followed(reading, expr.right, scope, line, depth - 1)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "values" and not expr.args:
            return _followed(reading, func.value, scope, line, depth - 1)
        if isinstance(func, cst.Name) and func.value in ("list", "tuple") and len(expr.args) == 1:
            return _followed(reading, expr.args[0].value, scope, line, depth - 1)
        return [expr]
    if isinstance(expr, cst.Name):
        name, def_line = ("<module>", 0) if isinstance(scope, cst.Module) else (scope.name.value, reading.start(scope))
        binding = find_binding(reading, Evidence("CG102", "tensor", expr.value, line, name, def_line))
        if binding is None or binding.how != "assign" or binding.value is None:
            return []
        return _followed(reading, binding.value, binding.scope, binding.line, depth - 1)
    return []


def leaf_factory(value: cst.BaseExpression, facts: Facts) -> Optional[cst.Call]:
    """The factory of ``torch.randn(..., requires_grad=True)`` (or ``.requires_grad_()``) without a device."""
    grad = False
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value == "requires_grad_":
        grad, value = True, value.func.value  # torch.randn(3).requires_grad_()
    if not isinstance(value, cst.Call) or facts.imports is None:
        return None
    qualified = facts.imports.resolve(value.func)
    if qualified not in FACTORIES or qualified in TENSOR_ARGUMENT_FACTORIES:
        return None
    keywords = {a.keyword.value: a.value for a in value.args if a.keyword is not None}
    if "device" in keywords:
        return None
    flag = keywords.get("requires_grad")
    if isinstance(flag, cst.Name) and flag.value == "True":
        grad = True
    return value if grad else None


def _scope_at(reading: FileReading, line: int) -> Scope:
    best: Scope = reading.module
    for node, rng in reading.positions.items():
        if isinstance(node, cst.FunctionDef) and rng.start.line <= line <= rng.end.line:
            if best is reading.module or rng.start.line >= reading.start(best):
                best = node
    return best
