"""A list on a module that holds its buffers through the locals they were registered from.

``self.register_buffer("center", center)`` then ``self.stats = [center, scale]``: the list holds the
buffers themselves, as ``[self.center, self.scale]`` would, and goes stale the same way when the module
moves (CG114). Written with the attributes, the list is what CG114's own fix reads, so a run that
located the stale copy gets that fix.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from ..analysis.classdefs import walk
from ..rewrite.fixes import Edit, apply_edits, replaced_by

_REGISTERS = ("register_buffer", "register_parameter")


def with_registered_names(module: cst.Module) -> Optional[cst.Module]:
    """The module with each such list written with ``self.<name>``, or None when there is none."""
    edits: list[Edit] = []
    for klass in (n for n in walk(module) if isinstance(n, cst.ClassDef)):
        init = next((f for f in klass.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "__init__"),
                    None)
        if init is None or not init.params.params or not isinstance(init.body, cst.IndentedBlock):
            continue
        me = init.params.params[0].name.value
        registered: dict[str, str] = {}  # local name -> attribute
        for stmt in init.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                _note_registration(small, me, registered)
                edits.extend(_aliases(small, me, registered))
    return apply_edits(module, edits) if edits else None


def _note_registration(small: cst.BaseSmallStatement, me: str, registered: dict) -> None:
    """``self.register_buffer("center", center)``: the local ``center`` is ``self.center``."""
    call = small.value if isinstance(small, cst.Expr) else None
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            and call.func.attr.value in _REGISTERS and isinstance(call.func.value, cst.Name)
            and call.func.value.value == me and len(call.args) >= 2):
        return
    name, value = call.args[0].value, call.args[1].value
    if isinstance(name, cst.SimpleString) and isinstance(value, cst.Name):
        attribute = name.evaluated_value
        if isinstance(attribute, str) and attribute.isidentifier():
            registered[value.value] = attribute


def _aliases(small: cst.BaseSmallStatement, me: str, registered: dict) -> list[Edit]:
    """``self.stats = [center, scale]`` with every element a registered local."""
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and registered):
        return []
    target = small.targets[0].target
    if not (isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == me):
        return []
    value = small.value
    if isinstance(value, (cst.List, cst.Tuple)):
        elements = [e.value for e in value.elements]
    elif isinstance(value, cst.Dict):
        elements = [e.value for e in value.elements if isinstance(e, cst.DictElement)]
        if len(elements) != len(value.elements):
            return []
    else:
        return []
    if not elements or not all(isinstance(e, cst.Name) and e.value in registered for e in elements):
        return []
    return [replaced_by(e, cst.Attribute(value=cst.Name(me), attr=cst.Name(registered[e.value])))
            for e in elements if isinstance(e, cst.Name)]

