"""The distributed part of a verify report (--nproc): text lines, and the "learns the same" wording."""

from __future__ import annotations

from typing import cast

from ..records import Comparison, ParamMismatch, VerifyReport


def _g(x, spec=".6g"):
    return "-" if x is None else format(x, spec)


def how_alike(c: Comparison) -> str:
    """The pass line's account of a distributed comparison."""
    text = f"the same loss trend (mean over the ranks) over {c['compared']} steps"
    if c.get("head_rel_diff") is not None:
        text += (f" (last fifth within {c['tail_rel_diff']:.2g} of the loss scale, tolerance {c['rtol']:g}; "
                 f"step by step max rel diff {_g(c.get('max_rel_diff'), '.2g')})")
    return text


def lines(report: VerifyReport) -> list:
    comps = {c["run"]: c for c in report["comparisons"]}
    out = []
    for run in report["runs"]:
        d = run.get("distributed")
        if not d:
            continue
        wall = f", wall {d['wall_seconds']:.2f} s" if d.get("wall_seconds") is not None else ""
        out += ["", f"  distributed, {run['label']}: {d['nproc']} ranks under torchrun "
                    f"({d.get('backend') or 'no process group'}){wall}"]
        steps = d["steps_per_rank"]
        trained = ("every rank trained" if d["ranks_trained"] == d["nproc"]
                   else f"{d['ranks_trained']} of {d['nproc']} ranks trained")
        out.append(f"    steps per rank: {', '.join(map(str, steps))} ({trained})")
        n = d.get("param_steps_compared") or 0
        if d.get("params_equal") is None:
            out.append("    parameters: no step to compare")
        elif d["params_equal"]:
            out.append(f"    parameters: equal on every rank after each of {n} steps "
                       f"(max rel diff {d['param_max_rel_diff']:.2g}; float64 sum and sum of squares)")
        else:
            m = cast(ParamMismatch, d["param_first_mismatch"])  # set where the parameters are not equal
            out.append(f"    parameters: differ after step {m['step']} between ranks "
                       f"{', '.join(map(str, m['ranks']))} (rel diff {m['rel_diff']:.2g}; {n} steps compared)")
        c = comps.get(run["label"])
        if c and c.get("method") == "distributed" and c["compared"]:
            if c.get("head_rel_diff") is not None:
                out.append(f"    loss vs {c['reference']} (mean over the ranks): first fifth {_g(c['first'])} against "
                           f"{_g(c['reference_first'])}, last fifth {_g(c['last'])} against {_g(c['reference_last'])} "
                           f"(differences {c['head_rel_diff']:.2g} and {c['tail_rel_diff']:.2g} of the loss scale "
                           f"{_g(c['scale'], '.3g')}; the last fifth's tolerance {c['rtol']:g}); "
                           f"step by step max rel diff {_g(c['max_rel_diff'], '.2g')} over {c['compared']} steps")
            if c.get("note"):
                out.append(f"    note: {c['note']}")
        for p in d["ranks"]:
            exc = p.get("exception")
            if p["status"] == "stopped":
                at = f" at {exc['file']}:{exc['line']}" if exc and exc.get("file") else ""
                out.append(f"    rank {p['rank']}: stopped{at} after rank {d['failed_rank']} failed")
            elif exc and exc.get("type"):
                at = f" at {exc['file']}:{exc['line']}" if exc.get("file") else ""
                msg = (exc.get("message") or "").splitlines()[0][:300] if exc.get("message") else ""
                out.append(f"    rank {p['rank']}: {p['status']}{at}: {exc['type']}: {msg}")
        for note in d.get("notes", []):
            out.append(f"    note: {note}")
    return out
