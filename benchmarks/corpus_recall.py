"""Recall of the rewriter over the fixture corpus (fixtures/scripts/), run by hand.

The needed moves of a script are the placement edits its hand-written expected file makes; the
tool's moves are what ``cpu2gpu.rewrite_source`` makes (with the unsafe fixes where the fixture
carries the mark). Both are read off a line diff against the input (difflib): every line of the
result that is new or changed is one edit, and an edit is

- a setup: the line that binds the device (``device = torch.device(...)``), counted apart;
- a move: the line gains a ``.to(``, ``device=``, ``map_location=``, ``.cpu()``, ``.cuda(`` or
  ``register_buffer`` (one per line, however many tensors it moves);
- other: any other edit (``pin_memory=``, a comment...), counted apart.

A needed edit is matched when the tool's result has the same line (text and indentation) among
its own edits; missed = needed - matched; extra = the tool's edits that match none.

    .venv/bin/python benchmarks/corpus_recall.py              # the engine in this checkout
    .venv/bin/python benchmarks/corpus_recall.py --rev HEAD~5 # the engine at a commit (git archive)
    .venv/bin/python benchmarks/corpus_recall.py --details    # and each missed / extra line
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"
UNSAFE_MARK = b"# cpu2gpu-fixture: unsafe-fixes"
MOVE_MARKERS = (".to(", "device=", "map_location=", ".cpu()", ".cuda(", "register_buffer")
SETUP = re.compile(r"^\s*[A-Za-z_][\w.]*\s*=\s*(torch\.device\(|torch\.accelerator\.current_accelerator\()")
KINDS = ("setup", "move", "other")


def edits(before: str, after: str) -> dict:
    """The lines of `after` that are new or changed against `before`, by kind (Counters of lines)."""
    a, b = before.splitlines(), after.splitlines()
    out = {k: Counter() for k in KINDS}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag not in ("replace", "insert"):
            continue
        old = a[i1:i2]
        for line in b[j1:j2]:
            if not line.strip():
                continue
            if SETUP.match(line):
                out["setup"][line] += 1
                continue
            # the old line it replaces, if any: the closest one in the replaced block
            base = max(old, key=lambda o: difflib.SequenceMatcher(None, o, line).ratio(), default="")
            if any(line.count(m) > base.count(m) for m in MOVE_MARKERS):
                out["move"][line] += 1
            else:
                out["other"][line] += 1
    return out


def measure(engine_note: str) -> dict:
    from cpu2gpu import rewrite_source

    rows = []
    for path in sorted(SCRIPTS.glob("*.py")):
        expected_path = path.with_name(path.stem + ".expected.py")
        if path.name.endswith(".expected.py") or not expected_path.exists():
            continue
        source = path.read_bytes()
        text = source.decode("utf-8")
        needed = edits(text, expected_path.read_text(encoding="utf-8"))
        error = None
        try:
            made_text = rewrite_source(source, unsafe_fixes=UNSAFE_MARK in source)
            if isinstance(made_text, bytes):
                made_text = made_text.decode("utf-8")
        except Exception as e:  # a crash makes nothing: every needed edit is missed
            error = f"{type(e).__name__}: {e}"
            made_text = text
        made = edits(text, made_text)
        row = {"script": path.name, "error": error, "identical": made_text == expected_path.read_text(encoding="utf-8")}
        for kind in KINDS:
            matched = needed[kind] & made[kind]
            row[kind] = {
                "needed": sum(needed[kind].values()),
                "made": sum(made[kind].values()),
                "matched": sum(matched.values()),
                "missed": sorted((needed[kind] - matched).elements()),
                "extra": sorted((made[kind] - matched).elements()),
            }
        rows.append(row)
    return {"engine": engine_note, "rows": rows}


def table(result: dict, details: bool) -> str:
    rows = result["rows"]
    head = (f"{'script':<34} {'moves':>5} {'made':>5} {'match':>5} {'miss':>5} {'extra':>5}   "
            f"{'setup n/m':>9}   {'other n/m/x':>11}   same")
    lines = [f"engine: {result['engine']}", head, "-" * len(head)]
    tot = {k: Counter() for k in KINDS}
    for r in rows:
        m, s, o = r["move"], r["setup"], r["other"]
        for k in KINDS:
            tot[k].update({f: r[k][f] if isinstance(r[k][f], int) else len(r[k][f])
                           for f in ("needed", "made", "matched", "missed", "extra")})
        flag = "yes" if r["identical"] else ("CRASH" if r["error"] else "no")
        lines.append(f"{r['script']:<34} {m['needed']:>5} {m['made']:>5} {m['matched']:>5} {len(m['missed']):>5} "
                     f"{len(m['extra']):>5}   {s['needed']:>4}/{s['matched']:<4}   "
                     f"{o['needed']:>3}/{o['matched']:>3}/{len(o['extra']):<3}   {flag}")
    lines.append("-" * len(head))
    m, s, o = tot["move"], tot["setup"], tot["other"]
    lines.append(f"{'total (' + str(len(rows)) + ' scripts)':<34} {m['needed']:>5} {m['made']:>5} {m['matched']:>5} "
                 f"{m['missed']:>5} {m['extra']:>5}   {s['needed']:>4}/{s['matched']:<4}   "
                 f"{o['needed']:>3}/{o['matched']:>3}/{o['extra']:<3}")
    recall = m["matched"] / m["needed"] if m["needed"] else 1.0
    same = sum(r["identical"] for r in rows)
    lines.append(f"move recall {m['matched']}/{m['needed']} = {recall:.1%}; extra moves {m['extra']}; "
                 f"device setup {s['matched']}/{s['needed']} (extra {s['extra']}); "
                 f"other edits {o['matched']}/{o['needed']} (extra {o['extra']}); "
                 f"scripts rewritten exactly as expected {same}/{len(rows)}")
    if details:
        for r in rows:
            notes = []
            if r["error"]:
                notes.append(f"  crash: {r['error']}")
            for k in KINDS:
                notes += [f"  missed {k}: {ln.strip()}" for ln in r[k]["missed"]]
                notes += [f"  extra  {k}: {ln.strip()}" for ln in r[k]["extra"]]
            if notes:
                lines.append(f"{r['script']}:")
                lines += notes
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rev", help="measure the engine (cpu2gpu/) as it was at this git commit")
    p.add_argument("--engine", help=argparse.SUPPRESS)  # a folder holding cpu2gpu/ (used by --rev)
    p.add_argument("--details", action="store_true", help="list every missed and extra line")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = p.parse_args(argv)

    if args.rev:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.rev, "cpu2gpu"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.rev], check=True,
                                 capture_output=True, text=True).stdout.strip()
            rest = [a for a in (argv if argv is not None else sys.argv[1:])]
            i = rest.index("--rev")
            rest = rest[:i] + rest[i + 2:]
            return subprocess.call([sys.executable, __file__, "--engine", f"{tmp}::{sha}", *rest])

    note = "this checkout"
    if args.engine:
        folder, _, sha = args.engine.partition("::")
        sys.path.insert(0, folder)
        note = f"cpu2gpu/ at {sha}"
    else:
        sys.path.insert(0, str(ROOT))
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "cpu2gpu"], capture_output=True,
                               text=True).stdout.strip()
        note = f"this checkout (HEAD {head}{', cpu2gpu/ modified' if dirty else ''})"
    import cpu2gpu

    if args.engine and not os.path.abspath(cpu2gpu.__file__).startswith(folder):
        raise SystemExit(f"imported {cpu2gpu.__file__}, not the engine at {args.rev or folder}")
    result = measure(note)
    print(json.dumps(result, indent=1) if args.json else table(result, args.details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
