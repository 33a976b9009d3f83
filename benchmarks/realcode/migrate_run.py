"""`rewrite` alone vs `migrate` on the runnable part of the corpus (run.py's entries whose original trains here).

Per entry of ``--results`` (default results-final.json) whose class is pass, missed-move or losses-differ (the 36
whose original ran and whose migration was judged):

1. run.py's ``process``: materialise under /tmp/cpu2gpu-realcode/<label>/<entry>/orig, run the original on the
   CPU (cached), ``rewrite --in-place`` a copy, ``verify --device sim --against ORIG`` it: the rewrite-alone class;
2. ``cpu2gpu migrate ORIG --synthetic-data --max-steps N --timeout T --output-format json -q`` in the original's
   folder, with the originals' environment (run.env: the extra packages of /tmp/cpu2gpu-realcode/site, Agg).
   Without --in-place migrate writes nothing (its rounds edit a draft copy). A notebook is migrated as the
   ``.ipynb`` itself (what a user runs) and, as a second record (``migrate_py``), as run.py's converted ``.py``.

``--notebooks``: instead of the TAKEN classes of --results, every notebook entry of the manifest (27), whatever its
class, migrated as the ``.ipynb`` only (no ``migrate_py`` record); each record also says whether the original ran here
(``orig_class`` / ``orig_runs``: run.py's class of the original's CPU run, ``orig_detail``: why not), and the report
adds a per-notebook table and "proven N of M whose original runs".

Records per entry: rewrite-alone class, migrate's exit code, proven, ending, cannot_run, repair rounds, wall
seconds, whether the final CPU fallback run ("migrated (cpu)") broke, the edits taken back, the static misses
({rule, how, name, file, line}). Writes results-<label>.json and prints the tables (``--report``: only print).

``--speed``: ``migrate --speed`` (once proven, the speed edits). A proven record also keeps the estimated idle
fraction and step before / after the edits (``speed_before_idle``, ``speed_after_idle``, ``speed_before_step_s``,
``speed_after_step_s``), the edits kept (``speed_edits``: cause, kind, file, line, edit, seconds: the idle time a
step the cause explained, what), the causes not edited (``speed_not_edited``: cause, kind, line, edit, seconds, why)
and ``losses_same``; a record whose migrate tried no speed edit (a notebook, not proven; engines from fc716a3 on)
keeps its ``speed_note`` with null estimates. The report adds the speed stories and their notes, the entries
estimated idle over half the step before / after, the edits kept by kind, those taken back and the causes given no
edit by reason, and the regressions: a broken CPU fallback, a proven verdict other than results-rooms37.json's,
results-speed38.json's or results-speed38final.json's.

One engine for everything: ``--tool`` (default: the working tree's .venv/bin/cpu2gpu). To keep others' edits of
cpu2gpu/ and runtime/ out of a measurement, pass a pinned executable (README: the 2026-12-06 run used a wrapper
that puts ``git archive HEAD cpu2gpu runtime`` first on sys.path and PYTHONPATH, children included).

    .venv/bin/python benchmarks/realcode/migrate_run.py --label migrate --tool /tmp/cpu2gpu-realcode/bin-SHA/cpu2gpu
    .venv/bin/python benchmarks/realcode/migrate_run.py --label migrate --resume --stop-at 14:30
    .venv/bin/python benchmarks/realcode/migrate_run.py --label migrate --report
    .venv/bin/python benchmarks/realcode/migrate_run.py --label notebooks-blind --notebooks --tool BIN --max-steps 3 --timeout 60
    .venv/bin/python benchmarks/realcode/migrate_run.py --label speed38 --speed --tool BIN --stop-at 15:35
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run as R  # noqa: E402  (process, run, env, parse_json, CACHE, ROOT)

TAKEN = ("pass", "missed-move", "losses-differ")
OK = ("ok", "max_steps")
GROUPS = [("script/cpu", lambda r: r["format"] == "script" and r["kind"] == "cpu"),
          ("script/aware", lambda r: r["format"] == "script" and r["kind"] == "aware"),
          ("script/stripped", lambda r: r["format"] == "script" and r["kind"] == "stripped"),
          ("notebook/cpu", lambda r: r["format"] == "notebook" and r["kind"] == "cpu"),
          ("notebook/aware", lambda r: r["format"] == "notebook" and r["kind"] == "aware"),
          ("notebook/stripped", lambda r: r["format"] == "notebook" and r["kind"] == "stripped"),
          ("**all**", lambda r: True)]


def summarise_migrate(res: dict, wall: float) -> dict:
    rep = R.parse_json(res["stdout"])
    out = {"rc": res["rc"], "wall_seconds": round(wall, 1)}
    if not isinstance(rep, dict) or "proven" not in rep:
        out.update({"proven": False, "ending": "no report: " + ("timeout" if res["rc"] is None else
                                                                 R.first_line(res["stderr"][-2000:])),
                    "error": (res["stderr"] or "")[-1500:]})
        return out
    v = rep.get("verify") or {}
    runs = v.get("runs") or []
    cpu = next((x for x in runs if x.get("label") == "migrated (cpu)"), None)
    cpu_reasons = [x.get("cause", "")[:300] for x in v.get("reasons", []) if cpu and x.get("run") == cpu.get("label")]
    out.update({
        "proven": bool(rep.get("proven")), "ending": rep.get("ending", ""), "cannot_run": rep.get("cannot_run"),
        "seconds": round(rep.get("seconds") or 0, 1), "repair_rounds": len(rep.get("rounds", [])) - 1,
        "rounds": [{k: (x.get(k)[:300] if isinstance(x.get(k), str) else x.get(k))
                    for k in ("round", "what", "files", "errors", "rule", "name", "kind", "how", "bound_at", "met",
                              "edit", "evidence", "taken_back") if k in x} for x in rep.get("rounds", [])],
        "taken_back": [{k: x.get(k) for k in ("rule", "name", "how", "bound_at", "edit", "taken_back")}
                       for x in rep.get("taken_back", [])],
        "static_misses": rep.get("static_misses", []),
        "verdict": v.get("verdict"),
        "reasons": [{"run": x.get("run"), "rule": x.get("rule"), "cause": (x.get("cause") or "")[:300]}
                    for x in v.get("reasons", [])],
        "runs": [{k: x.get(k) for k in ("label", "status", "steps", "device_forward_calls", "cpu_forward_calls",
                                        "first_loss", "last_loss", "wall")} for x in runs],
        "cpu_fallback_status": cpu.get("status") if cpu else None,
        "cpu_fallback_broke": bool(cpu) and cpu.get("status") not in OK,
        "cpu_fallback_reasons": cpu_reasons,
        "changed_files": rep.get("changed_files", []),
        "unreached": rep.get("unreached", []),
        # what the proof covered (verify's coverage), how far rounding alone carries the losses (band),
        # and the random draws the simulated device mirrored from the CPU generator
        "coverage": [{k: c.get(k) for k in ("run", "ran", "reached", "missing_count", "set_aside")}
                     for c in v.get("coverage") or []],
        "band_max": (v.get("band") or {}).get("max"),
        "mirrored_draws": max([x.get("mirrored_draws") or 0 for x in runs], default=0),
        "diff": (rep.get("diff") or "")[:6000],
    })
    if "speed" in rep:  # --speed, once proven: the estimates before and after the speed edits, the edits
        out.update(summarise_speed(rep.get("speed") or {}))
    return out


def summarise_speed(sp: dict) -> dict:
    """migrate --speed's story: the estimated idle fraction and step before (as migrated) and after the speed
    edits, the edits kept, the causes not edited (an edit taken back, or none made) and why."""
    before, after = sp.get("before") or {}, sp.get("after") or {}
    return {
        "speed_gpu": sp.get("gpu"),
        "speed_before_idle": before.get("idle_fraction"), "speed_after_idle": after.get("idle_fraction"),
        "speed_before_step_s": before.get("step_s"), "speed_after_step_s": after.get("step_s"),
        # seconds: the idle time a step the cause explained (the estimate's, from the run before the edit)
        "speed_edits": [{k: x.get(k) for k in ("cause", "kind", "file", "line", "edit", "seconds", "what")}
                        for x in sp.get("edits") or []],
        "speed_not_edited": [{"cause": x.get("cause"), "kind": x.get("kind"), "line": x.get("line"),
                              "edit": x.get("edit"), "seconds": x.get("seconds"), "why": (x.get("why") or "")[:200]}
                             for x in sp.get("not_edited") or []],
        "losses_same": sp.get("losses_same"),
        "speed_note": sp.get("note") or "",  # why no speed edit was tried (a notebook, not proven), else ""
        "speed_summary_before": (sp.get("summary_before") or "")[:300],
        "speed_summary_after": (sp.get("summary_after") or "")[:300],
    }


def run_migrate(tool: list[str], folder: Path, script: str, a, path: list[str] | None = None) -> dict:
    cmd = tool + ["migrate", script, "--synthetic-data", "--max-steps", str(a.max_steps), "--timeout",
                  str(a.timeout), "--output-format", "json", "-q"] + (["--speed"] if a.speed else [])
    if a.max_rounds is not None:
        cmd += ["--max-rounds", str(a.max_rounds)]
    t0 = time.time()
    res = R.run(cmd, folder, a.migrate_timeout, use_env=True, path=path)
    return summarise_migrate(res, time.time() - t0)


def process(e: dict, tool: list[str], a) -> dict:
    rec = R.process(e, tool, a)  # materialise, original (cached), rewrite, verify --device sim --against
    slug = re.sub(r"[^\w.-]+", "_", e["id"])
    orig = R.CACHE / a.label / slug / "orig"
    name = os.path.basename(e["path"])
    o = rec.get("orig") or {}
    rec["orig_class"] = o.get("class")
    rec["orig_runs"] = o.get("class") == "ok"
    rec["orig_detail"] = "" if rec["orig_runs"] else (o.get("detail") or "")[:400]
    path = R.entry_path(e, orig.parent)  # the entry's pythonpath folders (extras.json)
    rec["migrate"] = run_migrate(tool, orig, name, a, path)
    if e["format"] == "notebook" and not a.notebooks:  # also the converted script run.py's verify ran
        rec["migrate_py"] = run_migrate(tool, orig, Path(name).stem + ".py", a, path)
    return rec


# ------------------------------------------------------------------ report
def median(xs):
    return f"{statistics.median(xs):.0f}" if xs else "-"


def table(recs: list[dict]) -> str:
    head = ("| kind | entries | original runs here | rewrite alone: pass | migrate: proven | migrate: cannot be judged | "
            "median wall s: rewrite+verify | median wall s: migrate | broken CPU fallback: rewrite / migrate | "
            "taken back (entries / edits) | static misses (entries / edits) |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, f in GROUPS:
        rs = [r for r in recs if f(r)]
        if not rs:
            continue
        m = [r["migrate"] for r in rs]
        rw_wall = [(r.get("rewrite_seconds") or 0) + (r.get("verify_seconds") or 0) for r in rs if r.get("verify_seconds")]
        rows.append("| " + " | ".join(map(str, [
            name, len(rs), sum((r.get("orig") or {}).get("class") == "ok" for r in rs),
            sum(r["class"] == "pass" for r in rs), sum(bool(x.get("proven")) for x in m),
            sum(bool(x.get("cannot_run")) for x in m), median(rw_wall),
            median([x["wall_seconds"] for x in m if "wall_seconds" in x]),
            f"{sum(r['class'] == 'broken-cpu-run' for r in rs)} / "
            f"{sum(bool(x.get('cpu_fallback_broke')) and not x.get('cannot_run') for x in m)}"
            + (f" (+{same} as the original)" if (same := sum(bool(x.get('cpu_fallback_broke')) and bool(x.get('cannot_run'))
                                                         for x in m)) else ""),
            f"{sum(bool(x.get('taken_back')) for x in m)} / {sum(len(x.get('taken_back') or []) for x in m)}",
            f"{sum(bool(x.get('static_misses')) for x in m)} / {sum(len(x.get('static_misses') or []) for x in m)}",
        ])) + " |")
    return "\n".join(rows)


def misses_table(recs: list[dict]) -> str:
    fam = collections.defaultdict(list)
    for r in recs:
        for key in ("migrate", "migrate_py"):
            for s in (r.get(key) or {}).get("static_misses") or []:
                fam[(s.get("rule"), s.get("how"))].append(f"{r['id']}{' (.py)' if key == 'migrate_py' else ''}: "
                                                          f"`{s.get('name')}` {s.get('file')}:{s.get('line')}")
    if not fam:
        return "static misses: none"
    rows = ["| rule | how | edits | where |", "|---|---|---|---|"]
    for (rule, how), xs in sorted(fam.items(), key=lambda kv: -len(kv[1])):
        rows.append(f"| {rule} | {how} | {len(xs)} | {'; '.join(xs)} |")
    return "\n".join(rows)


def unproven(recs: list[dict]) -> str:
    out = []
    for r in recs:
        for key in ("migrate", "migrate_py"):
            m = r.get(key)
            if m is None or m.get("proven"):
                continue
            tb = f"; taken back {len(m['taken_back'])}" if m.get("taken_back") else ""
            out.append(f"  {r['id']}{' (.py)' if key == 'migrate_py' else ''} [{r['kind']}] rewrite alone: "
                       f"{r['class']}; migrate rc {m.get('rc')}, {m.get('repair_rounds', '?')} repair rounds{tb}: "
                       f"{(m.get('ending') or '')[:300]}")
    return "not proven by migrate:\n" + ("\n".join(out) if out else "  none")


def disagreements(recs: list[dict]) -> str:
    out = []
    for r in recs:
        m = r["migrate"]
        if (r["class"] == "pass") != bool(m.get("proven")):
            out.append(f"  {r['id']}: rewrite alone {r['class']}, migrate {'proven' if m.get('proven') else 'not proven'}")
    return "rewrite alone vs migrate disagree:\n" + ("\n".join(out) if out else "  none")


def cell(text: str, n: int = 160) -> str:
    text = " ".join((text or "").split()).replace("|", "\\|")
    return text if len(text) <= n else text[:n - 3] + "..."


def notebook_table(recs: list[dict]) -> str:
    """Per notebook: did the original run here (and why not), proven, rounds, seconds, the ending."""
    rows = ["| notebook | kind | original runs here | rewrite alone | migrate proven | rc | repair rounds | "
            "seconds | ending (why not proven) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        m = r.get("migrate") or {}
        runs = r.get("orig_runs", (r.get("orig") or {}).get("class") == "ok")
        why = "" if runs else f" ({r.get('orig_class') or (r.get('orig') or {}).get('class')}: " \
                              f"{cell(r.get('orig_detail') or (r.get('orig') or {}).get('detail'), 100)})"
        rows.append("| " + " | ".join(map(str, [
            f"{r['repository'].split('/')[1]} `{r['path']}`", r["kind"], ("yes" if runs else "no") + why, r["class"],
            "**yes**" if m.get("proven") else "no", m.get("rc"), m.get("repair_rounds", "-"),
            m.get("seconds") or m.get("wall_seconds", "-"), "" if m.get("proven") else cell(m.get("ending"), 200)]))
            + " |")
    runs = [r for r in recs if r.get("orig_runs", (r.get("orig") or {}).get("class") == "ok")]
    proven = [r for r in recs if (r.get("migrate") or {}).get("proven")]
    proven_runs = [r for r in runs if (r.get("migrate") or {}).get("proven")]
    rows.append(f"\nproven {len(proven_runs)} of {len(runs)} whose original runs here "
                f"({len(proven)} of {len(recs)} notebooks in all)")
    return "\n".join(rows)


def report(recs: list[dict], notebooks: bool = False, speed: bool = False) -> str:
    nb = [r for r in recs if "migrate_py" in r]
    extra = ""
    if nb:
        extra = ("\nnotebooks migrated as the converted .py (run.py's conversion): proven "
                 f"{sum(bool(r['migrate_py'].get('proven')) for r in nb)} of {len(nb)}, median wall "
                 f"{median([r['migrate_py']['wall_seconds'] for r in nb])} s")
    parts = [table(recs) + extra + proof_lines(recs), misses_table(recs), unproven(recs), disagreements(recs)]
    if notebooks:
        parts.insert(0, notebook_table(recs))
    if speed:
        parts.append(speed_report(recs))
    return "\n\n".join(parts)


def reason(why: str, words: int = 5) -> str:
    """The first words of a why, up to its first colon or parenthesis: the reason without its particulars (a
    number is N: "it explains 0.55% of the estimated step" and "... 0.98% ..." are one reason)."""
    head = re.sub(r"\d+(?:\.\d+)?", "N", re.split(r"[:(]", why or "", maxsplit=1)[0])
    return " ".join(head.split()[:words]) or "(none given)"


def speed_report(recs: list[dict], against: Path | list[Path] = (HERE / "results-rooms37.json",
                                                                 HERE / "results-speed38.json",
                                                                 HERE / "results-speed38final.json")) -> str:
    """migrate --speed's records: entries idle over half the step before / after the speed edits, the edits kept
    by kind, those taken back (and the causes given no edit) by reason, and the regressions: a CPU fallback that
    broke, a proven verdict other than one of ``against``'s for the same entry."""
    ms = [(r["id"] + (" (.py)" if key == "migrate_py" else ""), r[key]) for r in recs
          for key in ("migrate", "migrate_py") if r.get(key)]
    proven = [(n, m) for n, m in ms if m.get("proven")]
    est = [(n, m) for n, m in proven if m.get("speed_before_idle") is not None]
    est_after = [(n, m) for n, m in est if m.get("speed_after_idle") is not None]
    rows = ["| migrations | proven | proven with an estimate | idle > 50% after migrate (speed.before) | "
            "idle > 50% after --speed (speed.after) | with an edit kept |", "|---|---|---|---|---|---|",
            f"| {len(ms)} | {len(proven)} | {len(est)} | {sum(m['speed_before_idle'] > 0.5 for _, m in est)} | "
            f"{sum(m['speed_after_idle'] > 0.5 for _, m in est_after)} of {len(est_after)} | "
            f"{sum(bool(m.get('speed_edits')) for _, m in proven)} |"]
    out = ["\n".join(rows)]
    notes = collections.Counter(m["speed_note"] for _, m in ms if m.get("speed_note"))
    story = sum("speed_gpu" in m for _, m in ms)
    out.append(f"speed stories: {story} of {len(ms)} migrations; with a note (no speed edit tried): "
               + ("; ".join(f"{k} ({v})" for k, v in notes.items()) if notes else "none")
               + "; proven without a speed story: "
               + (", ".join(n for n, m in proven if "speed_gpu" not in m) or "none"))
    kept = collections.defaultdict(list)
    back = collections.defaultdict(list)
    none = collections.defaultdict(list)
    for n, m in proven:
        for x in m.get("speed_edits") or []:
            sec = x.get("seconds")
            kept[x.get("kind")].append(f"{n}:{x.get('line')} `{cell(x.get('edit'), 90)}`"
                                       + (f" ({sec * 1e3:.3g} ms a step explained)" if sec else
                                          " (a cause given no time: not in the estimate)" if sec == 0 else ""))
        for x in m.get("speed_not_edited") or []:
            (back if x.get("edit") else none)[(x.get("kind") or x.get("cause"), reason(x.get("why")))].append(
                f"{n}:{x.get('line')}")
    lines = ["| edit kind | kept | where (entry:line `edit`) |", "|---|---|---|"]
    lines += [f"| {k} | {len(v)} | {'; '.join(v)} |" for k, v in sorted(kept.items(), key=lambda kv: -len(kv[1]))]
    out.append("speed edits kept:\n" + ("\n".join(lines) if kept else "  none"))
    for title, fam in (("speed edits taken back", back), ("causes given no edit", none)):
        lines = ["| kind | reason (first words of why) | count | where |", "|---|---|---|---|"]
        lines += [f"| {k} | {w} | {len(v)} | {'; '.join(v)} |" for (k, w), v in
                  sorted(fam.items(), key=lambda kv: -len(kv[1]))]
        out.append(f"{title}:\n" + ("\n".join(lines) if fam else "  none"))
    regress = [f"  {n}: CPU fallback broke ({m.get('cpu_fallback_status')}): "
               f"{cell('; '.join(m.get('cpu_fallback_reasons') or []), 200)}"
               for n, m in ms if m.get("cpu_fallback_broke") and not m.get("cannot_run")]
    names = []
    for path in ([against] if isinstance(against, Path) else against):
        if not path.exists():
            continue
        names.append(path.name)
        old = {}
        for r in json.loads(path.read_text())["entries"]:
            for key in ("migrate", "migrate_py"):
                if r.get(key):
                    old[r["id"] + (" (.py)" if key == "migrate_py" else "")] = bool(r[key].get("proven"))
        regress += [f"  {n}: {'proven' if m.get('proven') else 'not proven'} here, "
                    f"{'proven' if old[n] else 'not proven'} in {path.name}: {cell(m.get('ending'), 200)}"
                    for n, m in ms if n in old and old[n] != bool(m.get("proven"))]
    out.append(f"regressions (a broken CPU fallback, a proven verdict other than {' or '.join(names)}'s):\n"
               + ("\n".join(regress) if regress else "  none"))
    return "\n\n".join(out)


def proof_lines(recs: list[dict]) -> str:
    """What the proofs covered: lines the original ran that ran on the device, mirrored draws, bands."""
    proven = [r["migrate"] for r in recs if r.get("migrate", {}).get("proven")]
    device = [c for m in proven for c in m.get("coverage", []) if c.get("run") != "migrated (cpu)"]
    if not device:
        return ""
    ran, reached = sum(c["ran"] or 0 for c in device), sum(c["reached"] or 0 for c in device)
    bands = [m["band_max"] for m in proven if m.get("band_max") is not None]
    return (f"\nproven: {reached} of {ran} lines the originals ran were run on the device "
            f"({len(device)} entries); mirrored draws in {sum(bool(m.get('mirrored_draws')) for m in proven)}; "
            f"a measured band in {len(bands)}" + (f" (largest {max(bands):.2g})" if bands else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="migrate", help="results go to results-<label>.json")
    ap.add_argument("--results", type=Path, default=HERE / "results-final.json", help="which entries (classes TAKEN)")
    ap.add_argument("--notebooks", action="store_true",
                    help="every notebook entry of the manifest, whatever its class (--results is not read); "
                         "each migrated as the .ipynb only")
    ap.add_argument("--tool", default=str(R.ROOT / ".venv" / "bin" / "cpu2gpu"),
                    help="the cpu2gpu executable for rewrite, verify and migrate")
    ap.add_argument("--only", help="comma-separated substrings of entry ids")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60, help="verify/migrate --timeout (seconds per run)")
    ap.add_argument("--max-rounds", type=int, default=None, help="migrate --max-rounds (default: migrate's)")
    ap.add_argument("--migrate-timeout", type=float, default=900, help="wall limit of one migrate command")
    ap.add_argument("--speed", action="store_true",
                    help="migrate --speed: once proven, the speed edits; each record keeps the estimates and edits")
    ap.add_argument("--no-cache", action="store_true", help="rerun the originals")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--stop-at", help="HH:MM (local): start no entry after this time")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args(argv)
    a.verify_jobs = 1
    out_path = HERE / f"results-{a.label}.json"
    if a.report:
        data = json.loads(out_path.read_text())
        print(report(data["entries"], notebooks=data.get("selection") == "notebooks" or a.notebooks,
                     speed=bool(data.get("speed")) or a.speed))
        return 0
    R.CPU2GPU = Path(a.tool)  # run.py's verify of the original and of the rewrite: the same executable
    tool = [a.tool]
    manifest = R.load_manifest()  # manifest.json + extras.json (repo files, pythonpath, stripped notebooks)
    if a.notebooks:
        entries = [e for e in manifest if e["format"] == "notebook"]
    else:
        wanted = {e["id"] for e in json.loads(a.results.read_text())["entries"] if e["class"] in TAKEN}
        entries = [e for e in manifest if e["id"] in wanted]
    if a.only:
        entries = [e for e in entries if any(s in e["id"] for s in a.only.split(","))]
    queues: dict = {}
    for e in entries:  # round robin over the repositories, as run.py: a stopped run still covers each
        queues.setdefault(e["repository"], []).append(e)
    entries = [q[i] for i in range(max(map(len, queues.values()), default=0)) for q in queues.values() if i < len(q)]
    if a.limit:
        entries = entries[:a.limit]
    recs: list[dict] = []
    if a.resume and out_path.exists():
        recs = [r for r in json.loads(out_path.read_text())["entries"] if r["id"] in {e["id"] for e in entries}]
    done = {r["id"] for r in recs}
    version = subprocess.run(tool + ["--version"], capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(R.ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()

    def save(stopped: str = ""):
        order = {e["id"]: i for i, e in enumerate(entries)}
        recs.sort(key=lambda r: order[r["id"]])
        out_path.write_text(json.dumps({
            "label": a.label, "selection": "notebooks" if a.notebooks else f"{a.results.name}: {', '.join(TAKEN)}",
            "tool": a.tool, "tool_version": version, "working_tree_head": head,
            "max_steps": a.max_steps, "timeout": a.timeout, "max_rounds": a.max_rounds, "speed": a.speed,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "planned": len(entries), "measured": len(recs),
            "stopped": stopped, "entries": recs}, indent=1) + "\n")

    t0 = time.time()
    todo = [e for e in entries if e["id"] not in done]
    stopped = ""
    for n, e in enumerate(todo, 1):
        if a.stop_at and time.strftime("%H:%M") >= a.stop_at:
            stopped = f"stopped at {time.strftime('%H:%M')} (--stop-at {a.stop_at}): {len(todo) - n + 1} not run"
            print(stopped, flush=True)
            break
        try:
            r = process(e, tool, a)
        except Exception as x:  # noqa: BLE001 - the runner's own failure on one entry
            r = {k: e[k] for k in ("id", "repository", "path", "commit", "format", "kind")}
            r.update({"class": "verify-error", "detail": f"runner: {x!r}", "orig": {"class": "?"},
                      "migrate": {"proven": False, "ending": f"runner: {x!r}"}})
        recs.append(r)
        m = r["migrate"]
        print(f"[{n}/{len(todo)} {time.time() - t0:6.0f}s] rewrite {r['class']:14} migrate "
              f"{'proven' if m.get('proven') else 'NOT':6} rc={m.get('rc')} rounds={m.get('repair_rounds')} "
              f"{m.get('wall_seconds')}s {r['id']}  {'' if m.get('proven') else (m.get('ending') or '')[:120]}",
              flush=True)
        save()
    save(stopped)
    print()
    print(report(recs, notebooks=a.notebooks, speed=a.speed))
    print(f"\nwrote {out_path.relative_to(R.ROOT)}; work files under {R.CACHE / a.label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
