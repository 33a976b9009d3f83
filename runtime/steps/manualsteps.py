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

Two more kinds of update by hand are steps:
- a rebinding after a backward: ``x = x - lr * x.grad`` (then ``x.requires_grad_()``),
  ``w = (w - lr * w.grad).detach().requires_grad_(True)``, ``w.data = w.data - lr * w.grad``. The
  operator's hook sees ``x - lr * x.grad``; the statement (updatesites) says that its result replaces
  ``x``, not that it makes a new value (``adv = x + eps * x.grad.sign()``: no step);
- gradients computed by hand, with no backward at all: ``w1 -= lr * grad_w1`` or
  ``w1 = w1 - lr * grad_w1`` in a loop that computes its loss from ``w1`` (handgradients says which
  updates are such steps and where their loss is). A round is then one iteration: it ends where an
  update of the round comes again; the step records the loss of its round, as a backward would.

The hooks are Python wrappers around a few in-place methods and the ``+``/``-`` operators of
``torch.Tensor``; while no round is armed and the run may no longer train by hand, each costs one
attribute test per call.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .handgradients import loss_value, losses_of
from .updatesites import site_at

# What the report calls each kind of step (an optimizer's: harness)
IN_PLACE, REBINDING, HAND = "in place", "rebinding", "hand-computed gradients"
# The in-place methods a hand-written update uses (SGD, momentum, weight decay, Adam by hand).
_UPDATES = ("__isub__", "__iadd__", "__imul__", "sub_", "add_", "mul_", "copy_", "addcmul_", "addcdiv_")
_REBINDS = ("__sub__", "__add__")  # w = w - lr * w.grad


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
    """The rounds of backward (or loss) and update by hand; ``on_step(leaf, frame, kind, loss)`` is told each
    round's first update (``loss``: the round's loss where no backward recorded one) and answers whether the
    update may run (after --max-steps it does nothing)."""

    def __init__(self, on_step: Callable[[torch.Tensor, Any, str, Optional[float]], bool],
                 optimizer_stepped: Callable[[], bool], is_user_file: Callable[[str], bool] = lambda f: False):
        self.on_step = on_step
        self.optimizer_stepped = optimizer_stepped
        self.is_user_file = is_user_file
        self.armed = False  # a backward ran and no step closed its round yet
        self.skipping = False  # the round's first update was skipped (after the cap): so are the others
        self.by_hand = True  # no backward ran, no optimizer stepped: gradients computed by hand may train
        self._graph: Any = None  # the last backward's grad_fn, walked only for a ``.data`` alias
        self._leaves: dict[int, torch.Tensor] | None = None
        self._user_code: dict = {}  # code object -> whether it is the user's
        self._round: set = set()  # the sites of the current round of hand-computed gradients
        self._round_loop: Any = None
        self._round_skipped = False

    def on_backward(self, loss: torch.Tensor) -> None:
        self.by_hand = False
        if self.optimizer_stepped():
            self.armed = False
            return
        self.armed = True
        self.skipping = False
        self._graph = loss.grad_fn
        self._leaves = None

    def on_optimizer_step(self) -> None:
        self.armed = self.skipping = self.by_hand = False
        self._graph = self._leaves = None

    def _alias_leaf(self, t: torch.Tensor) -> torch.Tensor | None:
        """The leaf of the last backward whose storage ``t`` shares (``w.data``), if it holds a gradient."""
        if self._graph is None:
            return None
        if self._leaves is None:
            self._leaves = _leaves_of(self._graph)
        key = _storage_key(t)
        leaf = self._leaves.get(key) if key is not None else None
        return leaf if leaf is not None and leaf.grad is not None else None

    def trained_leaf(self, t: torch.Tensor) -> torch.Tensor | None:
        """The leaf that requires grad that an in-place op on ``t`` updates, or None."""
        if t.requires_grad:  # the leaf itself, under no_grad (with grad enabled the op raises: no step)
            return t if t.is_leaf and t.grad is not None and not torch.is_grad_enabled() else None
        return self._alias_leaf(t)

    def _take(self, leaf: torch.Tensor, frame: Any, kind: str) -> bool:
        """The first update of an armed round closes it: a step, or (after the cap) one skipped."""
        if self.skipping:
            return False
        self.armed = False  # this update closes the round; the others of the round are its own
        if self.on_step(leaf, frame, kind, None):
            return True
        self.skipping = True
        return False

    def before_update(self, t: torch.Tensor, frame: Any) -> bool:
        """Whether the in-place update of ``t`` may run."""
        if self.by_hand:
            return self._before_hand(t, frame, rebind=False)
        leaf = self.trained_leaf(t)
        return True if leaf is None else self._take(leaf, frame, IN_PLACE)

    def before_rebind(self, t: torch.Tensor, frame: Any) -> bool:
        """Whether ``t + d`` / ``t - d`` may run: not when it is a capped step's update (the caller then gives
        ``t`` back, so the name keeps its value)."""
        if self.by_hand:
            return self._before_hand(t, frame, rebind=True)
        if t.requires_grad:  # the leaf itself: with grad enabled too (the result is detached, or no leaf)
            leaf = t if t.is_leaf and t.grad is not None else None
        else:
            leaf = self._alias_leaf(t)
        if leaf is None or not self._is_user(frame) or _site(frame, rebind=True) is None:
            return True
        return self._take(leaf, frame, REBINDING)

    def _is_user(self, frame: Any) -> bool:
        if frame is None:
            return False
        code = frame.f_code
        user = self._user_code.get(code)
        if user is None:
            user = self._user_code[code] = self.is_user_file(code.co_filename)
        return user

    def _before_hand(self, t: torch.Tensor, frame: Any, rebind: bool) -> bool:
        """An update of a weight trained by hand-computed gradients: the first of its round is a step."""
        if not self._is_user(frame) or t.requires_grad or not t.is_floating_point():
            return True
        site = _site(frame, rebind)
        losses = _guarded(losses_of, site) if site is not None else None
        if not losses:
            return True
        if self._round and site not in self._round and site.loop is self._round_loop:
            return not self._round_skipped  # the round's other updates
        loss = _guarded(loss_value, frame, losses)
        if loss is None:
            return True  # no scalar loss computed from it (yet): nothing shows that it trains
        self._round, self._round_loop = {site}, site.loop
        self._round_skipped = not self.on_step(t, frame, HAND, loss)
        return not self._round_skipped


def _guarded(read: Callable, *args: Any) -> Any:
    """What reading the user's source or frame answers, or None where it fails: a hook must never make
    the script raise."""
    try:
        return read(*args)
    except Exception:
        return None


def _site(frame: Any, rebind: bool) -> Any:
    return _guarded(site_at, frame, rebind)


def install(steps: ManualSteps) -> None:
    """Wrap the in-place update methods and the ``+``/``-`` operators of torch.Tensor, and disarm at every
    optimizer step."""
    register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: steps.on_optimizer_step())
    for name in _UPDATES:
        orig = getattr(torch.Tensor, name, None)
        if orig is None:
            continue

        def update(self, *args, _orig=orig, **kwargs):
            if (steps.armed or steps.skipping or steps.by_hand) and not steps.before_update(self, sys._getframe(1)):
                return self  # a step after --max-steps does nothing, as a capped optimizer step
            return _orig(self, *args, **kwargs)

        update.__name__ = name
        setattr(torch.Tensor, name, update)
    for name in _REBINDS:
        orig = getattr(torch.Tensor, name)

        def rebind(self, *args, _orig=orig, **kwargs):
            if (steps.armed or steps.skipping or steps.by_hand) and not steps.before_rebind(self, sys._getframe(1)):
                return self  # w = w - lr * g after --max-steps: w keeps its value
            return _orig(self, *args, **kwargs)

        rebind.__name__ = name
        setattr(torch.Tensor, name, rebind)
