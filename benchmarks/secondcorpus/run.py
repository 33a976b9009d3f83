"""`cpu2gpu migrate` on a second corpus (yunjey/pytorch-tutorial, pytorch/examples), two pinned engines side by side.

Steps, per entry of manifest.json (``select`` writes it; the rule is in README.md):

1. materialise: the script's own folder at the manifest's commit (``git archive COMMIT:FOLDER`` from the fetched
   mirror /work/.mirror/<owner>+<name>/repo; the mirror is only read) into /tmp/cpu2gpu-second/<label>/<entry>/orig;
2. the original: ``FINAL verify SCRIPT --device cpu --synthetic-data --max-steps 3 --timeout 120`` (no script
   arguments: the defaults); an original that does not run here is recorded with why, and nothing else is run;
3. ``ENGINE migrate SCRIPT --synthetic-data --max-steps 3 --timeout 120 --output-format json -q`` for each engine
   (blind, final), in the original's folder (without --in-place it writes nothing; the draft is the JSON's diff);
4. each engine's draft: a fresh copy of the original's folder with the diff applied (draft-<engine>);
   ``FINAL verify DRAFT --device cpu --synthetic-data --max-steps 3`` (does the rewrite still run on the CPU?) and,
   for a proven draft, the independent check ``FINAL verify DRAFT --device sim --against ORIG --synthetic-data
   --max-steps 200 --timeout 180`` (ORIG: another fresh copy); a proven draft whose check fails is a false "proven".

The runs use ../realcode's environment (its extra packages, Agg) and its diff applier. Writes results-<label>.json
(or ``--results FILE``) after each entry and prints the tables (``--report``: only print).

    .venv/bin/python benchmarks/secondcorpus/run.py select                 # rewrite manifest.json (same rule)
    .venv/bin/python benchmarks/secondcorpus/run.py --label second --blind /tmp/.../bin-A/cpu2gpu --final /tmp/.../bin-B/cpu2gpu
    .venv/bin/python benchmarks/secondcorpus/run.py --label second --resume --limit 12   # the first 12 only
    .venv/bin/python benchmarks/secondcorpus/run.py --label second --resume --redo --only language_model
    .venv/bin/python benchmarks/secondcorpus/run.py --results benchmarks/secondcorpus/results.json --report
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "realcode"))
import check_proven as C  # noqa: E402  (apply_diff)
import run as R  # noqa: E402  (run, env, parse_json, first_line)

MIRRORS = Path("/work/.mirror")
WORK = Path("/tmp/cpu2gpu-second")
REPOS = ["yunjey/pytorch-tutorial", "pytorch/examples"]
CAP, MAX_CHARS = 15, 60_000
OK = ("ok", "max_steps")
TEST_DIRS = {"test", "tests", "testing"}
ENGINES = ("blind", "final")


# ------------------------------------------------------------------ selection
def git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(MIRRORS / repo.replace("/", "+") / "repo"), *args],
                          capture_output=True, check=True).stdout


def fits(path: str, text: str) -> bool:
    p = PurePosixPath(path)
    if p.suffix != ".py" or p.name == "setup.py" or p.name.startswith("test_") or TEST_DIRS & set(p.parts[:-1]):
        return False
    return (len(text) <= MAX_CHARS and re.search(r"^\s*(import torch|from torch)\b", text, re.M) is not None
            and "optim." in text and ".backward(" in text and ".step(" in text)


def select() -> dict:
    entries = []
    for repo in REPOS:
        commit = git(repo, "rev-parse", "HEAD").decode().strip()
        paths = git(repo, "ls-tree", "-r", "--name-only", commit).decode().splitlines()
        taken = [p for p in paths if p.endswith(".py")
                 and fits(p, git(repo, "show", f"{commit}:{p}").decode("utf-8", errors="replace"))]
        taken.sort(key=lambda p: hashlib.sha1(p.encode()).hexdigest())
        for p in taken[:CAP]:
            entries.append({"id": f"{repo.split('/')[1]}:{p}", "repository": repo, "path": p, "commit": commit})
        print(f"{repo} {commit[:7]}: {len(taken)} files fit, {min(len(taken), CAP)} taken")
    return {"rule": ("every .py file (not setup.py, not test_*.py, not under a test/tests/testing folder) at the "
                     "repository's fetched HEAD that imports torch, contains 'optim.', '.backward(' and '.step(' "
                     f"in at most {MAX_CHARS} characters; at most {CAP} per repository, in sha1(path) order"),
            "entries": entries}


# ------------------------------------------------------------------ running
def materialise(e: dict, dest: Path) -> list[str]:
    """The script's folder at the entry's commit into dest; returns the files the mirror lacks (its largest
    blobs may be absent): those are left out."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    folder = str(PurePosixPath(e["path"]).parent)
    spec = e["commit"] + (f":{folder}" if folder != "." else "")
    try:
        tarfile.open(fileobj=io.BytesIO(git(e["repository"], "archive", "--format=tar", spec))).extractall(dest)
        return []
    except subprocess.CalledProcessError:  # a blob the mirror lacks: the folder file by file
        pass
    absent = []
    for line in git(e["repository"], "ls-tree", "-r", "-z", spec).decode().split("\0"):
        if not line:
            continue
        meta, rel = line.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind != "blob":
            continue
        try:
            data = git(e["repository"], "cat-file", "blob", sha)
        except subprocess.CalledProcessError:
            absent.append(rel)
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
        if mode == "100755":
            (dest / rel).chmod(0o755)
    return absent


def verify(tool: str, cwd: Path, script: str, extra: list[str], timeout: float, wall: float) -> dict:
    res = R.run([tool, "verify", script, *extra, "--synthetic-data", "--timeout", str(timeout),
                 "--output-format", "json", "--jobs", "1"], cwd, wall, use_env=True)
    rep = R.parse_json(res["stdout"])
    out = {"rc": res["rc"], "seconds": res["seconds"]}
    if not isinstance(rep, dict) or "runs" not in rep:
        out.update({"status": "no-report", "why": "timeout" if res["rc"] is None else
                    R.first_line(res["stderr"][-3000:] or res["stdout"][-3000:])})
        return out
    runs = rep.get("runs") or []
    out.update({"verdict": rep.get("verdict"),
                "runs": [{k: x.get(k) for k in ("label", "role", "status", "steps", "first_loss", "last_loss")}
                         for x in runs],
                "reasons": [{"run": x.get("run"), "rule": x.get("rule"), "cause": (x.get("cause") or "")[:300]}
                            for x in rep.get("reasons", [])]})
    mine = [x for x in runs if x.get("role") != "original"] or runs
    out["status"] = mine[0].get("status") if mine else "no-run"
    exc = mine[0].get("exception") if mine else None
    why = out["reasons"][0]["cause"] if out["reasons"] else ""
    if exc:
        why = why or R.first_line(f"{exc.get('type')}: {exc.get('message')}")
    out["why"] = why
    return out


def migrate(tool: str, cwd: Path, script: str, a) -> dict:
    t0 = time.time()
    res = R.run([tool, "migrate", script, "--synthetic-data", "--max-steps", "3", "--timeout", str(a.timeout),
                 "--output-format", "json", "-q"], cwd, a.migrate_wall, use_env=True)
    wall = round(time.time() - t0, 1)
    rep = R.parse_json(res["stdout"])
    if not isinstance(rep, dict) or "proven" not in rep:
        return {"rc": res["rc"], "wall_seconds": wall, "proven": False, "diff": "",
                "ending": "no report: " + ("timeout" if res["rc"] is None else R.first_line(res["stderr"][-2000:]))}
    v = rep.get("verify") or {}
    runs = v.get("runs") or []
    return {
        "rc": res["rc"], "wall_seconds": wall, "proven": bool(rep.get("proven")), "ending": rep.get("ending", ""),
        "cannot_run": rep.get("cannot_run"), "repair_rounds": max(len(rep.get("rounds") or []) - 1, 0),
        "verdict": v.get("verdict"),
        "reasons": [{"run": x.get("run"), "rule": x.get("rule"), "cause": (x.get("cause") or "")[:300]}
                    for x in v.get("reasons", [])],
        "runs": [{k: x.get(k) for k in ("label", "status", "steps", "mirrored_draws")} for x in runs],
        "coverage": [{k: c.get(k) for k in ("run", "ran", "reached", "missing_count", "set_aside")}
                     for c in v.get("coverage") or []],
        "band": v.get("band"), "mirrored_draws": max([x.get("mirrored_draws") or 0 for x in runs], default=0),
        "taken_back": len(rep.get("taken_back") or []), "static_misses": len(rep.get("static_misses") or []),
        "changed_files": rep.get("changed_files", []), "diff": rep.get("diff") or "",
    }


def process(e: dict, a) -> dict:
    rec = dict(e)
    base = WORK / a.label / re.sub(r"[^\w.-]+", "_", e["id"])
    name = PurePosixPath(e["path"]).name
    orig = base / "orig"
    absent = materialise(e, orig)
    if absent:
        rec["absent_from_mirror"] = absent
    o = verify(a.final, orig, name, ["--device", "cpu", "--max-steps", "3"], a.timeout, a.timeout * 2 + 120)
    rec["original"] = o
    rec["original_runs"] = o["status"] in OK
    if not rec["original_runs"]:
        return rec
    for eng in ENGINES:
        tool = getattr(a, eng)
        m = migrate(tool, orig, name, a)
        rec[eng] = m
        draft = base / f"draft-{eng}"
        err = C.apply_diff(orig, draft, m["diff"])
        if err:
            m["cpu_run"] = {"status": "patch-failed", "why": err}
            if m["proven"]:
                m["check"] = {"class": "patch-failed", "first": err}
            continue
        if not m["diff"].strip():
            m["cpu_run"] = {"status": o["status"], "why": "draft unchanged: the original's run"}
        else:
            m["cpu_run"] = verify(a.final, draft, name, ["--device", "cpu", "--max-steps", "3"], a.timeout,
                                  a.timeout * 2 + 120)
        m["cpu_broken"] = m["cpu_run"]["status"] not in OK
        if m["proven"]:
            against = base / "against"
            materialise(e, against)
            c = verify(a.final, draft, name, ["--device", "sim", "--against", str(against / name), "--max-steps",
                                              str(a.check_steps)], a.check_timeout, a.check_timeout * 4 + 120)
            orig_bad = any(x.get("role") == "original" and x.get("status") not in OK for x in c.get("runs", []))
            c["class"] = ("holds" if c.get("verdict") == "pass" else "original-fails" if orig_bad else
                          "no-report" if c["status"] == "no-report" else "false-proven")
            m["check"] = c
    return rec


# ------------------------------------------------------------------ report
def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.0f}" if xs else "-"


def engine_cells(rs: list[dict], eng: str, lines: bool) -> list[str]:
    ms = [r[eng] for r in rs if eng in r]
    proven = [m for m in ms if m["proven"]]
    false = [m for m in proven if (m.get("check") or {}).get("class") in ("false-proven", "patch-failed")]
    unjudged = [m for m in proven if (m.get("check") or {}).get("class") not in ("holds", "false-proven", "patch-failed")]
    cells = [f"{len(proven)} / {len(ms)}", str(len(false)) + (f" (+{len(unjudged)} not judged)" if unjudged else ""),
             med([m["wall_seconds"] for m in ms])]
    if lines:
        dev = [c for m in proven for c in m.get("coverage", []) if c.get("run") != "migrated (cpu)"]
        cells += [f"{sum(c.get('reached') or 0 for c in dev)} / {sum(c.get('ran') or 0 for c in dev)}",
                  str(sum(bool(m.get("mirrored_draws")) for m in proven)),
                  str(sum((m.get("band") or {}).get("max") is not None for m in proven))]
    return cells


def table(recs: list[dict]) -> str:
    run_here = [r for r in recs if r.get("original_runs")]
    head = ("| entries | originals that run here | blind: proven | blind: proven-but-false | blind: median wall s | "
            "final: proven | final: proven-but-false | final: median wall s | final: lines reached on the device / "
            "lines the originals ran (proven) | final: proven with mirrored draws | final: proven with a measured band "
            "| CPU fallback broken (blind / final) |")
    row = [str(len(recs)), str(len(run_here)), *engine_cells(run_here, "blind", False),
           *engine_cells(run_here, "final", True),
           " / ".join(str(sum(bool((r.get(eng) or {}).get("cpu_broken")) for r in run_here)) for eng in ENGINES)]
    return "\n".join([head, "|" + "---|" * (head.count("|") - 1), "| " + " | ".join(row) + " |"])


def lists(recs: list[dict]) -> str:
    out = ["originals that do not run here:"]
    out += [f"  {r['id']}: {r['original']['status']}: {r['original'].get('why', '')[:200]}"
            for r in recs if not r.get("original_runs")]
    for eng in ENGINES:
        out.append(f"{eng}: not proven:")
        out += [f"  {r['id']}: rounds {r[eng].get('repair_rounds')}: {(r[eng].get('ending') or '')[:220]}"
                for r in recs if eng in r and not r[eng]["proven"]]
        out.append(f"{eng}: proven, independent check:")
        out += [f"  {r[eng]['check']['class']:14} {r['id']}: draft's run {r[eng]['check'].get('status')}; "
            f"{(r[eng]['check'].get('why') or r[eng]['check'].get('first') or '')[:200]}"
                for r in recs if eng in r and r[eng]["proven"]]
        out.append(f"{eng}: CPU fallback broken:")
        out += [f"  {r['id']}: {r[eng]['cpu_run']['status']}: {(r[eng]['cpu_run'].get('why') or '')[:200]}"
                for r in recs if eng in r and r[eng].get("cpu_broken")]
    return "\n".join(out)


def per_entry(recs: list[dict]) -> str:
    rows = ["| entry | original | blind | final | final coverage (device) | band | mirrored draws |",
            "|---|---|---|---|---|---|---|"]
    for r in recs:
        cells = [r["id"], r["original"]["status"]]
        for eng in ENGINES:
            m = r.get(eng)
            if m is None:
                cells.append("-")
                continue
            c = (m.get("check") or {}).get("class")
            cells.append(f"{'proven' if m['proven'] else 'not'} r{m.get('repair_rounds')} {m['wall_seconds']:.0f}s"
                         + (f" check:{c}" if c else "") + (" CPU-broken" if m.get("cpu_broken") else ""))
        m = r.get("final") or {}
        dev = [c for c in m.get("coverage", []) if c.get("run") != "migrated (cpu)"]
        cells += [" ".join(f"{c.get('reached')}/{c.get('ran')}" for c in dev) or "-",
                  f"{(m.get('band') or {}).get('max'):.2g}" if (m.get("band") or {}).get("max") is not None else "-",
                  str(m.get("mirrored_draws", "-"))]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def report(recs: list[dict]) -> str:
    return "\n\n".join([table(recs), per_entry(recs), lists(recs)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="run", choices=["run", "select"])
    ap.add_argument("--label", default="second", help="work folders /tmp/cpu2gpu-second/<label>/")
    ap.add_argument("--results", type=Path, help="the results file [default: results-<label>.json here]")
    ap.add_argument("--blind", default="/tmp/cpu2gpu-realcode/bin-be3cf610dad3/cpu2gpu")
    ap.add_argument("--final", default="/tmp/cpu2gpu-realcode/bin-78114ae24ae5/cpu2gpu")
    ap.add_argument("--timeout", type=float, default=120, help="verify/migrate --timeout")
    ap.add_argument("--migrate-wall", type=float, default=1200, help="wall limit of one migrate command")
    ap.add_argument("--check-steps", type=int, default=200)
    ap.add_argument("--check-timeout", type=float, default=180)
    ap.add_argument("--only", help="comma-separated substrings of entry ids")
    ap.add_argument("--limit", type=int, help="the first N entries in manifest order")
    ap.add_argument("--resume", action="store_true", help="keep the records of results-<label>.json")
    ap.add_argument("--redo", action="store_true", help="with --resume: run the --only entries again")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args(argv)
    if a.what == "select":
        (HERE / "manifest.json").write_text(json.dumps(select(), indent=1) + "\n")
        return 0
    out_path = a.results or HERE / f"results-{a.label}.json"
    if a.report:
        print(report(json.loads(out_path.read_text())["entries"]))
        return 0
    entries = json.loads((HERE / "manifest.json").read_text())["entries"]
    if a.limit:
        entries = entries[:a.limit]
    wanted = [e for e in entries if not a.only or any(s in e["id"] for s in a.only.split(","))]
    recs = []
    if a.resume and out_path.exists():  # the records kept: those of the manifest, less the ones run again
        recs = [r for r in json.loads(out_path.read_text())["entries"] if r["id"] in {e["id"] for e in entries}
                and not (a.redo and r["id"] in {e["id"] for e in wanted})]
    done = {r["id"] for r in recs}

    def save():
        order = {e["id"]: i for i, e in enumerate(entries)}
        recs.sort(key=lambda r: order[r["id"]])
        out_path.write_text(json.dumps({"label": a.label, "blind": a.blind, "final": a.final,
                                        "timeout": a.timeout, "check_steps": a.check_steps,
                                        "check_timeout": a.check_timeout, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                                        "planned": len(entries), "measured": len(recs), "entries": recs},
                                       indent=1) + "\n")

    t0 = time.time()
    todo = [e for e in wanted if e["id"] not in done]
    for n, e in enumerate(todo, 1):
        try:
            r = process(e, a)
        except Exception as x:  # noqa: BLE001 - the driver's own failure on one entry
            r = dict(e, original={"status": "driver-error", "why": repr(x)[:300]}, original_runs=False)
        recs.append(r)
        save()
        tags = " ".join(f"{eng}={'proven' if r[eng]['proven'] else 'not'}"
                        f"/{(r[eng].get('check') or {}).get('class', '-')}" for eng in ENGINES if eng in r)
        print(f"[{n}/{len(todo)} {time.time() - t0:5.0f}s] {r['original']['status']:10} {tags} {r['id']}", flush=True)
    print(report(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
