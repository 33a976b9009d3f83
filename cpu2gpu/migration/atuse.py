"""Edits on the statement a run located, for values no name binds.

- a device tensor handed to NumPy or matplotlib (``np.asarray(t)``, ``plt.plot(x, t)``): ``.cpu()`` on that
  argument (``.detach().cpu()`` where it requires grad), CG107's fix;
- a CPU tensor read through an object or a container where it meets the device (``net(ds.features)``,
  ``model(batch[0])``): ``.to(device)`` on it there, as the rewrite moves a tensor that is never bound;
- a tensor made from host data and never bound (``x.masked_fill(torch.from_numpy(mask), 0)``): ``device=``
  where the factory takes it, else ``.to(device)`` on the conversion.

Only the expressions the run saw as tensors are changed (or arithmetic and items of them), so a move
never lands on a value that may not be a tensor.
"""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from ..analysis.facts import Facts
from ..analysis.torchapi import CONVERSIONS, HOST_LIBRARIES
from ..rewrite.fixes import Edit, add_keyword, chain_to, method_call, replaced_by
from .binding import FileReading

# Python's functions that read a tensor where it is: an argument of theirs needs no move.
_HOST_BUILTINS = frozenset({"len", "print", "str", "repr", "format", "isinstance", "type", "id", "hash", "bool",
                            "list", "tuple", "iter", "enumerate", "zip", "range", "sorted", "getattr", "hasattr"})
# Conversions that take ``device=`` (the others get ``.to(device)``).
_DEVICE_CONVERSIONS = frozenset({"torch.tensor", "torch.as_tensor"})


def statement_at(reading: FileReading, line: int) -> Optional[cst.CSTNode]:
    """The innermost simple statement line (or compound statement header) that holds ``line``."""
    best: Optional[cst.CSTNode] = None
    for node, rng in reading.positions.items():
        if not isinstance(node, (cst.SimpleStatementLine, cst.If, cst.While, cst.For, cst.With)):
            continue
        if not rng.start.line <= line <= rng.end.line:
            continue
        if best is None or rng.start.line >= reading.span(best).start.line:
            best = node
    if isinstance(best, (cst.If, cst.While)):
        return best.test
    if isinstance(best, cst.For):
        return best.iter
    if isinstance(best, cst.With):
        return None
    return best


def host_copies(stmt: cst.CSTNode, facts: Facts, expressions: tuple, grad: tuple) -> tuple[list[Edit], str]:
    """``.cpu()`` on each argument of a NumPy / matplotlib call that the run saw on the device."""
    edits: list[Edit] = []
    shown = ""
    for call in _nodes(stmt, cst.Call):
        qualified = facts.imports.resolve(call.func) if facts.imports is not None else None
        if qualified is None or not qualified.startswith(HOST_LIBRARIES):
            continue
        for arg in call.args:
            if arg.star or not _reads(arg.value, expressions):
                continue
            copied = method_call(method_call(arg.value, "detach"), "cpu") if _reads(arg.value, grad) \
                else method_call(arg.value, "cpu")
            edits.append(replaced_by(arg.value, copied))
            shown = _code(copied)
    return edits, shown


def moves_at_use(stmt: cst.CSTNode, expressions: tuple, device: str) -> tuple[list[Edit], str]:
    """``.to(device)`` on each occurrence of the expressions that is a call's argument or an operand."""
    wanted = {_normal(e) for e in expressions}
    edits: list[Edit] = []
    moved: list[str] = []
    parents = _with_parents(stmt)
    parent_of = {id(n): p for n, p in parents}
    for node, parent in parents:
        if _normal(_code(node)) not in wanted or not _is_operand(node, parent, parent_of.get(id(parent))):
            continue
        assert isinstance(node, cst.BaseExpression)
        edits.append(replaced_by(node, chain_to(node, device)))
        moved.append(_code(chain_to(node, device)))
    return edits, ", ".join(dict.fromkeys(moved))


def conversions_on_device(stmt: cst.CSTNode, facts: Facts, device: str) -> tuple[list[Edit], str]:
    """``device=`` on ``torch.tensor(a)``, ``.to(device)`` on ``torch.from_numpy(a)``, where not moved yet."""
    edits: list[Edit] = []
    shown = ""
    for node, parent in _with_parents(stmt):
        if not isinstance(node, cst.Call) or facts.imports is None:
            continue
        qualified = facts.imports.resolve(node.func)
        if qualified not in CONVERSIONS and qualified not in _DEVICE_CONVERSIONS:
            continue
        if isinstance(parent, cst.Attribute) and parent.attr.value in ("to", "cuda", "cpu"):
            continue  # placed already
        if qualified in _DEVICE_CONVERSIONS:
            if any(a.keyword is not None and a.keyword.value == "device" for a in node.args):
                continue
            new: cst.BaseExpression = add_keyword(node, "device", cst.parse_expression(device))
        else:
            new = chain_to(node, device)
        edits.append(replaced_by(node, new))
        shown = _code(new)
    return edits, shown


def _reads(value: cst.BaseExpression, names: tuple) -> bool:
    """The argument is one of ``names``, or an item or arithmetic of one (a tensor, then)."""
    if not names:
        return False
    code = _normal(_code(value))
    if code in {_normal(n) for n in names}:
        return True
    if not isinstance(value, (cst.Subscript, cst.BinaryOperation, cst.UnaryOperation)):
        return False
    return any(re.search(rf"(?<![\w.]){re.escape(_normal(n))}(?![\w])", code) for n in names)


def _is_operand(node: cst.CSTNode, parent: Optional[cst.CSTNode], grand: Optional[cst.CSTNode]) -> bool:
    if isinstance(parent, cst.Arg):
        # not what Python's own functions read (len(x), print(x)): they need no device
        return parent.value is node and not (isinstance(grand, cst.Call) and isinstance(grand.func, cst.Name)
                                             and grand.func.value in _HOST_BUILTINS)
    if isinstance(parent, cst.BinaryOperation):
        return node is parent.left or node is parent.right
    return False


def _nodes(root: cst.CSTNode, kind: type) -> list:
    return [n for n, _ in _with_parents(root) if isinstance(n, kind)]


def _with_parents(root: cst.CSTNode) -> list[tuple[cst.CSTNode, Optional[cst.CSTNode]]]:
    """Every node under ``root`` with its parent, outermost first; not into functions and classes."""
    out: list[tuple[cst.CSTNode, Optional[cst.CSTNode]]] = []
    stack: list[tuple[cst.CSTNode, Optional[cst.CSTNode]]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        out.append((node, parent))
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and node is not root:
            continue
        stack.extend((child, node) for child in reversed(node.children))
    return out


def _normal(code: str) -> str:
    return "".join(code.split()).replace("'", '"')


def _code(node: cst.CSTNode) -> str:
    return " ".join(cst.Module(body=[]).code_for_node(node).split())
