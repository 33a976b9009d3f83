"""``cpu2gpu check`` over many files: read, pre-filter, answer from the cache, analyse the rest in parallel."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from .cache import Cache
from .engine import Finding, SourceError, check_module, parse, remember_source, select_rules
from .files import Target, mentions_torch
from .notebook import CellError, check_notebook, is_notebook
from .output import FileError
from .parallel import MIN_ITEMS_PER_JOB, ordered_map
from .progress import Progress
from .project import ProjectSet
from .rules import Rule
from .seeds import NO_SEEDS, Seeds


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: Optional[FileError] = None


def read_target(path: str) -> tuple[Optional[bytes], Optional[FileError]]:
    try:
        return Path(path).read_bytes(), None
    except FileNotFoundError:
        return None, FileError(path, "no such file or folder")
    except IsADirectoryError:
        return None, FileError(path, "is a folder")
    except OSError as error:
        return None, FileError(path, f"cannot read the file: {error.strerror}")


# -- the work done for one file, in a worker process; its answer is what the cache stores --

_rules: list[Rule] = []


def _use_rules(codes: Sequence[str]) -> None:
    global _rules
    _rules = select_rules(codes) if codes else []


def analyse(job: tuple[str, bytes, Seeds, Optional[tuple]]) -> dict:
    """The findings of one file (without their path) or its error, as JSON values. ``known``: the
    module (and facts) the project's seeds were computed from (only within one process)."""
    path, data, seeds, known = job
    module, facts = known if known is not None else (None, None)
    try:
        if is_notebook(path):
            findings = check_notebook(data, path, _rules)
        else:
            if module is not None:
                remember_source(module, data)  # for # noqa, without generating the code again
            findings = check_module(module if module is not None else parse(data), path, _rules, seeds, facts)
    except SourceError as error:
        return {"error": {"message": error.message, "line": error.line, "column": error.column,
                          "cell": error.cell if isinstance(error, CellError) else None}}
    return {"findings": [_without_path(f.as_dict()) for f in findings]}


def _same_module(entry, data: bytes) -> Optional[tuple]:
    """(module, facts) of the project's reading, if it read these very bytes."""
    return (entry[1], entry[2]) if entry is not None and entry[0] == data else None


def _without_path(data: dict) -> dict:
    del data["path"]
    return data


def _result(path: str, answer: dict) -> FileResult:
    if "error" in answer:
        return FileResult(path, error=FileError(path, **answer["error"]))
    return FileResult(path, [Finding(path=path, **item) for item in answer["findings"]])


# -- the whole run --


def check_targets(targets: Sequence[Target], rules: Sequence[Rule], jobs: int, cache: Optional[Cache],
                  quiet: bool = True) -> list[FileResult]:
    """One result per file read (files skipped by the torch pre-filter have none), in target order."""
    slots: list[Optional[FileResult]] = []
    pending: list[tuple[int, str, bytes, Optional[str]]] = []  # slot, path, bytes, cache key
    projects = ProjectSet([t.path for t in targets])
    digests = projects.digests()  # the project around each file, from its import lines: no parse
    for target in targets:
        data, error = read_target(target.path)
        if data is None:
            slots.append(FileResult(target.path, error=error))
            continue
        if not target.named and not mentions_torch(data) and not digests.get(target.path):
            continue  # (a project file in play is read even without torch: others hand it tensors)
        # a file's findings depend on the project around it: a change in model.py re-checks main.py
        key = cache.key(data + digests.get(target.path, b""), "ipynb" if is_notebook(target.path) else "py") \
            if cache is not None else None
        answer = cache.get(key) if key is not None else None
        if answer is not None:
            slots.append(_result(target.path, answer))
            continue
        slots.append(None)
        pending.append((len(slots) - 1, target.path, data, key))
    parsed: dict = {}
    seeds = projects.seeds([path for _, path, _, _ in pending], parsed)
    progress = Progress.for_terminal(len(pending), "cpu2gpu check", quiet)
    codes = [rule.code for rule in rules]
    in_process = min(jobs, len(pending) // MIN_ITEMS_PER_JOB) <= 1  # modules do not travel to workers
    jobs_list = [(path, data, seeds.get(path, NO_SEEDS), _same_module(parsed.get(path), data) if in_process else None)
                 for _, path, data, _ in pending]
    answers = ordered_map(analyse, jobs_list, jobs,
                          initializer=_use_rules, initargs=(codes,))
    try:
        for (slot, path, _, key), answer in zip(pending, answers):
            if key is not None and cache is not None:
                cache.put(key, answer)
            slots[slot] = _result(path, answer)
            progress.advance()
    finally:
        progress.close()
    return [result for result in slots if result is not None]
