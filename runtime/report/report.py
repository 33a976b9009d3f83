"""Render a verification: a table per run, the device audit, the verdict; or JSON."""

from __future__ import annotations

import json
import statistics
from typing import Any

from . import distributed_report
from ..records import Comparison, VerifiedRun, VerifyReport
from ..sandbox import isolation
from .capreport import cap_lines
from .speedview import lines as speed_lines


def _ms_per_step(run: VerifiedRun):
    times = run.get("step_times") or []
    return statistics.median(times) * 1000 if times else None


def _fmt(x, spec=".6g"):
    return "-" if x is None else format(x, spec)


def run_rows(report: VerifyReport):
    """Each run's summary with its cell of the loss comparison: "(reference)", the trend's verdict, or
    the largest relative difference (the text report and the HTML report show the same table)."""
    comps = {c["run"]: c for c in report["comparisons"]}
    for run in report["runs"]:
        c = comps.get(run["label"])
        if c is None:
            diff = "(reference)" if any(x["reference"] == run["label"] for x in report["comparisons"]) else "-"
        elif c["method"] == "trend":
            diff = f"trend {'ok' if c['ok'] else 'differs'}"
        elif c["method"] == "distributed":  # the verdict is the trend's; the step figure is shown beside it
            diff = f"{_fmt(c['max_rel_diff'], '.2g')}, trend {'ok' if c['ok'] else 'differs'}"
        else:
            diff = _fmt(c["max_rel_diff"], ".2g")
        yield summary(run, c), diff


def summary(run: VerifiedRun, comparison: Comparison | None) -> dict:
    losses = run.get("losses") or []
    return {
        "label": run["label"], "role": run["role"], "script": run["script"], "mode": run["mode"],
        "device": run.get("device_name"), "status": run["status"], "steps": run.get("steps", 0),
        "losses_recorded": len(losses), "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "max_rel_diff": comparison.get("max_rel_diff") if comparison else None,
        "ms_per_step": _ms_per_step(run),
    }


def to_json(report: VerifyReport) -> str:
    comps = {c["run"]: c for c in report["comparisons"]}
    out: dict[str, Any] = {
        "verdict": report["verdict"],
        "reasons": report["reasons"],
        "settings": report["settings"],
        "comparisons": report["comparisons"],
        "coverage": report.get("coverage", []),
        "runs": [],
    }
    if report.get("band"):
        out["band"] = report["band"]
    if report["settings"].get("synthetic_data") or report.get("needs_data"):  # a failed download needs no flag
        out["needs_data"] = report.get("needs_data", [])
    for run in report["runs"]:
        entry = summary(run, comps.get(run["label"]))
        for key in ("losses", "step_times", "backward_calls", "device_forward_calls", "cpu_forward_calls",
                    "trained_devices", "modules", "events", "exception", "diagnosis", "device_rng", "exit_code",
                    "wall_seconds", "stdout_tail", "stderr_tail", "workdir", "needs_data", "synthetic", "cap",
                    "distributed", "missing_package", "mirrored_draws", "step_kinds", "isolation",
                    "refused_writes", "refused_elsewhere"):
            if key in run:
                entry[key] = run[key]
        out["runs"].append(entry)
    out["isolation"] = isolation_of(report)
    if report.get("speed"):
        out["speed"] = report["speed"]
    return json.dumps(out, indent=2)


def isolation_of(report: VerifyReport) -> dict | None:
    """How the runs were confined (isolation.py): the weakest run's record, since that one says what held."""
    records = [run["isolation"] for run in report.get("runs", []) if run.get("isolation")]
    if not records:
        return None
    return min(records, key=lambda r: (r.get("kind") == isolation.LANDLOCK, bool(r.get("watch"))))


def _table(rows: list, headers: list) -> list:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _audit_lines(run: VerifiedRun) -> list:
    lines = []
    for m in run.get("modules", []):
        params = "parameters on " + ", ".join(m["param_devices"]) if m["param_devices"] else "no parameters"
        inputs = "inputs on " + ", ".join(m["input_devices"]) if m["input_devices"] else "no tensor inputs"
        where = f"{m['device_calls']} on the device, {m['cpu_calls']} on the CPU"
        lines.append(f"    {m['name']} ({m['class']}): {params}; {inputs}; {m['calls']} call{'s' if m['calls'] != 1 else ''} ({where})")
    for e in run.get("events", []):
        w = e.get("where") or {}
        at = f" at {w['file']}:{w['line']}" if w.get("file") else ""
        what = EVENT_NAMES.get(e["kind"], e["kind"])
        lines.append(f"    ! {what} {e['module']}{at}")
    return lines


EVENT_NAMES = {
    "cpu-input-to-device-module": "a CPU tensor reached device module",
    "device-input-to-cpu-module": "a device tensor reached CPU module",
    "mixed-inputs": "CPU and device tensors together reached",
    "non-leaf-parameter": "a parameter moved at creation (a non-leaf tensor, never trained) in",
}
STATUS_NAMES = {"max_steps": "max-steps", "needs_data": "needs-data"}
_STEP_KINDS = {"optimizer": "optimizer steps", "in place": "updates by hand in place",
               "rebinding": "updates by hand that rebind the weights",
               "hand-computed gradients": "updates by hand-computed gradients (no backward)"}


def device_calls(run: VerifiedRun) -> str:
    """The calls on the device as the sum of the audited (top-level) modules' calls; the run's
    total counts the nested modules' calls too, so it is named as such, not set beside them."""
    total = run["device_forward_calls"]
    mods = [m for m in run.get("modules", []) if m["device_calls"]]
    if not mods:
        return f"{total} module calls on the device"
    shown = [f"{m['name']} {m['device_calls']}" for m in mods[:4]]
    if len(mods) > 4:
        shown.append(f"{sum(m['device_calls'] for m in mods[4:])} of {len(mods) - 4} more modules")
    text = " + ".join(shown) + " calls on the device"
    if total != sum(m["device_calls"] for m in mods):
        text += f" ({total} counting the calls of their nested modules)"
    return text


def pass_lines(report: VerifyReport) -> list:
    runs = report["runs"]
    lines = ["verdict: PASS"]
    dev = next((r for r in runs if r["mode"] in ("cuda", "sim", "sim-mps", "mps", "xpu")), None)
    if dev:
        if dev["device_forward_calls"] or not dev.get("trained_devices"):
            lines.append(f"  trains on the device: {dev['label']}, {device_calls(dev)}")
        else:  # no module: plain tensors are trained (by an optimizer, or by hand: manualsteps)
            where = ", ".join(dev["trained_devices"])
            lines.append(f"  trains on the device: {dev['label']}, the trained tensors are on {where}")
        if set(dev.get("step_kinds") or ()) - {"optimizer"}:  # trained by hand: say how (manualsteps)
            kinds = ", ".join(f"{n} {_STEP_KINDS.get(k, k)}" for k, n in dev["step_kinds"].items())
            lines.append(f"  training steps: {dev['label']}, {kinds}")
    cpu = next((r for r in runs if r["mode"] == "cpu" and r["role"] == "migrated"), None)
    if cpu:
        lines.append(f"  falls back to the CPU: {cpu['label']} runs")
    lines += coverage_lines(report)
    for c in report["comparisons"]:
        if c["compared"] == 0:
            continue
        if c.get("reference_flat"):  # nothing to hold it to: say what was shown, and what was not
            lines.append(f"  learns the same: not shown: {c['reference']} hardly moved over {c['compared']} steps "
                         f"({c['reference_first']:.4g} -> {c['reference_last']:.4g}) and {c['run']} draws other "
                         f"random numbers; it does not diverge ({c['first']:.4g} -> {c['last']:.4g}); "
                         f"more steps (--max-steps) give a trend to compare")
            continue
        grew = (f"; within {c['rtol']:g} x the step number only: rounding differences of another summation "
                f"order add up over the steps" if c.get("tolerance_grew") else "")
        if (c.get("band") or {}).get("used"):
            grew = (f"; within {c['band']['factor']:g} x the band the original's own rounding makes, measured by "
                    f"{report['band']['run']}: up to {c['band']['max']:.2g}")
        how = (f"the same losses over {c['compared']} steps (max rel diff {c['max_rel_diff']:.2g}{grew})"
               if c["method"] == "step" else distributed_report.how_alike(c) if c["method"] == "distributed"
               else f"the same loss trend over {c['compared']} steps")
        lines.append(f"  learns the same: {c['run']} has {how} as {c['reference']}")
    return lines


def coverage_lines(report: VerifyReport) -> list:
    """'every line ran: N of M lines the original ran were run in ...' per migrated run."""
    out = []
    for c in report.get("coverage", ()):
        aside = (f"; {c['set_aside']} in branches on the device (if torch.cuda.is_available() ...) set aside"
                 if c["set_aside"] else "")
        out.append(f"  every line ran: {c['reached']} of {c['ran']} lines that {c['reference']} ran were run in "
                   f"{c['run']}{aside}")
    return out


def _synthetic_lines(report: VerifyReport) -> list:
    """What the stand-ins made, once, and a warning if two runs did not see the same data."""
    if not report["settings"].get("synthetic_data"):
        return []
    runs = [r for r in report["runs"] if r.get("synthetic")]
    if not runs:
        return []
    first = runs[0]["synthetic"]
    if not any(r["synthetic"]["made"] for r in runs):
        return []
    lines = ["", f"  synthetic data (torchvision: {first['torchvision']}, {first['reason']}):"]
    for m in first["made"]:
        lines.append(f"    {m['source']}.{m['dataset']} {m['split']}: {m['samples']} samples")
    seen = {r["label"]: [m["digest"] for m in r["synthetic"]["made"]] for r in runs}
    if len({tuple(d) for d in seen.values()}) > 1:
        lines.append("    ! the runs did not make the same data: " + ", ".join(seen))
    return lines


def _needs_data_lines(report: VerifyReport) -> list:
    needs = report.get("needs_data", [])
    synthetic = report["settings"].get("synthetic_data")
    if all(n.get("download") for n in needs):
        lines = ["verdict: NEEDS DATA — the script downloads data that cannot be fetched here;"]
    else:
        lines = ["verdict: NEEDS DATA — the script reads data that is not here and has no synthetic stand-in;"]
    lines.append("  the migration was not judged (exit code 3)")
    for n in needs:
        where = n.get("where") or {}
        at = f" at {where['file']}:{where['line']}" if where.get("file") else ""
        src = f": {n['source']}" if n.get("source") else ""
        if n.get("download"):  # the URL first, then why and where the fetch failed
            hint = "" if synthetic else " (or run with --synthetic-data)"
            lines.append(f"  needs data: {n['path']}{hint}")
            lines.append(f"    {n['what']}{at}{src}")
            lines.append(f"    in: {', '.join(n['runs'])}")
            continue
        what = f" ({n['what']})" if n.get("what") else ""
        lines.append(f"  needs data: {n['path']}{what}{at}{src}")
        if n.get("exists"):
            lines.append("    it exists, outside the folder each run copies: run verify from a folder that holds it")
        lines.append(f"    in: {', '.join(n['runs'])}")
    return lines


def to_text(report: VerifyReport) -> str:
    s = report["settings"]
    head = f"cpu2gpu verify {s['script']}" + (f" --against {s['against']}" if s["against"] else "")
    if s.get("device"):
        head += f" --device {s['device']}"
    if s.get("nproc"):
        head += f" --nproc {s['nproc']}"
    if s.get("max_steps"):
        head += f" (first {s['max_steps']} steps)"
    out = [head, ""]
    rows = []
    for sm, diff in run_rows(report):
        rows.append([sm["label"], sm["device"] or sm["mode"], STATUS_NAMES.get(sm["status"], sm["status"]), sm["steps"], _fmt(sm["first_loss"]),
                     _fmt(sm["last_loss"]), diff, _fmt(sm["ms_per_step"], ".2f")])
    out += _table(rows, ["run", "device", "status", "steps", "first loss", "last loss", "max rel diff", "ms/step"])

    for run in report["runs"]:
        if run["mode"] == "cpu" and not run.get("events"):
            continue  # nothing to audit where everything is on the CPU
        audit = _audit_lines(run)
        if audit:
            out += ["", f"  device audit, {run['label']}:"] + audit
    for c in report["comparisons"]:
        if c.get("note"):
            out += ["", f"  note ({c['run']}): {c['note']}"]

    out += distributed_report.lines(report)
    out += cap_lines(report)
    out += _synthetic_lines(report)
    out += ["", "  " + isolation.describe(isolation_of(report))]
    if report.get("speed"):
        out += speed_lines(report["speed"])
    out.append("")
    v = report["verdict"]
    if v == "pass":
        out += pass_lines(report)
    elif v == "needs-data":
        out += _needs_data_lines(report)
    else:
        if v == "fail":
            out.append("verdict: FAIL")
        elif v == "unproven":
            out.append("verdict: UNPROVEN — the migrated runs learn what the original learned, but not over all "
                       "of its code:")
        elif any(r.get("missing_package") for r in report["reasons"]):
            out.append("verdict: ERROR — a package the script imports is not installed here, so no verdict about "
                       "the migration can be reached")
        elif any(r.get("sim_limit") for r in report["reasons"]):
            out.append("verdict: ERROR — the simulated device cannot run this script, so no verdict about the "
                       "migration can be reached here")
        else:
            out.append("verdict: ERROR — the original failed on the CPU, so there is nothing to compare with")
        for r in report["reasons"]:
            rule = f" \u2014 {r['rule']} ({r['rule_name']})" if r.get("rule") else ""
            out.append(f"  {r['run']}: {r['cause']}{rule}")
        if v == "unproven":
            out += coverage_lines(report)
        for run in report["runs"]:
            exc = run.get("exception")
            if exc and run["status"] not in ("ok", "max_steps") and exc.get("message"):
                out.append(f"    {run['label']}: {exc['type']}: {exc['message'].splitlines()[0][:300]}")
    return "\n".join(out)
