"""The text of what --max-steps left each run to do: where the training was
capped, the passes over each DataLoader, and whether the code after the
training ran (see stepcap)."""

from __future__ import annotations

from typing import cast

from ..records import CapLoop, CapReport, VerifiedRun, VerifyReport


def _at(w) -> str:
    return f"{w['file']}:{w['line']}" if w and w.get("file") else "?"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("ss") or word.endswith("ch") else "s")


def _ending(run: VerifiedRun, cap: CapReport) -> str:
    ended = cap["ended"]
    lines = _plural(cap["lines_after_cap"], "line")
    if ended == "end":
        return f"the script then ran to its end ({lines} of its code ran after the cap)"
    if ended == "loop":
        return (f"the training loop stepping at {_at(cap['stopped_at'])} is not a pass over a DataLoader, so it "
                f"could not be run dry: the run ended there; the code after the training did not run")
    if ended == "ceiling":
        return (f"the training went on after the cap (more than {cap['ceiling']} backward passes or steps) at "
                f"{_at(cap['stopped_at'])}: the run ended there; the code after the training did not run")
    exc = run.get("exception") or {}
    if ended in ("error", "timeout") and exc.get("type"):
        where = f" at {exc['file']}:{exc['line']}" if exc.get("file") else ""
        return f"the script then raised {exc['type']}{where} ({lines} of its code ran after the cap)"
    if ended == "exit":
        return f"the script then exited with code {run.get('exit_code')}"
    return f"the run then ended: {ended}"


def _loop_line(loop: CapLoop) -> str:
    text = (f"{_at(loop)}  {loop['role']}: {_plural(loop['passes'], 'pass')}, "
            f"{_plural(loop['batches'], 'batch')}, {_plural(loop['steps'], 'step')}")
    after = []
    if loop["passes_after_cap"]:
        after.append(_plural(loop["passes_after_cap"], "pass"))
    if loop["batches_after_cap"]:
        after.append(_plural(loop["batches_after_cap"], "batch"))
    if loop["skipped_steps"]:
        after.append(f"{_plural(loop['skipped_steps'], 'step')} skipped")
    if after:
        text += "; after the cap " + ", ".join(after)
    return text


def _shape(loops: list[CapLoop]) -> list:
    return [{k: v for k, v in loop.items() if k != "file"} for loop in loops]


def cap_lines(report: VerifyReport) -> list:
    runs = [r for r in report["runs"] if r.get("cap")]
    if not runs:
        return []
    n = cast(CapReport, runs[0]["cap"])["max_steps"]
    out = ["", f"  --max-steps {n}: the training is capped at {n} training steps, the rest of the script runs on:"]
    previous = None
    for run in runs:
        cap = cast(CapReport, run["cap"])  # the runs with a cap
        if not cap["reached"]:
            out.append(f"    {run['label']}: ended after {run.get('steps', 0)} steps, before the cap")
            continue
        out.append(f"    {run['label']}: capped at {_at(cap['at'])}; {_ending(run, cap)}")
        loops = [loop for loop in cap["loops"] if loop.get("file")]
        if previous is not None and loops and _shape(loops) == _shape(previous[1]):
            out.append(f"      its DataLoader passes: as in {previous[0]}")
        else:
            out += [f"      {_loop_line(loop)}" for loop in loops]
        previous = (run["label"], loops)
    return out
