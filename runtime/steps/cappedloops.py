"""--max-steps for every ``for`` loop of the user's code, not only the passes over a DataLoader.

``for step in range(400): ... optimizer.step()`` cannot be run dry the way a DataLoader pass is
(stepcap), so the run used to end at the cap, and the code after the loop (evaluation, a
``.numpy()`` of predictions, saving) never ran: a bug there passed unseen. Here the user's files
are compiled (usercode) with each ``for`` statement's iterable wrapped, ``for x in _cpu2gpu_capped(it):``,
on the same line and column, so that tracebacks, diagnoses and line numbers stay the user's. The
wrapper makes the loop a pass of the step cap: once the cap is reached, the loop ends at its next
item if an optimizer step ran since its last one (a training loop, or an epoch loop around one),
and the code after it runs. Loops that take no step (evaluation, a loop over timesteps in
``forward``) are never cut. A DataLoader keeps its own pass (stepcap), unwrapped.

A ``while`` loop gets the same: its test is compiled as ``_cpu2gpu_while(KEY) and (test)`` on the same
line, after a ``_cpu2gpu_while_enter(KEY)`` that starts a new pass each time the loop is entered, so
a ``while step < n:`` training loop ends at its next test once the cap is reached and a step ran in
its last iteration.
"""

from __future__ import annotations

import ast
import builtins
import sys

from torch.utils.data import dataloader

from . import stepcap
from ..tracing import usercode

WRAPPER = "_cpu2gpu_capped"
WHILE_GATE = "_cpu2gpu_while"
WHILE_ENTER = "_cpu2gpu_while_enter"


class _WrapForLoops(ast.NodeTransformer):
    def visit_For(self, node: ast.For) -> ast.For:
        self.generic_visit(node)
        call = ast.Call(func=ast.Name(WRAPPER, ast.Load()), args=[node.iter], keywords=[])
        node.iter = ast.copy_location(call, node.iter)
        ast.copy_location(call.func, node.iter)
        return node

    def visit_While(self, node: ast.While) -> list:
        self.generic_visit(node)
        key = ast.Constant(f"{node.lineno}:{node.col_offset}")
        gate = ast.Call(func=ast.Name(WHILE_GATE, ast.Load()), args=[key], keywords=[])
        node.test = ast.copy_location(ast.BoolOp(op=ast.And(), values=[gate, node.test]), node.test)
        ast.copy_location(gate, node.test)
        ast.copy_location(gate.func, node.test)
        ast.copy_location(key, node.test)
        enter = ast.Expr(ast.Call(func=ast.Name(WHILE_ENTER, ast.Load()), args=[key], keywords=[]))
        return [ast.copy_location(enter, node), node]


def cap_loops(tree: ast.Module, path: str) -> ast.Module:
    """A user's file's tree with its for loops' iterables wrapped and its while tests gated (usercode)."""
    return _WrapForLoops().visit(tree)


class _CappedIterator:
    """A for loop's iterator that the step cap can end (see stepcap.StepCap.gate)."""

    __slots__ = ("_it", "_cpu2gpu_pass", "__weakref__")

    def __init__(self, it):
        self._it = it

    def __iter__(self):
        return self

    def __next__(self):
        cap = _CAP
        frame = sys._getframe(1)
        p = cap.gate(self, frame, generic=True)
        if p is None:
            raise StopIteration
        try:
            item = next(self._it)
        except StopIteration:
            p.ended = True
            raise
        cap.on_batch(p, frame)
        return item


class _WhileLoop:
    """One entry into a while loop: what the step cap counts as its pass."""

    __slots__ = ("_cpu2gpu_pass", "__weakref__")


_CAP = None
_LOADER_ITER: tuple = ()
# The while loop each frame is in, by the loop's place: entered anew each time the loop starts.
_WHILES: dict = {}


def while_enter(key) -> None:
    _WHILES[(id(sys._getframe(1)), key)] = _WhileLoop()


def while_gate(key) -> bool:
    """Whether the while loop at `key` of the calling frame may test its condition (False: the cap ends it)."""
    cap = _CAP
    if cap is None:
        return True
    frame = sys._getframe(1)
    loop = _WHILES.get((id(frame), key))
    if loop is None:
        loop = _WHILES[(id(frame), key)] = _WhileLoop()
    p = cap.gate(loop, frame, generic=True, looping=True)
    if p is None:
        del _WHILES[(id(frame), key)]
        return False
    cap.on_batch(p, frame, looping=True)
    return True


def capped(iterable):
    it = iter(iterable)
    if _CAP is None or isinstance(it, _LOADER_ITER):
        return it  # a DataLoader's own pass is capped by stepcap
    return _CappedIterator(it)


def install(cap) -> None:
    """Cap the for and while loops of the user's files compiled from now on (usercode)."""
    global _CAP, _LOADER_ITER
    _CAP = cap
    _LOADER_ITER = (dataloader._BaseDataLoaderIter,)
    stepcap.CAPPED_NEXT_CODE[0] = _CappedIterator.__next__.__code__
    setattr(builtins, WRAPPER, capped)
    setattr(builtins, WHILE_GATE, while_gate)
    setattr(builtins, WHILE_ENTER, while_enter)
    usercode.add_transform(cap_loops)
