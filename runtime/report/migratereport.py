"""What ``cpu2gpu migrate`` says: the rounds, the static misses, verify's final verdict, the diff;
and the final write of the user's files."""

from __future__ import annotations

import difflib
import json
import os

from cpu2gpu.sources.syntax import python_lines
from cpu2gpu.sources.writing import WriteError, write_rewrite

from ..records import MigrateReport, Round
from .speedview import edits_lines
from .report import to_json as verify_json
from .report import to_text as verify_text


def _round_line(entry: Round) -> str:
    if entry["round"] == 0:
        files = ", ".join(entry["files"]) or "nothing to change"
        line = f"round 0: static rewrite: {files}"
        return line + "".join(f"\n  error: {e}" for e in entry.get("errors", ()))
    made = {"loop": "came from the loop at", "assign": "was bound at", "unpack": "was unpacked at",
            "attribute": "was set at"}.get(entry["how"], "was bound at")
    if entry["how"] in ("host", "rule"):
        line = (f"round {entry['round']}: {entry['rule']}: {entry['evidence']} -> {_how(entry)} at "
                f"{entry['bound_at']}: `{entry['edit']}`")
    else:
        line = (f"round {entry['round']}: `{entry['name']}` ({entry['kind']}) {made} {entry['bound_at']} and stayed "
                f"on the CPU ({entry['rule']}: {entry['evidence']}) -> {_how(entry)}: `{entry['edit']}`")
    if entry.get("taken_back"):
        line += f"\n  taken back: the CPU fallback broke ({entry['taken_back']})"
    return line


def _how(entry: Round) -> str:
    return {"loop": "moved at the loop head", "assign": "moved where it is bound",
            "unpack": "moved after it is unpacked", "attribute": "registered as a buffer",
            "host": "copied to the host first", "rule": "fixed by the rule's own fix"}.get(entry["how"], "moved")


def _ending(result: MigrateReport) -> str:
    rounds = len(result["rounds"]) - 1
    if result["proven"]:
        return (f"{result['script']}: proven: verify passes after the static rewrite and {rounds} repair "
                f"round{'s' if rounds != 1 else ''} ({result['seconds']:.0f} s)")
    if result["cannot_run"]:
        return (f"{result['script']}: unproven, cannot be judged here: {result['cannot_run']}; "
                f"the result is the static rewrite")
    return f"{result['script']}: not proven: {result['ending']}"


def to_text(result: MigrateReport, diff: bool = True) -> str:
    out = [_ending(result), ""]
    out.extend(_round_line(e) for e in result["rounds"])
    if result["static_misses"]:
        out += ["", "what the static pass missed (where check should have reported it):"]
        out += [f"  {m['file']}:{m['line']}: {m['rule']} {m['name'] or m['how']}" for m in result["static_misses"]]
    for u in result["unreached"]:
        out.append(f"not proven beyond {u['file']}:{u['line']}: the capped {u['run']} run stopped there "
                   f"({u['ended']}); the code after it never ran")
    out += ["", verify_text(result["verify"]).rstrip("\n")]
    if result.get("speed"):
        out += ["", *edits_lines(result["speed"])]
    if diff and result["changed"]:
        out.append("")
        out.append(unified_diff(result).rstrip("\n"))
    for path in result.get("written", ()):
        out.append(f"Wrote {path}")
    if not diff and result["changed"] and not result.get("written"):
        out.append("nothing written: the migration is not proven (--write-unproven writes it anyway)")
    return "\n".join(out) + "\n"


def unified_diff(result: MigrateReport) -> str:
    chunks = []
    for path, new in result["changed"].items():
        old = result["originals"][path]
        name = os.path.relpath(path)
        a = python_lines(old.decode("utf-8", errors="replace"), keepends=True)
        b = python_lines(new.decode("utf-8", errors="replace"), keepends=True)
        lines = difflib.unified_diff(a, b, f"a/{name}", f"b/{name}")
        chunks.append("".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                              for line in lines))
    return "".join(chunks)


def to_json(result: MigrateReport) -> str:
    data = {k: v for k, v in result.items() if k not in ("changed", "originals")}
    # verify's report as verify --output-format json gives it: no run's executed lines or sources
    data["verify"] = json.loads(verify_json(result["verify"]))
    data["changed_files"] = sorted(os.path.relpath(p) for p in result["changed"])
    data["diff"] = unified_diff(result)
    return json.dumps(data, indent=2, default=str)


def write_files(result: MigrateReport) -> tuple[list, list]:
    """Each changed file written atomically, only if it still holds the bytes the migration read."""
    written, errors = [], []
    for path, new in result["changed"].items():
        try:
            write_rewrite(path, result["originals"][path], new)
            written.append(os.path.relpath(path))
        except WriteError as error:
            errors.append(f"{os.path.relpath(path)}: {error}")
    return written, errors
