"""Where the user's source updates a tensor by hand: the statement behind an operator call.

A hook on ``Tensor.__sub__`` sees two operands, not what the result becomes: ``w = w - lr * g``
rebinds ``w`` (an update), ``p = x - eps * g`` makes a new value (none). The statement says which.
A user's file is parsed once with ast; the instruction a frame is at names its node by position
(``co_positions``, Python 3.11+; before, by line, when the line holds one candidate).

An update site is one of
- ``T -= D`` / ``T += D`` (an augmented assignment, in place);
- ``T.sub_(D)`` / ``T.add_(D, alpha=...)`` (an in-place method call as a statement);
- ``T = T - D`` / ``T = T + D``, the result maybe passed through a chain of method calls
  (``w = (w - lr * w.grad).detach().requires_grad_(True)``), where T is a name, an attribute chain
  (``w.data``, ``self.w``) or a subscript of one: the same text on both sides.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from typing import Any, Optional

_ADDITIVE = (ast.Add, ast.Sub)
_INPLACE_METHODS = ("sub_", "add_")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass(eq=False)
class Site:
    """An additive update of ``target`` by ``delta`` in ``stmt`` (``rebind``: T = T ± D; else in place)."""

    rebind: bool
    target: ast.expr
    delta: ast.expr
    stmt: ast.stmt
    loop: Optional[ast.stmt]  # the innermost loop of the same scope around it
    parents: Optional[dict] = None  # each node of its file's parent
    cache: dict = field(default_factory=dict)  # what later readers derive from the site (handgradients)


def target_key(e: ast.expr) -> str | None:
    """The dotted text of what an update writes: ``w``, ``self.w``, ``w.data``; a subscript's base."""
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        base = target_key(e.value) if not isinstance(e.value, ast.Subscript) else None
        return f"{base}.{e.attr}" if base else None
    if isinstance(e, ast.Subscript):
        return target_key(e.value)
    return None


def _same(a: ast.expr, b: ast.expr) -> bool:
    return target_key(a) is not None and ast.unparse(a) == ast.unparse(b)  # unparse: the Store/Load context aside


def _rebind_of(binop: ast.BinOp, parents: dict) -> Site | None:
    """``T = T ± D`` with ``binop`` the ``T ± D``, maybe under method calls on its result."""
    if not isinstance(binop.op, _ADDITIVE):
        return None
    node: ast.AST = binop
    parent = parents.get(node)
    while isinstance(parent, ast.Attribute) and isinstance(parents.get(parent), ast.Call) \
            and parents[parent].func is parent:
        node = parents[parent]  # (T - D).detach().requires_grad_(True)
        parent = parents.get(node)
    if not (isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1):
        return None
    if not _same(parent.targets[0], binop.left):
        return None
    return Site(True, parent.targets[0], binop.right, parent, _loop_of(parent, parents), parents)


def _inplace_of(node: ast.AST, parents: dict) -> Site | None:
    if isinstance(node, ast.AugAssign) and isinstance(node.op, _ADDITIVE) and target_key(node.target):
        return Site(False, node.target, node.value, node, _loop_of(node, parents), parents)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _INPLACE_METHODS \
            and node.args and target_key(node.func.value) and isinstance(parents.get(node), ast.Expr):
        return Site(False, node.func.value, node.args[0], parents[node], _loop_of(node, parents), parents)
    return None


def _loop_of(node: ast.AST, parents: dict) -> ast.stmt | None:
    p = parents.get(node)
    while p is not None and not isinstance(p, _SCOPES):
        if isinstance(p, _LOOPS):
            return p
        p = parents.get(p)
    return None


def sites_in(node: ast.AST, parents: dict) -> list[Site]:
    """Every update site under ``node``, not entering nested functions or classes."""
    found = []
    stack = [node]
    while stack:
        n = stack.pop()
        site = _rebind_of(n, parents) if isinstance(n, ast.BinOp) else _inplace_of(n, parents)
        if site is not None:
            found.append(site)
        stack.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, _SCOPES))
    return found


def sites_of(source: str) -> list[Site]:
    """Every update site of a source, in order."""
    src = _File(ast.parse(source))
    found = [src.site(n) for n in ast.walk(src.tree) if isinstance(n, (ast.BinOp, ast.AugAssign, ast.Call))]
    return sorted((s for s in found if s is not None), key=lambda s: (s.stmt.lineno, s.stmt.col_offset))


class _File:
    """A user's file: its nodes by position, and each node's parent."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.parents: dict = {}
        self.by_span: dict = {}
        self.by_line: dict = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
            if isinstance(parent, (ast.BinOp, ast.AugAssign, ast.Call)):
                span = (parent.lineno, parent.end_lineno, parent.col_offset, parent.end_col_offset)
                self.by_span[span] = parent
                self.by_line.setdefault(parent.lineno, []).append(parent)
        self.sites: dict = {}  # id(node) -> Site | None

    def site(self, node: ast.AST) -> Site | None:
        if id(node) not in self.sites:
            self.sites[id(node)] = (_rebind_of(node, self.parents) if isinstance(node, ast.BinOp)
                                    else _inplace_of(node, self.parents))
        return self.sites[id(node)]


@functools.lru_cache(maxsize=64)
def _file(filename: str) -> _File | None:
    try:
        with open(filename, encoding="utf-8") as f:
            return _File(ast.parse(f.read(), filename))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


_AT: dict = {}  # (code, instruction offset, rebind) -> Site | None
_SPANS: dict = {}  # code -> the source span of each instruction


def site_at(frame: Any, rebind: bool) -> Site | None:
    """The update site the instruction ``frame`` executes, of the kind asked (a rebinding: an operator
    call's; else an in-place update's), or None."""
    code = frame.f_code
    key = (code, frame.f_lasti, rebind)
    if key in _AT:
        return _AT[key]
    site = None
    src = _file(code.co_filename)
    if src is not None:
        node = _node_at(src, code, frame.f_lasti, frame.f_lineno, rebind)
        site = src.site(node) if node is not None else None
        if site is not None and site.rebind != rebind:
            site = None
    if len(_AT) > 65536:
        _AT.clear()
        _SPANS.clear()
    _AT[key] = site
    return site


def _node_at(src: _File, code: Any, lasti: int, lineno: int, rebind: bool) -> ast.AST | None:
    kinds = (ast.BinOp,) if rebind else (ast.AugAssign, ast.Call)
    if hasattr(code, "co_positions"):
        spans = _SPANS.get(code)
        if spans is None:
            spans = _SPANS[code] = list(code.co_positions())
        try:
            span = spans[lasti // 2]
        except IndexError:
            return None
        node = src.by_span.get(span)
        return node if isinstance(node, kinds) else None
    # Python < 3.11: the line's only candidate of the kind asked, if it is an update site
    candidates = [n for n in src.by_line.get(lineno, ()) if isinstance(n, kinds) and src.site(n) is not None]
    return candidates[0] if len(candidates) == 1 else None
