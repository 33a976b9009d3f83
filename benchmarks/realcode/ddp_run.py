"""`rewrite --distributed ddp` on the corpus, then `verify --nproc 2` on what it migrated.

Run by hand after `run.py` (it reads its results and the originals it copied):

    python benchmarks/realcode/ddp_run.py --results benchmarks/realcode/results-final.json \
        --work /tmp/cpu2gpu-realcode/final --out /tmp/ddp-corpus

The entries taken are those whose original ran and whose device migration was judged (pass,
missed-move, losses-differ): a DDP migration presumes a script that trains. Each script is copied,
rewritten with `--distributed ddp` (migrated, refused with its reason, or error), and a migrated
one is run with `verify --nproc 2 --against ORIGINAL --synthetic-data --max-steps N` on the CPU.
Prints one line per entry and the counts; `--json` writes them.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU2GPU = Path(sys.executable).with_name("cpu2gpu")
SITE = Path("/tmp/cpu2gpu-realcode/site")  # the originals' extra packages (see README.md)
TAKEN = ("pass", "missed-move", "losses-differ")


def folder_name(entry_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", entry_id.replace("#", "_"))


def migrate(script: Path) -> tuple[str, str]:
    done = subprocess.run([str(CPU2GPU), "rewrite", "--in-place", "--distributed", "ddp", str(script)],
                          capture_output=True, text=True)
    if done.returncode == 0:
        return "migrated", ""
    reason = next((line.split("DistributedDataParallel: ", 1)[1] for line in done.stderr.splitlines()
                   if "not migrated to DistributedDataParallel" in line), done.stderr.strip()[-200:])
    return ("refused" if done.returncode == 1 else "error"), reason


def verify(script: Path, original: Path, max_steps: int, timeout: int) -> dict:
    env = dict(os.environ)
    if SITE.is_dir():
        env["PYTHONPATH"] = str(SITE) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    start = time.perf_counter()
    done = subprocess.run([str(CPU2GPU), "verify", str(script), "--against", str(original), "--nproc", "2",
                           "--synthetic-data", "--max-steps", str(max_steps), "--timeout", str(timeout), "-q",
                           "--output-format", "json"], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"verdict": "no-report", "seconds": seconds, "detail": done.stderr.strip()[-300:]}
    compared = next((c for c in report.get("comparisons", []) if c.get("method") == "distributed"), {})
    original_failed = any(r.get("label", "").startswith("original") and r.get("status") not in ("ok", "max_steps")
                          for r in report.get("runs", []))
    return {"verdict": report["verdict"], "seconds": round(seconds, 1), "original_failed": original_failed,
            "max_rel_diff": compared.get("max_rel_diff"), "tail_rel_diff": compared.get("tail_rel_diff"),
            "reasons": [r["cause"][:300] for r in report.get("reasons", [])]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "realcode" / "results-final.json")
    parser.add_argument("--work", type=Path, default=Path("/tmp/cpu2gpu-realcode/final"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/ddp-corpus"))
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    entries = [e for e in json.loads(args.results.read_text())["entries"] if e["class"] in TAKEN]
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    rows = []
    for entry in entries:
        row = {"id": entry["id"], "device_class": entry["class"]}
        source = args.work / folder_name(entry["id"]) / "orig"
        name = Path(entry["path"]).name
        if entry["format"] != "script" or not (source / name).is_file():
            row["ddp"] = "not-a-script" if entry["format"] != "script" else "no-copy"
            rows.append(row)
            continue
        copy = args.out / folder_name(entry["id"])
        shutil.copytree(source, copy)
        row["ddp"], row["reason"] = migrate(copy / name)
        if row["ddp"] == "migrated":
            row["verify"] = verify(copy / name, source / name, args.max_steps, args.timeout)
        rows.append(row)
        shown = row.get("verify", {}).get("verdict", row.get("reason", ""))
        print(f"{row['id']} | {row['ddp']} | {shown}", flush=True)
    print(dict(collections.Counter(r["ddp"] for r in rows)))
    print(dict(collections.Counter(r["verify"]["verdict"] for r in rows if "verify" in r)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
