"""Training without an optimizer object is training.

Many tutorials and courses update the weights by hand: ``w -= lr * w.grad`` under
``torch.no_grad()``, ``w.data -= lr * w.grad.data``, ``p.data.add_(p.grad, alpha=-lr)``.
No optimizer step hook sees those, so such a run would show no training step at all.

Here an in-place update of a leaf tensor that requires grad (or of its ``.data``, an alias
of its storage), made after a backward, is a training step: the first such update after
each backward closes the step (its losses were recorded at the backward), the others of
the same round belong to it. So a step is one backward/update round, not one per tensor.

What keeps it from counting false steps:
- nothing is armed before the first backward (initialisation is no step), and an optimizer
  step disarms the round (its own in-place ops on the parameters are the optimizer's step);
- once an optimizer has stepped, the script trains with it: updates by hand (an adversarial
  ``x.data += eps * x.grad.sign()`` at evaluation) are then no steps;
- the tensor updated must be a leaf that holds a gradient, or an alias of one that the last
  backward reached (found by walking that backward's graph, lazily, once per round).

The hook is a Python wrapper around a few in-place methods of ``torch.Tensor``; while no
round is armed it costs one attribute test per call.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch

# The in-place methods a hand-written update uses (SGD, momentum, weight decay, Adam by hand).
_UPDATES = ("__isub__", "__iadd__", "__imul__", "sub_", "add_", "mul_", "copy_", "addcmul_", "addcdiv_")


def _storage_key(t: torch.Tensor) -> int | None:
    """Where a tensor's values live: equal for a tensor and its ``.data``."""
    inner = getattr(t, "_e", None)  # a simulated device tensor keeps its values in a CPU tensor
    try:
        key = (inner if isinstance(inner, torch.Tensor) else t).untyped_storage().data_ptr()
    except Exception:  # no storage (a meta or functional tensor): never an alias we can name
        return None
    return key or None


def _leaves_of(node: Any) -> dict[int, torch.Tensor]:
    """The leaf tensors a backward from ``node`` accumulated gradients into, by storage."""
    leaves: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        var = getattr(n, "variable", None)  # an AccumulateGrad node: its leaf
        if isinstance(var, torch.Tensor):
            key = _storage_key(var)
            if key is not None:
                leaves[key] = var
            continue
        stack.extend(f for f, _ in getattr(n, "next_functions", ()))
    return leaves


class ManualSteps:
    """The rounds of backward and update by hand; ``on_step(leaf, frame)`` is told each round's first update
    and answers whether the update may run (after --max-steps it does nothing)."""

    def __init__(self, on_step: Callable[[torch.Tensor, Any], bool], optimizer_stepped: Callable[[], bool]):
        self.on_step = on_step
        self.optimizer_stepped = optimizer_stepped
        self.armed = False  # a backward ran and no step closed its round yet
        self.skipping = False  # the round's first update was skipped (after the cap): so are the others
        self._graph: Any = None  # the last backward's grad_fn, walked only for a ``.data`` alias
        self._leaves: dict[int, torch.Tensor] | None = None

    def on_backward(self, loss: torch.Tensor) -> None:
        if self.optimizer_stepped():
            self.armed = False
            return
        self.armed = True
        self.skipping = False
        self._graph = loss.grad_fn
        self._leaves = None

    def on_optimizer_step(self) -> None:
        self.armed = self.skipping = False
        self._graph = self._leaves = None

    def trained_leaf(self, t: torch.Tensor) -> torch.Tensor | None:
        """The leaf that requires grad that an in-place op on ``t`` updates, or None."""
        if t.requires_grad:  # the leaf itself, under no_grad (with grad enabled the op raises: no step)
            return t if t.is_leaf and t.grad is not None and not torch.is_grad_enabled() else None
        if self._graph is None:
            return None
        if self._leaves is None:
            self._leaves = _leaves_of(self._graph)
        key = _storage_key(t)
        leaf = self._leaves.get(key) if key is not None else None
        return leaf if leaf is not None and leaf.grad is not None else None

    def before_update(self, t: torch.Tensor, frame: Any) -> bool:
        """Whether the in-place update of ``t`` may run."""
        leaf = self.trained_leaf(t)
        if leaf is None:
            return True
        if self.skipping:
            return False
        self.armed = False  # this update closes the round; the others of the round are its own
        if self.on_step(leaf, frame):
            return True
        self.skipping = True
        return False


def install(steps: ManualSteps) -> None:
    """Wrap the in-place update methods of torch.Tensor, and disarm at every optimizer step."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: steps.on_optimizer_step())
    for name in _UPDATES:
        orig = getattr(torch.Tensor, name, None)
        if orig is None:
            continue

        def update(self, *args, _orig=orig, **kwargs):
            if (steps.armed or steps.skipping) and not steps.before_update(self, sys._getframe(1)):
                return self  # a step after --max-steps does nothing, as a capped optimizer step
            return _orig(self, *args, **kwargs)

        update.__name__ = name
        setattr(torch.Tensor, name, update)
