"""verify --speed's section: from the device run's counts (speed.counts) to where the GPU would idle on a named
card, and the causes, each with its line and its fix, ranked by the idle time it explains.

The detailed step's events are replayed on the card (speed.model), their host times scaled to the median step's
(the host's own work, the waits for batches), so that one step's chance does not make the estimate. A cause is a
thing that happens every step (the median step has it) at a line: a DataLoader the step waits for, a line that
synchronises, a line that copies to the device; or many small kernels. What it explains is what the replayed
step saves without it (the batch ready at once, the sync gone, the copy pinned and asynchronous, the tensor
moved once or made on the device, the kernels without their launches). One that saves nothing measurable is no
cause. torch-free.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from . import model
from .gpus import Gpu
from .model import Event, Timeline
from ..records import SpeedCause, SpeedEstimate, SpeedLine, SpeedProfile, SpeedReport

MIN_SHARE = 0.005  # a cause explains at least this share of the step ...
MIN_SECONDS = 5e-6  # ... and this much time
LOADER_SHARE = 0.25  # a DataLoader with workers: its wait must be this share (each batch's hand-over takes some)
MANY_KERNELS = 100  # kernels a step from which their launches can be a cause
TIED = 0.1  # causes whose times are this close are ranked by their lines

OMITS = ("an estimate, not a measurement: the device time assumes each kernel runs at the card's peak FLOP/s or "
         "memory bandwidth, whichever binds (real kernels reach less, so the device time is a lower bound and the "
         "idle share an upper one), on one stream, with copies overlapping kernels only where they are "
         "non_blocking from pinned memory; it leaves out the caching allocator (allocations cost nothing), cuDNN's "
         "choice of algorithm, and the real host cost of a CUDA launch: the host time is this machine's "
         "(Python, torch's own work and the simulated device's outside its kernels), which a GPU's host spends "
         "differently")

# a sync's kind: (what it does, its fix)
_SYNC_WORDS = {
    "scalar": ("a value read back to the host: .item(), float(), bool(), a format",
               "keep the value on the device (loss.detach()) and read it once after the loop or every N steps "
               "(torch.stack(values).tolist())"),
    "shape": ("a boolean-mask selection or nonzero(), whose size depends on the values, so the host waits for them",
              "keep the shape fixed: multiply by the mask or use torch.where, count with (mask & ...).sum() on the "
              "device"),
    "to_host": ("a copy to the host: .cpu(), .numpy(), .tolist()",
                "keep it on the device and copy it once after the loop or every N steps"),
    "print": ("a device tensor printed, which copies it to the host", "print every N steps, or values read once after "
                                                                       "the loop"),
}


def report(run: str, profile: SpeedProfile, gpu: Gpu) -> SpeedReport:
    """The speed section for ``run``'s profile, estimated for ``gpu``."""
    out: SpeedReport = {"run": run, "gpu": gpu.name, "steps": len(profile.get("steps") or []),
                        "counts": profile.get("per_step"), "estimate": None, "causes": [], "omits": OMITS}
    per_step = profile.get("per_step")
    detail = profile.get("detail")
    if per_step is None or detail is None:
        out["summary"] = out["note"] = ("no estimate: it takes two training steps or more (the first one holds the "
                                        "run's start and is left out)")
        return out
    events = replay(profile)
    base = model.simulate(events, gpu)
    causes = ranked(_causes(profile, events, gpu, base))
    cudnn = _cudnn_cause(profile)
    if cudnn is not None:
        causes += ranked([cudnn])
    out["estimate"] = _estimate(base, gpu, detail["flops"])
    out["causes"] = causes
    out["summary"] = summary(base, causes, gpu, per_step["kernels"])
    return out


def replay(profile: SpeedProfile) -> list[Event]:
    """The detailed step's events, their host times scaled to the median step's own work, their waits to its
    median wait for batches."""
    per_step = profile["per_step"]
    detail = profile["detail"]
    assert per_step is not None and detail is not None
    raw = detail["events"]
    host = sum(e[1] for e in raw)
    waits = sum(e[2] for e in raw if e[0] == "w")
    scale = per_step["host_s"] / host if host > 0 else 1.0
    wait_scale = per_step["data_wait_s"] / waits if waits > 0 else 1.0
    events = []
    for e in raw:
        kind, gap = e[0], e[1] * scale
        if kind == "k":
            events.append(Event("kernel", gap, flops=e[2], bytes=e[3], math=e[4], kernels=e[6], tag=("kernel", e[5])))
        elif kind == "s":
            events.append(Event("sync", gap, bytes=e[3], tag=("sync", e[4], e[2])))
        elif kind == "h":
            events.append(Event("copy", gap, bytes=e[2], pinned=bool(e[3]), non_blocking=bool(e[4]),
                                tag=("copy", e[5], e[6])))
        elif kind == "w":
            events.append(Event("wait", gap, seconds=e[2] * wait_scale, tag=("loader", e[3])))
        else:
            events.append(Event("end", gap))
    return events


def _estimate(t: Timeline, gpu: Gpu, flops: float) -> SpeedEstimate:
    return {"gpu": gpu.name, "step_s": t.step_s, "busy_s": t.busy_s, "launch_s": t.launch_s, "copy_s": t.copy_s,
            "host_s": t.host_s, "idle_fraction": t.idle_fraction, "flops": flops}


def _place(profile: SpeedProfile, index: int) -> tuple[str | None, int | None, str]:
    places = profile.get("places") or []
    if 0 <= index < len(places):
        p = places[index]
        return p["file"], p["line"], p["source"]
    return None, None, ""


def _cause(profile, kind: str, place: int, per_step: float, size: float, seconds: float, step: float,
           what: str, fix: str, copied: str = "", source_bytes: int = 0, dtypes: list[str] | None = None
           ) -> SpeedCause:
    file, line, source = _place(profile, place)
    return {"kind": kind, "copied": copied, "source_bytes": source_bytes, "dtypes": dtypes or [], "file": file, "line": line, "source": source, "per_step": per_step,
            "bytes_per_step": size, "seconds": seconds, "share": seconds / step if step else 0.0, "what": what,
            "fix": fix}


def _measurable(seconds: float, base: Timeline, share: float = MIN_SHARE) -> bool:
    return seconds >= MIN_SECONDS and seconds >= share * base.step_s


def _causes(profile: SpeedProfile, events: list[Event], gpu: Gpu, base: Timeline) -> list[SpeedCause]:
    found: list[SpeedCause] = []

    def saved(change: Callable[[Event], Event | None], card: Gpu = gpu) -> float:
        if card is gpu:
            return model.saving(events, gpu, change, base)
        return base.step_s - model.simulate(events, card).step_s

    step = base.step_s
    device = base.device_s
    for index, loader in enumerate(profile.get("loaders") or []):
        if not loader["wait_s"]:
            continue
        seconds = saved(_ready(index))
        workers = loader["num_workers"]
        if not _measurable(seconds, base, MIN_SHARE if workers == 0 else LOADER_SHARE):
            continue
        wait = milliseconds(loader["wait_s"] / max(1.0, loader["batches"]))
        if workers == 0:
            what = (f"prepares batches on the main process (num_workers=0: {wait} per batch against an estimated "
                    f"{milliseconds(device)} of device work a step)")
            fix = ("num_workers=N (as many as the cores allow), persistent_workers=True, pin_memory=True, and "
                   ".to(device, non_blocking=True) on the batches; a worker_init_fn where the data set draws random "
                   "numbers")
        else:
            what = (f"its {workers} workers do not keep up: the step waits {wait} per batch against an estimated "
                    f"{milliseconds(device)} of device work a step")
            fix = "more workers (num_workers), less work per item in __getitem__, or the data prepared once beforehand"
        found.append(_cause(profile, "loader", loader["place"], loader["batches"], 0, seconds, step,
                            f"the DataLoader at {{at}} {what}", fix))
    sync_lines: dict[int, list[SpeedLine]] = {}
    for line in profile.get("lines") or []:
        if line["kind"] == "sync":
            sync_lines.setdefault(line["place"], []).append(line)
    for place, lines in sync_lines.items():
        seconds = saved(_unsynced(place))
        if not _measurable(seconds, base):
            continue
        count = sum(line["per_step"] for line in lines)
        kinds = list(dict.fromkeys(line["what"] for line in sorted(lines, key=lambda line: -line["per_step"])))
        why = "; ".join(_SYNC_WORDS.get(k, (k, ""))[0] for k in kinds)
        fix = "; ".join(_SYNC_WORDS.get(k, ("", ""))[1] for k in kinds)
        found.append(_cause(profile, "sync", place, count, sum(line["bytes_per_step"] for line in lines), seconds,
                            step, f"{{source}} at {{at}} synchronises every step ({_count(count)} a step: {why})",
                            fix, dtypes=sorted({d for line in lines for d in line.get("dtypes", ())})))
    for line in profile.get("lines") or []:
        if line["kind"] != "copy" or (line["pinned"] and line["non_blocking"]):
            continue
        cause = _copy_cause(profile, line, events, gpu, base, saved)
        if cause is not None:
            found.append(cause)
    launches = _launch_cause(profile, events, gpu, base, saved)
    if launches is not None:
        found.append(launches)
    return found


def _ready(loader: int) -> Callable[[Event], Event | None]:
    """The change that has the loader's batches ready at once."""
    return lambda e: replace(e, seconds=0.0) if e.tag == ("loader", loader) else e


def _unsynced(place: int) -> Callable[[Event], Event | None]:
    """The change that takes the syncs of one line away."""
    return lambda e: None if e.kind == "sync" and e.tag[1] == place else e


def _copy_cause(profile, line: SpeedLine, events, gpu, base, saved) -> SpeedCause | None:
    place, source = line["place"], line["what"]

    def mine(e: Event) -> bool:
        return e.kind == "copy" and e.tag == ("copy", place, source) and e.pinned == line["pinned"] \
            and e.non_blocking == line["non_blocking"]

    size = line["bytes_per_step"]
    memory = "pinned" if line["pinned"] else "pageable"
    amount = f"{_count(line['per_step'])} a step, {byte_size(size)}"
    if source == "batch":
        seconds = saved(lambda e: replace(e, pinned=True, non_blocking=True) if mine(e) else e)
        kind = "copy"
        what = (f"{{at}} copies the batches to the device from {memory} memory"
                f"{'' if line['non_blocking'] else ', waiting for each'} ({amount})")
        fix = "pin_memory=True in the DataLoader and .to(device, non_blocking=True)"
    elif source in ("slice", "same"):
        seconds = saved(lambda e: None if mine(e) else e)
        kind = "copy"
        what = (f"{{at}} copies {'a slice of a CPU tensor' if source == 'slice' else 'the same CPU tensor'} to the "
                f"device every step, from {memory} memory ({amount})")
        fix = "move the whole tensor to the device once, before the loop, and take the slices there"
    else:  # made on the host in the step: made on the device, its host work (the time before the copy) is gone
        seconds = saved(lambda e: Event("kernel", 0.0, bytes=e.bytes, tag=e.tag) if mine(e) else e)
        kind = "made"
        what = f"{{at}} creates a tensor on the CPU every step and copies it to the device ({amount})"
        fix = ("create it on the device: device=... in the factory (torch.randn(..., device=device), with a device "
               "generator where it draws from its own), or build it once before the loop")
    if not _measurable(seconds, base):
        return None
    return _cause(profile, kind, place, line["per_step"], size, seconds, base.step_s, what, fix, copied=source,
                  source_bytes=line.get("source_bytes", 0))


def _cudnn_cause(profile: SpeedProfile) -> SpeedCause | None:
    """Convolutions of fixed shapes whose algorithm cuDNN does not choose by timing: not in the estimate (which
    knows no algorithms), so it explains no time and comes last."""
    convolutions = profile.get("convolutions")
    if not convolutions or not convolutions["shapes"] or convolutions["cudnn_benchmark"] or not convolutions["fixed"]:
        return None
    what = (f"the convolutions (the first at {{at}}) run with {convolutions['shapes']} input shapes, fixed from step to "
            f"step, and cuDNN takes its default algorithm for each instead of the fastest (not in the estimate)")
    fix = "torch.backends.cudnn.benchmark = True after the device line"
    return _cause(profile, "cudnn", convolutions["place"], 0, 0, 0.0, 1.0, what, fix)


def _launch_cause(profile: SpeedProfile, events, gpu, base, saved) -> SpeedCause | None:
    kernels = sum(e.kernels for e in events if e.kind == "kernel")
    if kernels < MANY_KERNELS:
        return None
    seconds = saved(lambda e: e, model.without_launches(gpu))
    if not _measurable(seconds, base) or base.launch_s < base.busy_s:
        return None
    by_place: dict[int, int] = {}
    for e in events:
        if e.kind == "kernel":
            by_place[e.tag[1]] = by_place.get(e.tag[1], 0) + e.kernels
    top = max(by_place, key=lambda p: by_place[p])
    share = base.launch_s / base.device_s if base.device_s else 0.0
    what = (f"launches {kernels} kernels a step, most too small to fill the GPU: their launches are "
            f"{share:.0%} of the estimated device time ({by_place[top]} of them from {{at}})")
    fix = ("fewer, larger kernels: torch.compile(model) (mode=\"reduce-overhead\" adds CUDA graphs), no Python loop "
           "over small tensors in the step, or a larger batch")
    return _cause(profile, "launches", top, kernels, 0, seconds, base.step_s, what, fix)


def ranked(causes: list[SpeedCause]) -> list[SpeedCause]:
    """By the idle time each explains; those within TIED of each other by their place in the code. Their words
    get their places."""
    order = sorted(causes, key=lambda c: -c["seconds"])
    out: list[SpeedCause] = []
    while order:
        lead = order[0]["seconds"]
        tied = [c for c in order if c["seconds"] >= lead * (1 - TIED)]
        tied.sort(key=lambda c: (c["file"] or "", c["line"] or 0))
        out += tied
        order = [c for c in order if c not in tied]
    for c in out:
        at = f"{c['file']}:{c['line']}" if c["file"] else "an unknown line"
        c["what"] = c["what"].replace("{at}", at).replace("{source}", _code(c["source"]))
    return out


def summary(base: Timeline, causes: list[SpeedCause], gpu: Gpu, kernels: float) -> str:
    """One sentence: how much of each step the GPU would idle, and why."""
    head = f"the GPU would idle ~{_percent(base.idle_fraction)} of each step (estimate for {gpu.name})"
    explained = sum(c["seconds"] for c in causes)
    idle = base.idle_fraction * base.step_s
    parts = [short(c) for c in causes[:3]]
    if len(causes) > 3:
        parts.append(f"and {len(causes) - 3} more")
    if base.idle_fraction >= 0.5 and idle - explained > 0.5 * idle:
        parts.append(f"{'the rest is' if causes else 'it is'} the host's own work: {milliseconds(base.host_s)} a step here "
                     f"(Python, torch's and the simulated device's overhead, {_count(kernels)} kernels launched) "
                     f"against {milliseconds(base.device_s)} of device work, which no line of the script explains")
    elif not causes:
        parts.append("no cause found")
    return head + ": " + "; ".join(parts)


def short(c: SpeedCause) -> str:
    """A cause in a few words, for the summary."""
    at = f"{c['file']}:{c['line']}" if c["file"] else "an unknown line"
    if c["kind"] == "sync":
        return f"{_code(c['source'])} at {at} synchronises every step ({_count(c['per_step'])} a step)"
    if c["kind"] == "loader":
        return c["what"]
    if c["kind"] == "launches":
        return f"{_count(c['per_step'])} small kernels a step, launched one by one"
    if c["kind"] == "cudnn":
        return "convolutions of fixed shapes without cudnn.benchmark"
    if c["kind"] == "made":
        return f"{at} creates a tensor on the CPU every step and copies it ({byte_size(c['bytes_per_step'])})"
    return f"{at} copies {byte_size(c['bytes_per_step'])} to the device every step"


def _percent(fraction: float) -> str:
    shown = f"{fraction:.0%}"
    return "99%" if shown == "100%" and fraction < 1 else shown


def _code(source: str) -> str:
    return f"`{source}`" if source else "the line"


def _count(n: float) -> str:
    return f"{n:g}" if n == int(n) else f"{n:.1f}"


def milliseconds(seconds: float) -> str:
    """A time as the reports give it: '0.42 ms', '12 ms'."""
    ms = seconds * 1000
    return f"{ms:.2g} ms" if ms < 10 else f"{ms:.0f} ms"


def byte_size(n: float) -> str:
    """A size as the reports give it: '787 kB'."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:g} B"
