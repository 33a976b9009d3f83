"""Child-side instrumentation: records what a script does, without its cooperation.

Installed into the child process before the script runs. It records every
loss (the scalar ``.backward()`` is called on), every optimizer step and its
time, the device of every module's parameters and of its forward inputs
(global hooks), and which tensors came out of a DataLoader (so that a batch
left on the CPU can be named as such).
"""

from __future__ import annotations

import functools
import inspect
import os
import signal
import sys
import time
import weakref
from typing import TYPE_CHECKING, Callable

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.nn.utils.rnn import PackedSequence
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader, dataloader, get_worker_info
from torch.utils.data._utils import fetch

from ..records import LoaderRecord
from ..steps import manualsteps, stepcap
from ..tracing.linetrace import Lines

if TYPE_CHECKING:
    from ..speed.counts import Counter
    from ..steps.manualsteps import ManualSteps
    from ..steps.stepcap import StepCap


_PACKS: dict = {}


def _packs_sequences(cls) -> bool:
    """Whether a module's forward packs padded sequences (its lengths input is then on the CPU)."""
    if cls not in _PACKS:
        try:
            _PACKS[cls] = "pack_padded_sequence" in inspect.getsource(cls.forward)
        except (OSError, TypeError, AttributeError):
            _PACKS[cls] = False
    return _PACKS[cls]


def _is_lengths(t) -> bool:
    return t.device.type == "cpu" and t.dim() == 1 and not t.is_floating_point()


class TimedOut(BaseException):
    """Raised in the script when the parent stops it at the timeout, so that
    the report says where it was."""


def stop_on_sigterm() -> None:
    def handler(signum, frame):
        raise TimedOut("stopped by the timeout")

    signal.signal(signal.SIGTERM, handler)


class ModuleRecord:
    __slots__ = ("ref", "cls", "param", "calls", "device_calls", "cpu_calls", "param_devices",
                 "input_devices", "top_calls", "bound")

    def __init__(self, module) -> None:
        self.ref = weakref.ref(module)
        self.cls = type(module).__name__
        self.param = _first_tensor(module)
        self.calls = 0
        self.device_calls = 0
        self.cpu_calls = 0
        self.top_calls = 0
        self.param_devices: set = set()
        self.input_devices: set = set()
        self.bound = None  # where the user's code holds it when it is first called (Recorder.binding_of)


def _non_leaf_attribute(module):
    """A tensor attribute computed from a parameter (``nn.Parameter(t).to(device)``): not registered,
    never trained. The name, or None. One computed from the module's own parameters (the old
    ``weight_norm``'s ``weight``, made again by a hook on each call) trains them: not one."""
    own = {id(p) for p in module.parameters(recurse=False)}
    for name, value in vars(module).items():
        if isinstance(value, torch.Tensor) and value.grad_fn is not None and not isinstance(value, torch.nn.Parameter) \
                and not _leaves(value.grad_fn) & own:
            return name
    return None


def _leaves(node, limit: int = 1000) -> set:
    """The ids of the leaf tensors an autograd graph accumulates into (at most ``limit`` nodes read)."""
    found: set[int] = set()
    seen: set[int] = set()
    todo = [node]
    while todo and len(seen) < limit:
        n = todo.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        variable = getattr(n, "variable", None)  # an AccumulateGrad node
        if variable is not None:
            found.add(id(variable))
        todo.extend(next_node for next_node, _ in n.next_functions)
    return found


def _first_tensor(module):
    p = next(module.parameters(), None)
    return p if p is not None else next(module.buffers(), None)


_ACCELERATORS = ("cuda", "mps", "xpu")  # device types that count as the device (the simulator plays cuda or mps)


def _device_name(d) -> str:
    s = str(d)
    return s.replace("simcuda", "cuda").replace("simmps", "mps")


class Recorder:
    def __init__(self, workdir: str, max_steps: int | None):
        self.workdir = os.path.realpath(workdir)
        self.max_steps = max_steps
        self.losses: list[float] = []
        self.steps = 0
        self.step_kinds: dict[str, int] = {}  # steps by kind: "optimizer", or by hand (manualsteps)
        self.step_ends: list[float] = []
        self.backward_calls = 0
        self.modules: dict[int, ModuleRecord] = {}
        self.events: list[dict] = []
        self.depth = 0
        self.batches: dict[int, weakref.ref] = {}  # tensors a DataLoader yielded
        self.scaled: dict[int, float] = {}  # id(scaled loss) -> scale (GradScaler)
        self._in_backward = False
        self.optimizers_seen: set[int] = set()
        self.trained_devices: set[str] = set()  # devices of the tensors the optimizers step
        self.cap: StepCap | None = None  # the StepCap of --max-steps
        self.lines = Lines(self.is_user_file)  # the lines of the user's files that the run executes
        self.worker_iterators: weakref.WeakSet = weakref.WeakSet()  # a DataLoader's, with worker processes
        self.manual: ManualSteps | None = None  # the ManualSteps: updates by hand (w -= lr * w.grad) are steps too
        self.loaders: list[LoaderRecord] = []  # the DataLoaders the user's code made, how each draws its batches
        self.speed: Counter | None = None  # verify --speed: the device run's counts per step (speed.counts)

    def is_batch(self, t) -> bool:
        ref = self.batches.get(id(t))
        return ref is not None and ref() is t

    # -- losses and steps ---------------------------------------------------

    def record_loss(self, t):
        self.backward_calls += 1
        if self.manual is not None:
            self.manual.on_backward(t)
        if self.cap is not None and self.cap.capped:  # past --max-steps: not a training step's loss
            self.scaled.pop(id(t), None)
            self.cap.on_backward()
            return
        try:
            if t.numel() != 1:
                return
            detached = t.detach()
            value = float(detached) if self.speed is None else self.speed.aside(lambda: float(detached))
        except Exception:
            return
        scale = self.scaled.pop(id(t), None)
        if scale:
            value /= scale
        self.losses.append(value)

    def on_step(self, optimizer, args, kwargs):
        if id(optimizer) not in self.optimizers_seen:
            # what the optimizer trains, wherever it is: a script with no module trains plain tensors
            self.optimizers_seen.add(id(optimizer))
            self.trained_devices.update(_device_name(p.device) for group in optimizer.param_groups
                                        for p in group["params"])
        if self.cap is not None and self.cap.suppressing:  # a step after the cap: it did nothing
            self.cap.end_skipped()
            return
        self.steps += 1
        self.step_kinds["optimizer"] = self.step_kinds.get("optimizer", 0) + 1
        self.step_ends.append(time.perf_counter())
        if self.speed is not None:
            self.speed.step_ended()
        if self.cap is not None:
            self.cap.counted(sys._getframe(1))

    def on_manual_step(self, leaf, frame, kind: str, loss: float | None) -> bool:
        """The first update by hand of a round (``w -= lr * w.grad`` after a backward, ``w1 -= lr * grad_w1``
        computed by hand, see manualsteps): a step, as an optimizer's; ``loss`` is its round's where no backward
        recorded one. False when it must do nothing: a step after --max-steps, skipped as a capped optimizer's."""
        self.trained_devices.add(_device_name(leaf.device))
        if self.cap is not None and self.cap.capped:
            self.cap.skip_manual(frame)  # or ends the run, as a capped optimizer step that nothing runs dry
            return False
        self.steps += 1
        self.step_kinds[kind] = self.step_kinds.get(kind, 0) + 1
        if loss is not None:
            self.losses.append(loss)
        self.step_ends.append(time.perf_counter())
        if self.speed is not None:
            self.speed.step_ended()
        if self.cap is not None:
            self.cap.counted(frame)
        return True

    # -- modules --------------------------------------------------------------

    def pre_forward(self, module, args):
        self.depth += 1
        rec = self.modules.get(id(module))
        if rec is None or rec.ref() is not module:
            rec = self.modules[id(module)] = ModuleRecord(module)
            if _non_leaf_attribute(module) is not None:
                self._event("non-leaf-parameter", rec)
        elif rec.param is None:
            rec.param = _first_tensor(module)
        rec.calls += 1
        if self.depth == 1:
            rec.top_calls += 1
            if rec.bound is None:
                rec.bound = self.binding_of(module, sys._getframe(1))
        p = rec.param
        pdev = p.device.type if p is not None else None
        if p is not None:
            rec.param_devices.add(_device_name(p.device))
        has_cpu = has_dev = False
        lengths_on_cpu = _packs_sequences(type(module))
        for a in args:
            if isinstance(a, PackedSequence):
                # batch_sizes and the sort indices live on the CPU by design: only the data counts.
                has_cpu, has_dev = self._note_input(rec, a.data, has_cpu, has_dev)
            elif isinstance(a, torch.Tensor):
                if lengths_on_cpu and _is_lengths(a):
                    continue  # pack_padded_sequence(x, lengths) wants lengths on the CPU
                has_cpu, has_dev = self._note_input(rec, a, has_cpu, has_dev)
            elif isinstance(a, (tuple, list)):
                for x in a:
                    if isinstance(x, torch.Tensor):
                        has_cpu, has_dev = self._note_input(rec, x, has_cpu, has_dev)
        on_device = pdev in _ACCELERATORS or (pdev is None and has_dev)
        if on_device:
            rec.device_calls += 1
        else:
            rec.cpu_calls += 1
        if pdev in _ACCELERATORS and has_cpu:
            self._event("cpu-input-to-device-module", rec)
        elif pdev == "cpu" and has_dev:
            self._event("device-input-to-cpu-module", rec)
        elif pdev is None and has_dev and has_cpu:
            self._event("mixed-inputs", rec)

    def _note_input(self, rec, t, has_cpu, has_dev):
        d = t.device
        rec.input_devices.add(_device_name(d))
        if d.type in _ACCELERATORS:
            has_dev = True
        elif d.type == "cpu" and t.dim() > 0:
            has_cpu = True
        return has_cpu, has_dev

    def post_forward(self, module, args, output):
        self.depth -= 1

    def _event(self, kind, rec):
        if len(self.events) >= 20:
            return
        if any(e["kind"] == kind and e["module_id"] == id(rec.ref()) for e in self.events):
            return
        self.events.append({"kind": kind, "module_id": id(rec.ref()), "module": rec.cls,
                            "where": self.user_location(sys._getframe(2))})

    # -- where in the user's code -------------------------------------------

    def is_user_file(self, filename: str) -> bool:
        if not filename or filename.startswith("<"):
            return False
        return os.path.realpath(filename).startswith(self.workdir + os.sep)

    def user_location(self, frame):
        while frame is not None:
            if self.is_user_file(frame.f_code.co_filename):
                return {"file": frame.f_code.co_filename, "line": frame.f_lineno}
            frame = frame.f_back
        return None

    def binding_of(self, value, frame):
        """The name that holds ``value`` in the innermost user frame from ``frame`` out (a local, a global,
        or ``self.attr``), with that frame's place: where ``cpu2gpu migrate`` looks for its binding."""
        while frame is not None and not self.is_user_file(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return None
        code = frame.f_code
        place = {"file": code.co_filename, "line": frame.f_lineno, "func": code.co_name,
                 "def_line": code.co_firstlineno if code.co_name != "<module>" else 0}
        for name, held in list(frame.f_locals.items()):
            if held is value:
                return self._caller_binding(value, frame, name) or dict(place, name=name)
        owner = frame.f_locals.get("self")
        if owner is not None:
            for attr, held in list(getattr(owner, "__dict__", {}).items()) + list(getattr(owner, "_modules", {}).items()):
                if held is value:
                    return dict(place, name=f"self.{attr}")
        for name, held in list(frame.f_globals.items()):
            if held is value:
                return dict(place, name=name)
        return dict(place, name=None)

    def _caller_binding(self, value, frame, name):
        """Where a parameter's value comes from: while ``name`` is a parameter of the running function,
        the caller's frame and the name it holds the value by, over as many frames as it takes (the model
        handed from main() to run_experiment() to train()). None where the first frame binds it itself."""
        found = None
        while True:
            code = frame.f_code
            if name not in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
                return found
            caller = frame.f_back
            while caller is not None and not self.is_user_file(caller.f_code.co_filename):
                caller = caller.f_back
            held = None if caller is None else next((n for n, v in list(caller.f_locals.items()) if v is value), None)
            if held is None:
                return found
            frame, name = caller, held
            code = frame.f_code
            found = {"file": code.co_filename, "line": frame.f_lineno, "func": code.co_name,
                     "def_line": code.co_firstlineno if code.co_name != "<module>" else 0, "name": name}

    # -- results -------------------------------------------------------------

    def step_times(self) -> list[float]:
        ends = self.step_ends
        return [b - a for a, b in zip(ends, ends[1:])]


def install(rec: Recorder) -> None:
    """Hook torch so that `rec` sees losses, steps, module calls and batches."""
    orig_backward = torch.Tensor.backward
    orig_autograd_backward = torch.autograd.backward

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        if not rec._in_backward:
            rec.record_loss(self)
        rec._in_backward = True
        try:
            return orig_backward(self, gradient, retain_graph, create_graph, inputs)
        finally:
            rec._in_backward = False

    def autograd_backward(tensors, *args, **kwargs):
        if not rec._in_backward:
            if isinstance(tensors, torch.Tensor):
                rec.record_loss(tensors)
            elif isinstance(tensors, (list, tuple)) and len(tensors) == 1:
                rec.record_loss(tensors[0])
        rec._in_backward = True
        try:
            return orig_autograd_backward(tensors, *args, **kwargs)
        finally:
            rec._in_backward = False

    setattr(torch.Tensor, "backward", backward)  # a monkey-patch: setattr, as mypy rejects assigning to a method
    torch.autograd.backward = autograd_backward

    register_optimizer_step_post_hook(rec.on_step)
    register_module_forward_pre_hook(rec.pre_forward)
    register_module_forward_hook(rec.post_forward, always_call=True)

    rec.manual = manualsteps.ManualSteps(rec.on_manual_step, lambda: bool(rec.optimizers_seen), rec.is_user_file)
    manualsteps.install(rec.manual)
    _track_batches(rec)
    _report_worker_lines(rec)
    _note_loaders(rec)
    _unscale_losses(rec)
    if rec.max_steps is not None:
        rec.cap = cap = stepcap.StepCap(rec, rec.max_steps)
        stepcap.install(cap)  # after _track_batches: its gate decides before a batch is noted


def shut_down_workers(rec: Recorder) -> None:
    """End the DataLoader workers still alive (persistent ones, an iterator left mid-epoch), so that they
    report the lines they ran (linetrace)."""
    for iterator in list(rec.worker_iterators):
        try:
            iterator._shutdown_workers()
        except Exception:  # a worker that is already gone: nothing to report
            pass
    rec.lines.from_workers()


def _report_worker_lines(rec: Recorder) -> None:
    """After each batch a DataLoader worker makes, its lines go to the parent (linetrace)."""
    for fetcher in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        orig_fetch = fetcher.fetch

        @functools.wraps(orig_fetch)
        def fetch_batch(self, possibly_batched_index, _orig=orig_fetch):
            batch = _orig(self, possibly_batched_index)
            if get_worker_info() is not None:
                rec.lines.worker_batch_done()
            return batch

        setattr(fetcher, "fetch", fetch_batch)


def _track_batches(rec: Recorder) -> None:
    # A tensor that came out of a DataLoader and stayed on the CPU is a batch
    # not moved (CG103), not just any tensor (CG102).
    base = dataloader._BaseDataLoaderIter
    orig_next = base.__next__

    def note(t):
        if isinstance(t, torch.Tensor):
            rec.batches[id(t)] = weakref.ref(t)

    def __next__(self):
        if isinstance(self, dataloader._MultiProcessingDataLoaderIter):
            rec.worker_iterators.add(self)
        batch = orig_next(self) if rec.speed is None else rec.speed.next_batch(self, orig_next)  # timed: --speed
        if len(rec.batches) > 4096:
            rec.batches = {k: r for k, r in rec.batches.items() if r() is not None}
        if isinstance(batch, (list, tuple)):
            for t in batch:
                note(t)
        elif isinstance(batch, dict):
            for t in batch.values():
                note(t)
        else:
            note(batch)
        return batch

    setattr(base, "__next__", __next__)


def _note_loaders(rec: Recorder) -> None:
    """How each DataLoader the user's code makes draws its batches: a script that shuffles only on the
    accelerator (`if use_cuda: kwargs.update(shuffle=True)`) feeds its device run other batches."""
    orig_init = DataLoader.__init__

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        where = rec.user_location(sys._getframe(1))
        if where is not None:
            batching = getattr(self, "batch_sampler", None)
            rec.loaders.append({"file": where["file"], "line": where["line"],
                                "sampler": type(self.sampler).__name__, "batch_size": self.batch_size,
                                "drop_last": self.drop_last, "batch_sampler": type(batching).__name__})
            if rec.speed is not None:
                rec.speed.loader_made(self, where)

    setattr(DataLoader, "__init__", __init__)


def _unscale_losses(rec: Recorder) -> None:
    # With a GradScaler the scalar given to backward() is loss * scale; record
    # the loss itself so that runs with and without scaling compare.
    try:
        from torch.amp import GradScaler  # new in torch 2.3 (the runtime takes torch >= 2.0): else nothing to unscale
    except ImportError:
        return
    orig_scale = GradScaler.scale

    def scale(self, outputs):
        out = orig_scale(self, outputs)
        if isinstance(out, torch.Tensor) and out is not outputs and self._scale is not None:
            try:
                scale = self._scale
                rec.scaled[id(out)] = float(scale) if rec.speed is None else rec.speed.aside(lambda: float(scale))
            except Exception:
                pass
        return out

    setattr(GradScaler, "scale", scale)


def hide_cuda() -> None:
    """The CPU fallback: answer as a machine without a GPU does."""
    torch.cuda.is_available = lambda: False
    torch.cuda.device_count = lambda: 0
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        acc.is_available = lambda: False
        acc.current_accelerator = lambda check_available=False: None
        acc.device_count = lambda: 0
    mps = getattr(torch.backends, "mps", None)
    if mps is not None:
        mps.is_available = lambda: False


def track_cuda_rng() -> Callable[[], bool]:
    """Whether the script drew from the CUDA generator: its Philox offset
    (bytes 8-16 of the state) grows with each draw; a reseed resets it, so
    the offset is also read just before every reseed."""
    drew = [False]

    def offset_moved():
        state = torch.cuda.get_rng_state()
        return any(state[8:16].tolist())

    for name in ("manual_seed", "manual_seed_all"):
        orig = getattr(torch.cuda, name)

        def reseed(seed, _orig=orig):
            drew[0] = drew[0] or offset_moved()
            return _orig(seed)

        setattr(torch.cuda, name, reseed)
    return lambda: drew[0] or offset_moved()


def strict_cuda() -> None:
    """A real GPU, with TF32 off so that its losses stay close to the CPU's."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
