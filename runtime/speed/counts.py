"""verify --speed in the child: what the device run does in each training step, and one step op by op.

On the simulated device every op on a device tensor goes through SimTensor's dispatch, which hands it to
``Counter.op`` while --speed runs (``sim_tensor.watcher``); so do the copies to the device and the reads of a
tensor's values that bypass the dispatch. Each op is classified: a view or a metadata op (no kernel), a
kernel, a host synchronisation (a scalar read: ``.item()``, ``float()``, ``bool()``; a copy to the host:
``.cpu()``, ``.numpy()``, ``.tolist()``, a print; a shape that depends on the values: ``nonzero``, a boolean
mask), a copy to the device (its bytes, whether its source is pinned, where the source comes from: a
DataLoader's batch, a slice of a longer-lived CPU tensor, the same tensor again, or one made in the step).
The time spent inside the simulated kernels (and in this counting) is measured, so that the host's own time
is the step's wall time without it; the harness tells the waits for a DataLoader's batch and each step's end.

Each step keeps its counts; the steps measured op by op (``DETAIL_STEPS``) also keep each kernel's FLOPs
(the formulas of torch.utils.flop_counter's FlopCounterMode, its ``flop_registry``), its bytes (inputs and
outputs) and the host time before it, which is what the estimate replays on a named GPU (speed.model): the
first of them, with each host time the median of theirs where they did the same things in the same order.
On real CUDA a dispatch mode does the watching (``install``); the host time is then measured as it is.
"""

from __future__ import annotations

import ctypes
import linecache
import statistics
import sys
import threading
import time
import weakref
from collections import defaultdict
from typing import Any, Callable, cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from ..device import sim_tensor
from ..records import SpeedDetail, SpeedLine, SpeedLoader, SpeedPlace, SpeedProfile, SpeedStep

aten = torch.ops.aten

DETAIL_STEPS = (1, 2, 3)  # the steps measured op by op, counted from 0 (the first makes the optimizer's state)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
EVERY_STEP = 0.75  # a line does a thing "every step" where it does it in this share of the steps (or more)
MAX_EVENTS = 20000  # past this, a step's kernels are merged into the one before them
_KEEP_REFS = 4096  # the pinned tensors and copied sources remembered, before the dead ones are dropped



def _ops(*names: str) -> set:
    """The ops (``name`` a packet, ``name.overload`` one overload) that this torch has."""
    found = set()
    for name in names:
        packet_name, _, overload = name.partition(".")
        try:
            packet = getattr(aten, packet_name)
            found.add(getattr(packet, overload) if overload else packet)
        except (AttributeError, RuntimeError):  # an op older or newer torch lacks
            continue
    return found


# ops whose output's size depends on the values: the host must read them (the count of nonzero, a mask's)
_SHAPE_OPS = _ops("nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive", "bincount")
_SHAPE_OVERLOADS = _ops("repeat_interleave.Tensor")
_INDEX_OPS = _ops("index.Tensor", "index_put_.default", "index_put.default", "_index_put_impl_.default")
_NO_KERNEL = _ops("empty.memory_format", "empty_strided.default", "empty_like.default", "new_empty.default",
                  "new_empty_strided.default", "lift_fresh.default", "_local_scalar_dense.default",
                  "resize_.default", "_unsafe_view.default", "set_.source_Storage_storage_offset")
_CONVOLUTIONS = _ops("convolution", "convolution_backward", "_convolution", "cudnn_convolution")
_HALF = (torch.float16, torch.bfloat16)
_STEP_KEYS = ("ops", "kernels", "syncs", "copies_in", "bytes_in", "pinned_in", "copies_out", "bytes_out",
              "allocations", "allocated_bytes")


class Counter:
    """The counts of one device run, step by step (see the module's docstring)."""

    def __init__(self, mode: str, is_user_file: Callable[[str], bool], is_batch: Callable[[Any], bool],
                 is_device: Callable[[Any], bool], ops_on_host: bool) -> None:
        self.mode = mode
        self.is_user_file = is_user_file
        self.is_batch = is_batch
        self.is_device = is_device
        self.ops_on_host = ops_on_host  # the simulated kernels run here: their time is not the host's own
        self.local = threading.local()  # .depth: inside an op; .view: that op is a view
        self.user_files: dict[str, bool] = {}
        self.places: list[tuple[str, int]] = []
        self.place_ids: dict[tuple[str, int], int] = {}
        self.steps: list[dict] = []
        self.loaders: list[dict] = []
        self.loader_ids: dict[int, int] = {}  # id(dataset) -> index in loaders
        self.pinned: dict[int, weakref.ref] = {}
        self.copied: dict[int, weakref.ref] = {}  # the CPU tensors copied to the device so far
        self.batch_storages: dict[int, weakref.ref] = {}  # a batch's storage -> the batch's tensor
        self.pinned_storages: dict[int, weakref.ref] = {}  # a pinned tensor's storage -> the tensor
        self.flop_formulas = getattr(FlopCounterMode(display=False), "flop_registry", {})
        self.events: list[list] | None = None  # the detailed step's, while it runs
        self.detailed: list[SpeedDetail] = []
        self.merged = 0
        self.last_host = 0.0
        self.stopped = False
        self.convolution_shapes: set[tuple] = set()  # the input shapes the convolutions ran with
        self.new_shape_steps: set[int] = set()  # the steps after the second that brought a new one
        self.convolution_place = -1  # the user's line of the first
        self.read_dtypes: dict[int, set] = {}  # place -> the dtypes of the scalars read there
        self.source_bytes: dict[int, int] = {}  # place -> the largest whole CPU tensor a copy there slices (or repeats)
        self._start(time.perf_counter())

    # -- steps ------------------------------------------------------------------------------------

    def _start(self, now: float) -> None:
        self.t0 = now
        self.cur: dict[str, Any] = dict.fromkeys(_STEP_KEYS, 0)
        self.cur.update(kernel_s=0.0, data_wait_s=0.0)
        self.lines: dict[tuple, list] = defaultdict(lambda: [0, 0])  # (kind, place, what, pinned, nb) -> [n, bytes]
        self.waits: dict[int, list] = defaultdict(lambda: [0, 0.0])  # loader -> [batches, seconds]
        self.last_host = 0.0
        self.events = [] if len(self.steps) in DETAIL_STEPS else None
        self.merged = 0

    def _host_now(self, now: float) -> float:
        return (now - self.t0) - self.cur["kernel_s"] - self.cur["data_wait_s"]

    def _gap(self, now: float) -> float:
        host = self._host_now(now)
        gap, self.last_host = max(0.0, host - self.last_host), host
        return gap

    def step_ended(self) -> None:
        """A training step was counted (the harness): its interval closes, the next one opens."""
        if self.stopped:
            return
        now = time.perf_counter()
        cur = self.cur
        wall = now - self.t0
        step = {key: cur[key] for key in _STEP_KEYS}
        step.update(wall_s=wall, kernel_s=cur["kernel_s"], data_wait_s=cur["data_wait_s"],
                    host_s=max(0.0, wall - cur["kernel_s"] - cur["data_wait_s"]))
        self.steps.append({"step": step, "lines": dict(self.lines), "waits": dict(self.waits)})
        if self.events is not None:
            self.events.append(["e", self._gap(now)])
            flops = sum(e[2] for e in self.events if e[0] == "k")
            self.detailed.append({"step": len(self.steps), "events": self.events, "flops": flops,
                                  "merged": self.merged})
        self._start(time.perf_counter())

    def stop(self) -> None:
        self.stopped = True
        if sim_tensor.watcher is self:
            sim_tensor.watcher = None

    # -- where in the user's code -----------------------------------------------------------------

    def _walk(self, frame) -> int:
        while frame is not None:
            name = frame.f_code.co_filename
            user = self.user_files.get(name)
            if user is None:
                user = self.user_files[name] = self.is_user_file(name)
            if user:
                key = (name, frame.f_lineno)
                place = self.place_ids.get(key)
                if place is None:
                    place = self.place_ids[key] = len(self.places)
                    self.places.append(key)
                return place
            frame = frame.f_back
        return -1

    def place(self) -> int:
        """The user's line that runs now: on this thread, else (the autograd engine's device thread runs the
        backward) on the thread that waits for it."""
        found = self._walk(sys._getframe(2))
        if found >= 0:
            return found
        me = threading.get_ident()
        for ident, frame in list(sys._current_frames().items()):
            if ident != me:
                found = self._walk(frame)
                if found >= 0:
                    return found
        return -1

    # -- the watcher's calls (sim_tensor.watcher) -------------------------------------------------

    def op(self, func, args, kwargs, run):
        """One op on the device, run by ``run(func, args, kwargs)``: counted, and its time taken from the host's."""
        local = self.local
        if getattr(local, "depth", 0) or self.stopped:
            return run(func, args, kwargs)
        t0 = time.perf_counter()
        local.depth = 1
        run_s = 0.0
        try:
            what = self._classify(func, args, kwargs)
            local.view = what == "view"
            cur = self.cur
            cur["ops"] += 1
            detail = self.events is not None
            gap = self._gap(t0) if detail and what != "view" else 0.0
            if what == "in":
                source = args[1] if func is aten.copy_.default else args[0]
                non_blocking = bool(kwargs.get("non_blocking") or (func is aten.copy_.default and len(args) > 2
                                                                    and args[2]))
                self._copy_in(source, non_blocking, gap)
                gap = 0.0
            elif what == "out":
                source = args[1] if func is aten.copy_.default else args[0]
                self._sync("to_host", _nbytes(source), gap, counted_out=True)
                gap = 0.0
            elif what == "scalar":
                self._sync("scalar", _nbytes(args[0]), gap, dtype=_dtype(args[0]))
                gap = 0.0
            r0 = time.perf_counter()
            out = run(func, args, kwargs)
            run_s = time.perf_counter() - r0
            if what in ("kernel", "shape"):
                cur["kernels"] += 1
                if func._overloadpacket in _CONVOLUTIONS and args and isinstance(args[0], torch.Tensor):
                    self._convolution(tuple(args[0].shape))
                if detail:
                    self._kernel(func, args, kwargs, out, gap)
                if what == "shape":
                    self._sync("shape", 8, 0.0)
            if not self.ops_on_host and what in ("kernel", "shape", "in"):  # real CUDA: no SimTensor to tell them
                self._allocated(args, out)
            return out
        finally:
            local.depth = 0
            local.view = False
            spent = time.perf_counter() - t0
            self.cur["kernel_s"] += spent if self.ops_on_host else spent - run_s

    def _inside(self) -> bool:
        """Whether this thread runs an op (or the instrumentation's own work) now."""
        return bool(getattr(self.local, "depth", 0))

    def made(self, elem) -> None:
        """A new device tensor: an allocation, unless it is a view's wrapper."""
        if self.stopped or getattr(self.local, "view", False):
            return
        self.cur["allocations"] += 1
        self.cur["allocated_bytes"] += _nbytes(elem)

    def _allocated(self, args, out) -> None:
        """The outputs of an op that are new tensors (not an input given back): its allocations."""
        given = {id(t) for t in _flat(args)}
        for t in _flat(out):
            if id(t) not in given:
                self.made(t)

    def read(self, tensor, how: str) -> None:
        """A device tensor's values read outside the dispatch: ``tolist``, ``numpy``, a print."""
        if self.stopped or self._inside():
            return
        t0 = time.perf_counter()
        gap = self._gap(t0) if self.events is not None else 0.0
        self._sync("print" if how == "print" else "to_host", _nbytes(tensor), gap, counted_out=True)
        self.cur["kernel_s"] += time.perf_counter() - t0  # the counting's own time

    # -- the harness's calls ------------------------------------------------------------------------

    def loader_made(self, loader, where) -> None:
        """A DataLoader the user's code made, at ``where`` (file, line)."""
        place = self.place_ids.get((where["file"], where["line"]))
        if place is None:
            place = self.place_ids[(where["file"], where["line"])] = len(self.places)
            self.places.append((where["file"], where["line"]))
        self._loader(loader.dataset, place, loader.num_workers, loader.pin_memory,
                     bool(getattr(loader, "persistent_workers", False)))

    def next_batch(self, iterator, fetch):
        """``fetch(iterator)``, a DataLoader's next batch, timed as the host's wait for it."""
        if self.stopped:
            return fetch(iterator)
        t0 = time.perf_counter()
        inside = self.cur["kernel_s"]
        gap = self._gap(t0) if self.events is not None else 0.0
        batch = None
        try:
            batch = fetch(iterator)
            return batch
        finally:
            for t in _flat(list(batch.values()) if isinstance(batch, dict) else batch):
                _remember(self.batch_storages, t, key=_storage(t))
            t1 = time.perf_counter()
            waited = max(0.0, (t1 - t0) - (self.cur["kernel_s"] - inside))
            self.cur["data_wait_s"] += waited
            dataset = getattr(iterator, "_dataset", None)
            index = self.loader_ids.get(id(dataset))
            if index is None:
                index = self._loader(dataset, self.place(), getattr(iterator, "_num_workers", 0),
                                     bool(getattr(iterator, "_pin_memory", False)),
                                     bool(getattr(iterator, "_persistent_workers", False)))
            entry = self.waits[index]
            entry[0] += 1
            entry[1] += waited
            if self.events is not None:
                self.events.append(["w", gap, waited, index])
                self.last_host = self._host_now(time.perf_counter())

    def aside(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, the instrumentation's own work (the harness reads each loss): neither counted nor host time."""
        local = self.local
        if getattr(local, "depth", 0):
            return fn()
        t0 = time.perf_counter()
        local.depth = 1
        try:
            return fn()
        finally:
            local.depth = 0
            self.cur["kernel_s"] += time.perf_counter() - t0

    def pinned_by(self, tensor) -> None:
        """``tensor`` came out of ``pin_memory()`` (on the simulated device, the same tensor: nothing is pinned)."""
        _remember(self.pinned, tensor)
        _remember(self.pinned_storages, tensor, key=_storage(tensor))

    # -- counting -----------------------------------------------------------------------------------

    def _loader(self, dataset, place: int, workers, pin: bool, persistent: bool) -> int:
        index = len(self.loaders)
        self.loaders.append({"place": place, "num_workers": int(workers or 0), "pin_memory": bool(pin),
                             "persistent_workers": persistent})
        self.loader_ids[id(dataset)] = index
        return index

    def _classify(self, func, args, kwargs) -> str:
        if func is aten._local_scalar_dense.default:
            return "scalar"
        if func is aten._to_copy.default:
            source = args[0]
            if not self.is_device(source):
                return "in"
            to = kwargs.get("device")
            return "out" if to is not None and to.type == "cpu" else "kernel"
        if func is aten.copy_.default:
            into, source = args[0], args[1]
            if not isinstance(source, torch.Tensor):
                return "kernel"
            if self.is_device(into) and not self.is_device(source):
                return "in"
            if not self.is_device(into) and self.is_device(source):
                return "out"
            return "kernel"
        packet = func._overloadpacket
        if packet in _SHAPE_OPS or func in _SHAPE_OVERLOADS:
            return "shape"
        if func in _INDEX_OPS and _boolean_index(args):
            return "shape"
        if func.is_view or func in _NO_KERNEL:
            return "view"
        return "kernel"

    def _kernel(self, func, args, kwargs, out, gap: float) -> None:
        flops = 0.0
        formula = self.flop_formulas.get(func._overloadpacket)
        if formula is not None:
            try:
                flops = float(formula(*args, **kwargs, out_val=out))
            except Exception:  # a formula that does not take these arguments: no FLOPs counted
                flops = 0.0
        size = _bytes_of(args) + _bytes_of(list(kwargs.values())) + _bytes_of(out)
        events = self.events
        assert events is not None
        if len(events) >= MAX_EVENTS and events[-1][0] == "k":
            last = events[-1]
            last[1] += gap
            last[2] += flops
            last[3] += size
            last[6] += 1
            self.merged += 1
            return
        events.append(["k", gap, flops, size, _math(func, args, flops), self.place(), 1])

    def _convolution(self, shape: tuple) -> None:
        if shape in self.convolution_shapes:
            return
        self.convolution_shapes.add(shape)
        if len(self.steps) >= 2:
            self.new_shape_steps.add(len(self.steps))
        if self.convolution_place < 0:
            self.convolution_place = self.place()

    def _sync(self, what: str, size: int, gap: float, counted_out: bool = False, dtype: str = "") -> None:
        cur = self.cur
        cur["syncs"] += 1
        if counted_out:
            cur["copies_out"] += 1
            cur["bytes_out"] += size
        place = self.place()
        if dtype:
            self.read_dtypes.setdefault(place, set()).add(dtype)
        entry = self.lines[("sync", place, what, False, False)]
        entry[0] += 1
        entry[1] += size
        if self.events is not None:
            self.events.append(["s", gap, what, size, place])

    def _copy_in(self, source, non_blocking: bool, gap: float) -> None:
        size = _nbytes(source)
        pinned = self._is_pinned(source)
        kind = self._source(source)
        cur = self.cur
        place = self.place()
        if kind in ("slice", "same"):
            whole = _nbytes(getattr(source, "_base", None) if kind == "slice" else source)
            self.source_bytes[place] = max(self.source_bytes.get(place, 0), whole)
        cur["copies_in"] += 1
        cur["bytes_in"] += size
        cur["pinned_in"] += int(pinned)
        entry = self.lines[("copy", place, kind, pinned, non_blocking)]
        entry[0] += 1
        entry[1] += size
        if self.events is not None:
            self.events.append(["h", gap, size, pinned, non_blocking, place, kind])

    def _is_pinned(self, source) -> bool:
        for t in (source, getattr(source, "_base", None)):
            if t is not None and _held(self.pinned, t):
                return True
        if _shares_storage(self.pinned_storages, source):  # a pinned batch rewrapped (Variable(images.view(...)))
            return True
        try:
            return bool(source.is_pinned())
        except Exception:  # no accelerator to ask (a CPU build): not pinned
            return False

    def _source(self, source) -> str:
        """Where a copy's CPU tensor comes from: a DataLoader's "batch", a "slice" of a longer-lived tensor, the
        "same" tensor as an earlier copy's, or one "made" since."""
        base = getattr(source, "_base", None)
        if self.is_batch(source) or (base is not None and self.is_batch(base)):
            return "batch"
        if _shares_storage(self.batch_storages, source):  # a batch rewrapped (Variable(images.view(...)))
            return "batch"
        if base is not None:
            return "slice"
        if _held(self.copied, source):
            return "same"
        _remember(self.copied, source)
        return "made"

    # -- the record ---------------------------------------------------------------------------------

    def profile(self, display: Callable[[str], str]) -> SpeedProfile:
        """The run's record: every step, the medians over the steps after the first, the lines that synchronise
        or copy every step, the loaders, the detailed step."""
        steps = [s["step"] for s in self.steps]
        later = self.steps[1:]
        per_step: SpeedStep | None = None
        if later:
            medians = {key: statistics.median(s["step"][key] for s in later)
                       for key in (*_STEP_KEYS, "wall_s", "kernel_s", "data_wait_s", "host_s")}
            per_step = cast(SpeedStep, medians)
        lines: list[SpeedLine] = []
        keys = sorted({key for s in later for key in s["lines"]}, key=lambda k: (k[0], k[1], str(k[2])))
        for key in keys:
            counts = [s["lines"].get(key, (0, 0)) for s in later]
            per = statistics.median(c[0] for c in counts)
            if per <= 0 or sum(1 for c in counts if c[0]) < EVERY_STEP * len(counts):
                continue  # not every step: an epoch's end, an evaluation, a print every N epochs
            kind, place, what, pinned, non_blocking = key
            lines.append({"kind": kind, "place": place, "what": what, "per_step": per,
                          "bytes_per_step": statistics.median(c[1] for c in counts), "pinned": pinned,
                          "non_blocking": non_blocking, "steps": sum(1 for c in counts if c[0]),
                          "source_bytes": self.source_bytes.get(place, 0) if kind == "copy" else 0,
                          "dtypes": sorted(self.read_dtypes.get(place, ())) if what == "scalar" else []})
        loaders: list[SpeedLoader] = []
        for index, loader in enumerate(self.loaders):
            waits = [s["waits"].get(index, (0, 0.0)) for s in later]
            loaders.append({**loader,  # type: ignore[typeddict-item]
                            "wait_s": statistics.median(w[1] for w in waits) if waits else 0.0,
                            "batches": statistics.median(w[0] for w in waits) if waits else 0.0})
        places: list[SpeedPlace] = [{"file": display(f), "line": n, "source": linecache.getline(f, n).strip()}
                                    for f, n in self.places]
        return {"mode": self.mode, "steps": steps, "per_step": per_step, "places": places, "lines": lines,
                "loaders": loaders, "detail": _steady(self.detailed),
                "convolutions": {"shapes": len(self.convolution_shapes), "place": self.convolution_place,
                                 "fixed": len(self.new_shape_steps) <= 2,
                                 "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}}


def _steady(detailed: list[SpeedDetail]) -> SpeedDetail | None:
    """The first detailed step, each event's host time the median of the detailed steps that match it event for
    event (one step's hiccup, a collection or another program's turn on the CPU, is not the step's)."""
    if not detailed:
        return None
    first = detailed[0]

    def shape(d: SpeedDetail) -> list:
        return [(e[0], e[5] if e[0] in "kh" else e[4] if e[0] == "s" else None) for e in d["events"]]

    alike = [d for d in detailed if shape(d) == shape(first)]
    events = []
    for i, event in enumerate(first["events"]):
        event = list(event)
        event[1] = statistics.median(d["events"][i][1] for d in alike)
        if event[0] == "w":
            event[2] = statistics.median(d["events"][i][2] for d in alike)
        events.append(event)
    return {**first, "events": events}


def _remember(refs: dict, tensor, key: int | None = None) -> None:
    """``refs[key]`` (the tensor's id by default): a weak reference to ``tensor``."""
    if isinstance(tensor, torch.nn.Parameter) or key == 0:
        return  # a weak reference would stop Module.to from swapping it (torch.utils.swap_tensors refuses)
    if len(refs) > _KEEP_REFS:
        for old in [k for k, r in refs.items() if r() is None]:
            del refs[old]
    refs[id(tensor) if key is None else key] = weakref.ref(tensor)


def _storage(t) -> int:
    """Where a CPU tensor's values are: its storage's address (0 where it has none)."""
    try:
        return int(t.untyped_storage().data_ptr())
    except Exception:  # a tensor without storage (a wrapper, a meta tensor)
        return 0


def _shares_storage(refs: dict, tensor) -> bool:
    """Whether a tensor remembered by its storage (``_remember(refs, t, key=_storage(t))``), still alive, holds
    ``tensor``'s values."""
    ref = refs.get(_storage(tensor))
    return ref is not None and ref() is not None


def _held(refs: dict, tensor) -> bool:
    ref = refs.get(id(tensor))
    return ref is not None and ref() is tensor


def _boolean_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _dtype(t) -> str:
    """A tensor's dtype as torch names it ("float32"), else ""."""
    return str(t.dtype).replace("torch.", "") if isinstance(t, torch.Tensor) else ""


def _nbytes(t) -> int:
    if not isinstance(t, torch.Tensor):
        return 0
    inner = getattr(t, "_e", t)
    return inner.numel() * inner.element_size()


def _bytes_of(values) -> int:
    if isinstance(values, torch.Tensor):
        return _nbytes(values)
    if isinstance(values, (list, tuple)):
        return sum(_bytes_of(v) for v in values)
    return 0


def _math(func, args, flops: float) -> str:
    """The arithmetic a kernel's FLOPs run in on a GPU: half precision, FP64, TF32 where torch allows it, FP32."""
    if not flops:
        return "fp32"
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    dtype = first.dtype if first is not None else torch.float32
    if dtype in _HALF:
        return "half"
    if dtype is torch.float64:
        return "fp64"
    if func._overloadpacket in _CONVOLUTIONS:
        return "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32"


def _run(func, args, kwargs):
    return func(*args, **kwargs)


class _Watch(TorchDispatchMode):
    """Real CUDA: every op goes through the counter, as the simulated device's dispatch does."""

    def __init__(self, counter: Counter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not any(self.counter.is_device(a) for a in _tensors(args, kwargs)):
            return func(*args, **(kwargs or {}))  # the host's own op
        return self.counter.op(func, args, kwargs or {}, _run)


def _flat(values):
    """The tensors of an op's arguments or results (in lists and tuples too)."""
    if isinstance(values, torch.Tensor):
        yield values
    elif isinstance(values, (list, tuple)):
        for v in values:
            yield from _flat(v)


def _tensors(args, kwargs):
    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def _on_cuda(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_cuda


def _keep_freed_memory() -> None:
    """The simulated device's tensors are the C library's memory: by default each large one is mapped when made
    and unmapped when freed, outside any op, so a large model's step spends milliseconds of "host time" giving
    pages back, which a GPU's caching allocator does not. Kept in the heap (glibc's mallopt: no mmap, no trim
    below 1 GB), freed memory is reused as a GPU's allocator reuses it. Elsewhere (not glibc): left as it is."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)
        libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):  # not glibc
        pass


def install(mode: str, is_user_file: Callable[[str], bool], is_batch: Callable[[Any], bool]) -> Counter:
    """Watch the device run of ``mode`` ("sim": the simulated device's dispatch; "cuda": a dispatch mode)."""
    if mode != "cuda":
        _keep_freed_memory()
    if mode == "cuda":
        counter = Counter(mode, is_user_file, is_batch, _on_cuda, ops_on_host=False)
        _Watch(counter).__enter__()  # for the rest of the run
    else:
        counter = Counter(mode, is_user_file, is_batch, lambda t: isinstance(t, sim_tensor.SimTensor),
                          ops_on_host=True)
        sim_tensor.watcher = counter
    pin = torch.Tensor.pin_memory

    def pin_memory(self, *args, **kwargs):
        out = pin(self, *args, **kwargs)
        counter.pinned_by(out)
        return out

    setattr(torch.Tensor, "pin_memory", pin_memory)  # a monkey-patch: mypy rejects assigning to a method
    return counter
