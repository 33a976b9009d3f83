"""--max-steps N: cap the training at N optimizer steps without cutting the script.

Stopping the script at the N-th step would skip what follows the training
(evaluation, the ``.numpy()`` of predictions, plots, checkpoints), where many
placement bugs live. So after N steps the training is capped, not stopped:

- Loaders run dry. A pass over a DataLoader (one ``for`` over it) ends at its
  next batch once an optimizer step followed one of its batches: that pass is a
  training loop. Every pass that starts after the cap yields at most
  EVAL_BATCHES batches and also ends at the first batch after a step. The
  remaining epochs thus take one batch each: one, not none, because the code
  around an inner loop often divides by what the loop counted
  (``correct / total``), and an empty epoch would raise ZeroDivisionError in a
  correct script. A pass with no step is an evaluation: it gets its few batches,
  so the evaluation code runs on real batches, however many epochs came before.
- Steps after the cap do nothing: the optimizer is called with its gradients
  hidden (it skips parameters without one) and the step is not counted. Every
  run trains exactly N steps and records N losses, so --against compares.
- Every loop of the user's files (cappedloops: ``for`` over anything, ``while``) is a pass too: once
  the cap is reached, a loop in which a step ran since its last iteration (the training loop, or an
  epoch loop around one, nested or not) ends at its next iteration, and the code after it runs.
  Loops that take no step (evaluation, a loop over timesteps in ``forward``) are never cut.
- What cannot be run dry ends the run as --max-steps always did (StopRun),
  and the result says which: a step after the cap that no live loop drives ("loop": a loop in a
  library's code, ``next(it)`` called by hand, where ending the iterator would raise in a correct
  script), or training that goes on after the cap for more than CEILING backward passes or steps
  ("ceiling"). Such a run proves nothing after that line (verify says so).

An explicit ``next()`` is never answered with StopIteration by the cap.
"""

from __future__ import annotations

import dis
import sys
import weakref
from typing import NoReturn

from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data import dataloader

from ..records import CapLoop, CapReport
from ..tracing.linetrace import Lines


class StopRun(BaseException):
    """Raised when --max-steps cannot cap the training without ending the run
    (see stepcap); its argument says why. A BaseException so that a script's
    ``except Exception`` does not swallow it."""


EVAL_BATCHES = 3
# cappedloops' iterator's __next__ code: a DataLoader advanced from it belongs to the user's loop above
CAPPED_NEXT_CODE: list = [None]
_FOR_ITER = dis.opmap["FOR_ITER"]
_PASS = "_cpu2gpu_pass"


def ceiling(max_steps: int) -> int:
    """How much training (backward passes, skipped steps) may follow the cap before the run is stopped."""
    return max(2 * max_steps, 50)


def _in_for_loop(frame) -> bool:
    """Whether the iterator is advanced by a for loop (not by an explicit next())."""
    try:
        return frame.f_code.co_code[frame.f_lasti] == _FOR_ITER
    except (AttributeError, IndexError):
        return False


class Loop:
    """The passes over DataLoaders that start at one line of the user's code."""

    def __init__(self, where):
        self.where = where
        self.passes = self.batches = self.steps = 0
        self.passes_after_cap = self.batches_after_cap = self.skipped_steps = 0

    def as_dict(self, display) -> CapLoop:
        w = self.where
        return {"file": display(w["file"]) if w else None, "line": w["line"] if w else None,
                "role": "training" if self.steps or self.skipped_steps else "evaluation",
                "passes": self.passes, "batches": self.batches, "steps": self.steps,
                "passes_after_cap": self.passes_after_cap, "batches_after_cap": self.batches_after_cap,
                "skipped_steps": self.skipped_steps}


class Pass:
    __slots__ = ("loop", "iterator", "mark", "after_cap", "ended", "explicit", "generic", "outer")

    def __init__(self, loop: Loop, it, generic: bool = False):
        self.loop = loop
        self.iterator = weakref.ref(it)  # a pass left by `break` is over once its iterator is gone
        self.mark: int | None = None  # step count at its last batch
        self.after_cap = 0  # batches yielded after the cap
        self.ended = False
        self.explicit = False  # its last batch came from an explicit next()
        self.generic = generic  # a for or while loop of the user's code (cappedloops): no evaluation budget
        self.outer: Pass | None = None  # the loop of the user's code it runs in (generic passes only)


class StepCap:
    def __init__(self, rec, max_steps: int):
        self.rec = rec
        self.max_steps = max_steps
        self.ceiling = ceiling(max_steps)
        self.capped = False
        self.suppressing = False
        self.step_events = 0  # counted and skipped steps: what a pass compares its mark with
        self.skipped = 0
        self.backward_after = 0
        self.at = None  # where the N-th step was taken
        self.stopped_at = None
        self.loops: dict = {}
        self.generic_loops: dict = {}  # the other for loops (cappedloops)
        self._latest: Pass | None = None  # the pass that yielded the latest batch
        self._latest_generic: Pass | None = None  # the for loop over anything else that yielded the latest item
        self._hidden: list = []
        self.lines: Lines = rec.lines

    # -- loaders -------------------------------------------------------------

    def _loop_at(self, frame, generic: bool = False) -> Loop:
        where = self.rec.user_location(frame)
        key = (where["file"], where["line"]) if where else None
        loops = self.generic_loops if generic else self.loops  # the report lists the DataLoader passes
        loop = loops.get(key)
        if loop is None:
            loop = loops[key] = Loop(where)
        return loop

    def new_pass(self, it, frame, generic: bool = False) -> Pass:
        p = Pass(self._loop_at(frame, generic), it, generic)
        if generic:
            p.outer = self._live(self._latest_generic)
        p.loop.passes += 1
        if self.capped:
            p.loop.passes_after_cap += 1
        setattr(it, _PASS, p)
        return p

    def gate(self, it, frame, generic: bool = False, looping: bool | None = None) -> Pass | None:
        """The pass `it` belongs to, or None when the cap ends it here. `looping`: whether a loop asks
        for its next item (default: whether a for loop advances the iterator, not an explicit next())."""
        p = getattr(it, _PASS, None) or self.new_pass(it, frame, generic)
        if looping is None:
            looping = _in_for_loop(frame)
        if self.capped and looping:
            # A training loop, nested or not: a step ran since its last item (in it, or in a loop inside
            # it: an epoch loop around a DataLoader pass). It ends here and the code after it runs.
            stepped = p.mark is not None and self.step_events > p.mark
            if p.ended or stepped or (not p.generic and p.after_cap >= EVAL_BATCHES):
                p.ended = True
                return None
        return p

    def on_batch(self, p: Pass, frame, looping: bool | None = None) -> None:
        p.mark = self.step_events
        p.explicit = not (_in_for_loop(frame) if looping is None else looping)
        p.loop.batches += 1
        if self.capped:
            p.after_cap += 1
            p.loop.batches_after_cap += 1
        if p.generic:
            self._latest_generic = p
        else:
            self._latest = p

    def _driving(self) -> Pass | None:
        """The pass that the coming step trains on, if any: over a DataLoader first, else over anything
        (cappedloops) -- the latest, while it goes on, or (a step after the loop, of accumulated
        gradients) right after its last batch."""
        return self._driving_of(self._latest) or self._driving_of(self._live(self._latest_generic, True))

    def _live(self, p: Pass | None, or_just_done: bool = False) -> Pass | None:
        """`p`, or the innermost loop around it, that still runs (or, `or_just_done`: whose last item came
        just before this step). An inner loop over a target's tokens is done by the time its iteration's
        optimizers step: the loop around it, over the iterations, drives them."""
        while p is not None:
            if (or_just_done and self.step_events == p.mark) or not (p.ended or p.iterator() is None):
                return p
            p = p.outer
        return None

    def _driving_of(self, p: Pass | None) -> Pass | None:
        if p is None or p.explicit:
            return None
        if self.step_events == p.mark:
            return p
        return None if p.ended or p.iterator() is None else p

    # -- steps -------------------------------------------------------------------

    def _stop(self, reason: str, frame) -> NoReturn:
        self.stopped_at = self.rec.user_location(frame)
        self.lines.stop()
        raise StopRun(reason)

    def before_step(self, optimizer, args, kwargs):
        """Optimizer step pre-hook: after the cap, a step does nothing (or ends the run)."""
        if not self.capped:
            return None
        frame = sys._getframe(1)
        driver = self._driving()
        if driver is None:
            self._stop("loop", frame)
        if self.skipped >= self.ceiling:
            self._stop("ceiling", frame)
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._hidden.append((p, p.grad))
                    p.grad = None
        self.suppressing = True
        driver.loop.skipped_steps += 1
        return None

    def skip_manual(self, frame) -> None:
        """An update by hand after the cap (``w -= lr * w.grad``, manualsteps): skipped as an optimizer step is
        (the caller does not run it), or the run ends where nothing runs the loop dry."""
        driver = self._driving()
        if driver is None:
            self._stop("loop", frame)
        if self.skipped >= self.ceiling:
            self._stop("ceiling", frame)
        driver.loop.skipped_steps += 1
        self.end_skipped()

    def end_skipped(self) -> None:
        """After a skipped step: give the gradients back, as if the step had run."""
        for p, g in self._hidden:
            p.grad = g
        self._hidden.clear()
        self.suppressing = False
        self.skipped += 1
        self.step_events += 1

    def counted(self, frame) -> None:
        """After a counted step: note it; the N-th caps the training."""
        driver = self._driving()
        self.step_events += 1
        if driver is not None:
            driver.loop.steps += 1
        if self.rec.steps < self.max_steps:
            return
        self.capped = True
        self.at = self.rec.user_location(frame)
        if driver is None:  # nothing to run dry: end here, as --max-steps always did
            self._stop("loop", frame)
        self.lines.mark_cap()

    def on_backward(self) -> None:
        """A backward pass after the cap: training that goes on; bounded."""
        self.backward_after += 1
        if self.backward_after > self.ceiling:
            self._stop("ceiling", sys._getframe())

    # -- the result ----------------------------------------------------------------

    def report(self, status: str, stop_reason: str | None, display) -> CapReport:
        self.lines.stop()
        if not self.capped:
            ended = None
        elif stop_reason:
            ended = stop_reason
        else:
            ended = {"ok": "end", "max_steps": "end"}.get(status, status)
        def place(w):
            return {"file": display(w["file"]), "line": w["line"]} if w else None

        return {
            "max_steps": self.max_steps, "reached": self.capped, "ended": ended,
            "at": place(self.at), "stopped_at": place(self.stopped_at),
            "skipped_steps": self.skipped, "backward_after_cap": self.backward_after, "ceiling": self.ceiling,
            "lines_after_cap": len(self.lines.after),
            "loops": [loop.as_dict(display) for loop in self.loops.values()],
        }


def install(cap: StepCap) -> None:
    """Hook the optimizers' steps and the DataLoaders' passes."""
    register_optimizer_step_pre_hook(cap.before_step)

    loader_cls = dataloader.DataLoader
    orig_iter = loader_cls.__iter__

    def __iter__(self):
        it = orig_iter(self)
        cap.new_pass(it, sys._getframe(1))  # persistent workers: the same iterator, a new pass
        return it

    setattr(loader_cls, "__iter__", __iter__)  # a monkey-patch: setattr, as mypy rejects assigning to a method

    base = dataloader._BaseDataLoaderIter
    orig_next = base.__next__

    def __next__(self):
        frame = sys._getframe(1)
        if frame.f_code is CAPPED_NEXT_CODE[0] and frame.f_back is not None:
            frame = frame.f_back  # for i, b in enumerate(loader), its iterable wrapped (cappedloops): the loop
        p = cap.gate(self, frame)
        if p is None:
            raise StopIteration
        try:
            batch = orig_next(self)
        except StopIteration:
            p.ended = True
            raise
        cap.on_batch(p, frame)
        return batch

    setattr(base, "__next__", __next__)
