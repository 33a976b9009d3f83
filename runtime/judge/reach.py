"""Did every line that the original ran also run in the migrated run? (the coverage part of "proven")

Each run reports the lines of the user's files it executed and the text of those files
(linetrace, child). The migrated files differ from the original's (the rewrite adds the device line
and changes the lines it moves), so the original's lines are carried over to the migrated text by a
line diff: an unchanged line maps to its place, a changed line to the line most like it among those
that replaced it (or to all of them: it ran if any of them ran), a line the migration removed is not
asked for. Lines inside a branch on the device (``if torch.cuda.is_available():``, ``if args.cuda:``,
``else`` of ``if device == "cpu":``), the original's or the one the migration put around a CUDA call,
run in one run and not the other by design: they are set aside and counted as such.
"""

from __future__ import annotations

import ast
import difflib
import re

from ..child.notebookrun import CELL_SEP
from ..records import Coverage, RunResult

# A branch whose test names one of these picks code by the device found: not asked to run in both.
_DEVICE_TEST = re.compile(r"cuda|device|gpu|accelerat|\bmps\b|xpu|is_available", re.IGNORECASE)
SHOWN_MISSING = 20  # the report lists this many of the lines that did not run


def device_branch_lines(text: list) -> set:
    """The lines of the branches of each ``if`` whose test names the device (body and else)."""
    source = "\n".join(text) + "\n"
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    out: set = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = ast.get_source_segment(source, node.test) or ""
        if not _DEVICE_TEST.search(test):
            continue
        for block in (node.body, node.orelse):
            for stmt in block:
                out.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return out


def line_map(old: list, new: list) -> dict:
    """{line of `old`: the lines of `new` it became} (1-based); a deleted line maps to nothing."""
    out: dict = {}
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                out[i1 + k + 1] = (j1 + k + 1,)
        elif tag == "replace":
            if i2 - i1 == j2 - j1:  # a line changed in place (a move chained on, device= added)
                for k in range(i2 - i1):
                    out[i1 + k + 1] = (j1 + k + 1,)
            else:  # lines added among changed ones (the device line above the first move): by likeness
                for i in range(i1, i2):
                    out[i + 1] = _likeliest(old[i], new, j1, j2)
    return out


def _likeliest(line: str, new: list, j1: int, j2: int) -> tuple:
    """The line of new[j1:j2] most like `line` (a move chained on keeps most of it), else all of them."""
    scores = [(difflib.SequenceMatcher(None, line, new[j], autojunk=False).ratio(), j) for j in range(j1, j2)]
    best, j = max(scores, default=(0.0, j1))
    return (j + 1,) if best >= 0.6 else tuple(range(j1 + 1, j2 + 1))


def _entry(run: RunResult) -> list:
    """The entry's files in order: the script, or the notebook's cells by number."""
    script = run.get("script_shown")
    if not script:
        return []
    names = set(run.get("sources") or {}) | set(run.get("lines") or {})
    cells = [p for p in names if p.startswith(script + CELL_SEP) and p[len(script) + len(CELL_SEP):].isdigit()]
    return sorted(cells, key=lambda p: int(p[len(script) + len(CELL_SEP):])) or [script]


def _pair(path: str, ref: RunResult, other: RunResult) -> str:
    """The migrated run's name of one of the original's other files: by its path in the folder each run
    copied (an original in another folder than the migration), else as shown."""
    inside = (ref.get("in_root") or {}).get(path)
    if inside is not None:
        for shown, other_inside in (other.get("in_root") or {}).items():
            if other_inside == inside:
                return shown
    return path


def _flat(run: RunResult, files: list) -> tuple[list, list]:
    """The files' texts one after the other (a notebook's cells as the script they make), and the
    (file, line) of each of those lines."""
    text: list = []
    where: list = []
    for f in files:
        source = (run.get("sources") or {}).get(f)
        if source is None:  # no text: as many empty lines as it ran
            source = [""] * max((run.get("lines") or {}).get(f) or [0])
        text += source
        where += [(f, n) for n in range(1, len(source) + 1)]
    return text, where


def _unit(ref: RunResult, ref_files: list, other: RunResult, other_files: list, tally: dict) -> None:
    """Count the lines of `ref_files` that ran in `ref` and whether they ran in `other`'s files."""
    old_text, old_where = _flat(ref, ref_files)
    new_text, new_where = _flat(other, other_files)
    known = all(f in (ref.get("sources") or {}) for f in ref_files) and \
        all(f in (other.get("sources") or {}) for f in other_files)
    mapping = line_map(old_text, new_text) if known else {}
    device_only = _device_branches(ref, ref_files)
    new_device_only = _device_branches(other, other_files)  # the migration's own guards (CG204)
    ran_old = {(f, n) for f in ref_files for n in (ref.get("lines") or {}).get(f, ())}
    ran_new = {(f, n) for f in other_files for n in (other.get("lines") or {}).get(f, ())}
    for i, (f, n) in enumerate(old_where, 1):
        if (f, n) not in ran_old:
            continue
        if (f, n) in device_only:
            tally["set_aside"] += 1
            continue
        if known:
            targets = [new_where[j - 1] for j in mapping.get(i, ())]
            if not targets:
                continue  # the migration removed it
        else:  # no text to match (a file that never ran there): the same line of the paired file
            k = ref_files.index(f)
            targets = [(other_files[k] if k < len(other_files) else other_files[-1], n)] if other_files else [(f, n)]
        if all(t in new_device_only for t in targets):
            tally["set_aside"] += 1  # `if torch.cuda.is_available():` put around it by the migration
            continue
        tally["ran"] += 1
        if not ran_new.intersection(targets):
            tally["missing"].append({"file": targets[0][0], "line": targets[0][1], "original_line": n,
                                     "source": old_text[i - 1].strip()})


def _device_branches(run: RunResult, files: list) -> set:
    """(file, line) of the lines of `files` in a branch on the device."""
    out: set = set()
    for f in files:
        source = (run.get("sources") or {}).get(f)
        if source is not None:
            out |= {(f, n) for n in device_branch_lines(source)}
    return out


def reached(ref: RunResult, other: RunResult) -> Coverage | None:
    """How many of the lines the original (`ref`) ran also ran in `other`, with the first ones that
    did not; None when a run recorded no lines (an older child, a run that failed at its start).
    The entry (a script or a notebook's cells, either against either) is matched as one text; the
    other files one by one."""
    ref_lines, other_lines = ref.get("lines"), other.get("lines")
    if not ref_lines or other_lines is None:
        return None
    tally: dict = {"ran": 0, "set_aside": 0, "missing": []}
    ref_entry, other_entry = _entry(ref), _entry(other)
    _unit(ref, ref_entry, other, other_entry, tally)
    for path in ref_lines:
        if path not in ref_entry:
            _unit(ref, [path], other, [_pair(path, ref, other)], tally)
    missing = tally["missing"]
    return {"ran": tally["ran"], "reached": tally["ran"] - len(missing), "missing": missing[:SHOWN_MISSING],
            "missing_count": len(missing), "set_aside": tally["set_aside"]}
