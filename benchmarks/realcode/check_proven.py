"""Independent check of migrate's "proven": each proven draft run again with a large step cap.

For every record of results-<label>.json (migrate_run.py) whose ``migrate`` (or, for a notebook, ``migrate_py``)
is proven: the original's folder as migrate_run materialised it (/tmp/cpu2gpu-realcode/<label>/<entry>/orig) is
copied to a scratch folder (…/<entry>/draft; the mirrors and ``orig`` are never written), migrate's diff is
applied there, and the draft is run with

    TOOL verify DRAFT --device sim --against ORIG --synthetic-data --max-steps N --timeout T --output-format json

in the draft's folder with the originals' environment (run.env). migrate's capped runs stop a few steps into the
training; this run goes on to the code after it. A proven draft whose full run fails where the original's does
not (an exception after the training, losses that part) was a false "proven".

Writes the outcome into the same results file, per record: ``full_check`` = {verdict, rc, class, first line,
per run: status, steps, where the cap ended}. Classes: ``holds`` (verify passes), ``false-proven`` (the draft's
run fails and the original's full run does not), ``original-fails`` (the original's own full run fails: nothing
judged), ``timeout`` (a run did not finish within --timeout: nothing judged), ``patch-failed``, ``no-report``.

    .venv/bin/python benchmarks/realcode/check_proven.py --label blind34 --tool /tmp/cpu2gpu-realcode/bin-SHA/cpu2gpu
    .venv/bin/python benchmarks/realcode/check_proven.py --label blind34 --report
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run as R  # noqa: E402  (run, env, parse_json, first_line, CACHE, ROOT)

OK = ("ok", "max_steps")


def target(e: dict, key: str) -> str:
    name = Path(e["path"]).name
    return Path(name).stem + ".py" if key == "migrate_py" else name


LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def patch_text(old: str, hunks: list[list[str]]) -> str:
    """old with the hunks of one file's unified diff applied; ValueError where the context differs."""
    src, out, at = LINE.findall(old), [], 0
    for h in hunks:
        m = HUNK.match(h[0])
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        out += src[at:start]
        at = start
        body = []
        for ln in h[1:]:
            if ln.startswith("\\"):  # "\ No newline at end of file": the line before has none
                body[-1] = body[-1][:1] + body[-1][1:].rstrip("\n")
            else:
                body.append(ln)
        for ln in body:
            if ln[:1] in (" ", "-"):
                if at >= len(src) or src[at] != ln[1:]:
                    raise ValueError(f"context differs at line {at + 1}: {ln[1:].rstrip()!r}")
                at += 1
            if ln[:1] in (" ", "+"):
                out.append(ln[1:])
    return "".join(out + src[at:])


def apply_diff(orig: Path, draft: Path, diff: str) -> str:
    """The draft folder: a copy of the original's folder with migrate's diff applied; '' or the error.
    (Applied here, not with patch(1): names with spaces, as migrate's diff writes them, are whole lines.)"""
    if draft.exists():
        shutil.rmtree(draft)
    shutil.copytree(orig, draft, symlinks=True)
    files: dict[str, list[list[str]]] = {}
    name = None
    for ln in LINE.findall(diff):
        if ln.startswith("--- a/"):
            name = None
        elif ln.startswith("+++ b/"):
            name = ln[len("+++ b/"):].rstrip("\n")
            files[name] = []
        elif ln.startswith("@@") and name is not None:
            files[name].append([ln])
        elif name is not None and files[name]:
            files[name][-1].append(ln)
    try:
        for name, hunks in files.items():
            path = draft / name
            text = path.read_bytes().decode("utf-8", errors="replace")
            path.write_bytes(patch_text(text, hunks).encode("utf-8"))
    except (ValueError, OSError) as x:
        return f"{name}: {x}"
    return ""


def summarise(res: dict) -> dict:
    rep = R.parse_json(res["stdout"])
    if not isinstance(rep, dict) or "runs" not in rep:
        return {"class": "no-report", "rc": res["rc"], "seconds": res["seconds"],
                "first": "timeout" if res["rc"] is None else R.first_line(res["stderr"][-2000:])}
    runs = [{"label": x.get("label"), "role": x.get("role"), "status": x.get("status"), "steps": x.get("steps"),
             "ended": (x.get("cap") or {}).get("ended"),
             "exception": R.first_line(((x.get("exception") or {}).get("type") or "") + ": "
                                       + ((x.get("exception") or {}).get("message") or ""))
             if x.get("exception") else None} for x in rep["runs"]]
    reasons = [{"run": x.get("run"), "rule": x.get("rule"), "cause": (x.get("cause") or "")[:300]}
               for x in rep.get("reasons", [])]
    orig_bad = any(x["role"] != "migrated" and x["status"] not in OK for x in runs)
    if rep.get("verdict") == "pass":
        cls = "holds"
    elif any(x["status"] == "timeout" for x in runs):
        cls = "timeout"
    elif orig_bad:
        cls = "original-fails"
    else:
        cls = "false-proven"
    return {"class": cls, "verdict": rep.get("verdict"), "rc": res["rc"], "seconds": res["seconds"],
            "first": reasons[0]["cause"] if reasons else "", "runs": runs, "reasons": reasons}


def check(e: dict, key: str, tool: str, a) -> dict:
    slug = re.sub(r"[^\w.-]+", "_", e["id"])
    orig = R.CACHE / a.label / slug / "orig"
    draft = R.CACHE / a.label / slug / ("draft-py" if key == "migrate_py" else "draft")
    err = apply_diff(orig, draft, e[key].get("diff") or "")
    if err:
        return {"class": "patch-failed", "first": err}
    name = target(e, key)
    res = R.run([tool, "verify", name, "--device", "sim", "--against", str(orig / name), "--synthetic-data",
                 "--max-steps", str(a.max_steps), "--timeout", str(a.timeout), "--output-format", "json",
                 "--jobs", "1"], draft, a.timeout * 4 + 120, use_env=True)
    out = summarise(res)
    out["max_steps"], out["timeout"] = a.max_steps, a.timeout
    return out


def report(recs: list[dict]) -> str:
    lines = []
    for r in recs:
        for key in ("migrate", "migrate_py"):
            m = r.get(key) or {}
            c = m.get("full_check")
            if not m.get("proven"):
                continue
            tag = f"{r['id']}{' (.py)' if key == 'migrate_py' else ''}"
            unr = ",".join(sorted({u.get("ended") for u in m.get("unreached") or []})) or "-"
            if c is None:
                lines.append(f"  {tag}: not checked (unreached: {unr})")
                continue
            ends = ",".join(f"{x['label']}={x['status']}/{x['ended']}" for x in c.get("runs", []))
            lines.append(f"  {c['class']:14} {tag} (capped run's unreached: {unr}) {ends} {c.get('first', '')[:200]}")
    return "full runs of the proven drafts:\n" + "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="results-<label>.json of migrate_run.py")
    ap.add_argument("--tool", default=str(R.ROOT / ".venv" / "bin" / "cpu2gpu"))
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--only", help="comma-separated substrings of entry ids")
    ap.add_argument("--keys", default="migrate,migrate_py", help="which records: migrate (the file as given), "
                                                                 "migrate_py (a notebook's converted .py)")
    ap.add_argument("--unreached-first", action="store_true", help="the proven records with unreached code first")
    ap.add_argument("--redo", action="store_true", help="check records already checked again")
    ap.add_argument("--report", action="store_true")
    a = ap.parse_args(argv)
    path = HERE / f"results-{a.label}.json"
    data = json.loads(path.read_text())
    if a.report:
        print(report(data["entries"]))
        return 0
    todo = [(r, k) for r in data["entries"] for k in a.keys.split(",")
            if (r.get(k) or {}).get("proven") and (a.redo or "full_check" not in r[k])
            and (not a.only or any(s in r["id"] for s in a.only.split(",")))]
    if a.unreached_first:
        todo.sort(key=lambda rk: not rk[0][rk[1]].get("unreached"))
    t0 = time.time()
    for n, (r, k) in enumerate(todo, 1):
        c = check(r, k, a.tool, a)
        r[k]["full_check"] = c
        data.setdefault("full_check", {}).update({"tool": a.tool, "max_steps": a.max_steps, "timeout": a.timeout,
                                                  "date": time.strftime("%Y-%m-%d %H:%M:%S")})
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"[{n}/{len(todo)} {time.time() - t0:6.0f}s] {c['class']:14} {c.get('seconds', '-')}s "
              f"{r['id']}{' (.py)' if k == 'migrate_py' else ''}  {c.get('first', '')[:160]}", flush=True)
    print()
    print(report(data["entries"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
