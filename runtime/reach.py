"""Did every line that the original ran also run in the migrated run? (the coverage part of "proven")

Each run reports the lines of the user's files it executed and the text of those files
(linetrace, child). The migrated files differ from the original's (the rewrite adds the device line
and changes the lines it moves), so the original's lines are carried over to the migrated text by a
line diff: an unchanged line maps to its place, a changed line to the line most like it among those
that replaced it (or to all of them: it ran if any of them ran), a line the migration removed is not
asked for. Lines inside a branch on the
device (``if torch.cuda.is_available():``, ``if args.cuda:``, ``else`` of ``if device == "cpu":``)
run in one run and not the other by design: they are set aside and counted as such.
"""

from __future__ import annotations

import ast
import difflib
import re

from .notebookrun import CELL_SEP

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


def _pair(path: str, ref: dict, other: dict) -> str:
    """The migrated run's name of one of the original's files: the entry script by role, others by their
    path in the folder each run copied (an original in another folder than the migration), else as shown."""
    script, other_script = ref.get("script_shown"), other.get("script_shown")
    if script and other_script:
        if path == script:
            return other_script
        if path.startswith(script + CELL_SEP):  # a cell of the entry notebook: the same cell of the other
            return other_script + path[len(script):]
    inside = (ref.get("in_root") or {}).get(path)
    if inside is not None:
        for shown, other_inside in (other.get("in_root") or {}).items():
            if other_inside == inside:
                return shown
    return path


def reached(ref: dict, other: dict) -> dict | None:
    """How many of the lines the original (`ref`) ran also ran in `other`, with the first ones that
    did not; None when a run recorded no lines (an older child, a run that failed at its start)."""
    ref_lines, other_lines = ref.get("lines"), other.get("lines")
    if not ref_lines or other_lines is None:
        return None
    ran = set_aside = 0
    missing: list = []
    for path, lines in ref_lines.items():
        target = _pair(path, ref, other)
        old_text = (ref.get("sources") or {}).get(path)
        new_text = (other.get("sources") or {}).get(target)
        if old_text is not None and new_text is not None:
            mapping = line_map(old_text, new_text)
        else:
            mapping = {n: (n,) for n in lines}  # the migrated file never ran: same lines asked for
        device_only = device_branch_lines(old_text) if old_text is not None else set()
        done = set(other_lines.get(target, ()))
        for n in lines:
            if n in device_only:
                set_aside += 1
                continue
            new_lines = mapping.get(n)
            if not new_lines:
                continue  # the migration removed it
            ran += 1
            if not done.intersection(new_lines):
                source = old_text[n - 1].strip() if old_text and n <= len(old_text) else ""
                missing.append({"file": target, "line": new_lines[0], "original_line": n, "source": source})
    return {"ran": ran, "reached": ran - len(missing), "missing": missing[:SHOWN_MISSING],
            "missing_count": len(missing), "set_aside": set_aside}

