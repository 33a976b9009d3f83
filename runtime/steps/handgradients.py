"""Gradients computed by hand are training too: which updates in a loop are steps, and what their loss is.

A two-layer net in raw tensors (``h = x.mm(w1)`` ... ``loss = (y_pred - y).pow(2).sum().item()``, the
gradients by hand, ``w1 -= lr * grad_w1``) runs no backward and no optimizer. The loop's source, read
by names, says what such an update is:

- the updated tensor W is a weight of the loop: every write to it there is an additive update
  (``W -= D``, ``W = W - D``, ``W.sub_(D)``), so it is carried from one iteration to the next, never
  recomputed in one;
- the forward: the values the loop computes from W;
- the loss: a value of the forward that no update uses (what the gradients are of, not a part of
  them) and that holds a scalar when the update runs;
- the update's D comes through that forward: it depends on a value the loss also depends on.

What this keeps out: an evaluation's sum (``total += err``: nothing is computed from ``total``),
running statistics (``m = m + 0.1 * (mean - m)``: no loss comes from ``m``), an RNN's hidden state
(``h = h + tanh(x.mm(u) + h.mm(v))``: its update is its own forward, through no value of the loss),
data augmentation (``x = x + noise``: the noise comes from no forward).
"""

from __future__ import annotations

import ast
import numbers
from typing import Any

from .updatesites import Site, sites_in, target_key

_REDUCTIONS = ("sum", "mean", "norm", "item")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _dotted(e: ast.AST) -> str | None:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        base = _dotted(e.value)
        return f"{base}.{e.attr}" if base else None
    return None


def _reads(e: ast.AST, out: set) -> set:
    """The names (and attribute chains) an expression reads; ``w.T`` reads ``w`` too."""
    key = _dotted(e)
    if key is not None:
        parts = key.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute):
        _reads(e.func.value, out)  # x.mm(w): reads x and w, the method's name is no value
        for a in e.args:
            _reads(a, out)
        for k in e.keywords:
            _reads(k.value, out)
    else:
        for c in ast.iter_child_nodes(e):
            _reads(c, out)
    return out


def _written(target: ast.AST, reads: set) -> list[str]:
    """The keys an assignment target writes (a subscript writes its base and reads its index)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [k for t in target.elts for k in _written(t, reads)]
    if isinstance(target, ast.Starred):
        return _written(target.value, reads)
    if isinstance(target, ast.Subscript):
        _reads(target.slice, reads)
        return _written(target.value, reads)
    key = _dotted(target)
    return [key] if key else []


class _Flow:
    """What each value of a loop's body is computed from, the update sites left out (their targets are
    the loop's sources)."""

    def __init__(self, loop: ast.stmt, parents: dict):
        self.sites = sites_in(loop, parents)
        skip = {id(s.stmt) for s in self.sites}
        self.deps: dict[str, set] = {}
        self.order: list[str] = []  # the keys written, in source order
        self.reduced: set = set()  # the keys whose value is a reduction (x.sum(), loss.item())
        stmts = sorted((n for n in self._walk(loop) if isinstance(n, ast.stmt) and id(n) not in skip),
                       key=lambda n: (n.lineno, n.col_offset))
        for n in stmts:
            self._statement(n)

    @staticmethod
    def _walk(node: ast.AST):
        stack = [node]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, _SCOPES))

    def _write(self, keys: list[str], reads: set, value: ast.AST | None) -> None:
        reduced = value is not None and any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                                            and c.func.attr in _REDUCTIONS for c in ast.walk(value))
        for k in keys:
            if k not in self.deps:
                self.deps[k] = set()
                self.order.append(k)
            self.deps[k] |= reads
            if reduced:
                self.reduced.add(k)

    def _statement(self, n: ast.stmt) -> None:
        if isinstance(n, ast.Assign):
            reads = _reads(n.value, set())
            self._write([k for t in n.targets for k in _written(t, reads)], reads, n.value)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            reads = _reads(n.value, set())
            keys = _written(n.target, reads)
            if isinstance(n, ast.AugAssign):
                reads |= set(keys)
            self._write(keys, reads, n.value)
        elif isinstance(n, (ast.For, ast.AsyncFor)):
            reads = _reads(n.iter, set())
            self._write(_written(n.target, reads), reads, None)
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            for item in n.items:
                if item.optional_vars is not None:
                    reads = _reads(item.context_expr, set())
                    self._write(_written(item.optional_vars, reads), reads, None)
        elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Call):
            func = n.value.func
            if isinstance(func, ast.Attribute) and func.attr.endswith("_") and not func.attr.startswith("_"):
                key = target_key(func.value)  # grad_h.clamp_(min=0): an in-place change of grad_h
                if key:
                    self._write([key], _reads(n.value, set()) - {key}, None)

    def closure(self, keys: set) -> set:
        seen: set = set()
        stack = list(keys)
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            stack.extend(self.deps.get(k, ()))
        return seen


def losses_of(site: Site) -> tuple[str, ...]:
    """The names that may hold the loss of a hand-computed gradient step at ``site``, best first; none
    when the update is no training step. Read once per site."""
    if "losses" not in site.cache:
        site.cache["losses"] = _losses(site)
    return site.cache["losses"]


def _losses(site: Site) -> tuple[str, ...]:
    weight = target_key(site.target)
    if site.loop is None or weight is None or site.parents is None:
        return ()
    flow = _Flow(site.loop, site.parents)
    if weight in flow.deps:
        return ()  # recomputed in the loop (an RNN's state, a buffer): a value, not a weight
    forward = {k for k in flow.order if k != weight and weight in flow.closure(flow.deps[k])}
    used_by_updates = flow.closure(set().union(*(_reads(s.delta, set()) for s in flow.sites)))
    through = flow.closure(_reads(site.delta, set())) & forward  # the forward values this update comes from
    losses = [k for k in flow.order if k in forward and k not in used_by_updates
              and flow.closure(flow.deps[k]) & through]
    return tuple(sorted(losses, key=lambda k: k not in flow.reduced))  # a reduction first (stable)


def loss_value(frame: Any, keys: tuple[str, ...]) -> float | None:
    """The first of ``keys`` that holds a scalar in ``frame``, as a float."""
    for key in keys:
        name, *attrs = key.split(".")
        value = frame.f_locals.get(name, frame.f_globals.get(name))
        for attr in attrs:
            value = getattr(value, attr, None)
        number = _scalar(value)
        if number is not None:
            return number
    return None


def _scalar(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    is_float = getattr(value, "is_floating_point", None)
    try:
        if is_float is not None and is_float() and value.numel() == 1:
            return float(value.detach())
    except Exception:  # a value that is no tensor after all, or cannot be read here
        return None
    return None
