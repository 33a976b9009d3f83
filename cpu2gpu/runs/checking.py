"""``cpu2gpu check`` over many files: read, pre-filter, answer from the cache, analyse the rest in parallel."""

from __future__ import annotations

import collections.abc
import gc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generator, Iterator, Optional, Sequence, cast

from ..sources.cache import Cache
from ..engine import NOTEBOOK_FIELDS, Finding, SourceError, check_module, forget, parse, remember_source, select_rules
from ..sources.files import NotRegularFileError, Target, mentions_torch, read_source
from ..notebooks.cells import CellError, check_notebook, is_notebook
from ..output.formats import FileError
from .parallel import ordered_map, workers_for
from .progress import Progress
from ..project.projectset import ProjectSet
from ..rules import Rule
from ..analysis.seeds import NO_SEEDS, Seeds


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    error: Optional[FileError] = None


def read_target(path: str) -> tuple[Optional[bytes], Optional[FileError]]:
    try:
        return read_source(path), None
    except FileNotFoundError:
        return None, FileError(path, "no such file or folder")
    except IsADirectoryError:
        return None, FileError(path, "is a folder")
    except NotRegularFileError:
        return None, FileError(path, "not a regular file")
    except OSError as error:
        return None, FileError(path, f"cannot read the file: {error.strerror or error}")


# -- the work done for one file, in a worker process; its answer is what the cache stores --

_rules: list[Rule] = []
_device_expression: Optional[str] = None


# Python's cycle collector runs after every 700 new objects, and every tenth of its second-generation
# runs reads every object alive: a libcst parse makes hundreds of thousands, and a project's trees stay
# alive together. With the default thresholds collections took a fifth of a cold check
# (benchmarks/bench_check.py); the trees hold no cycles, and the little cyclic garbage the analysis
# leaves is still collected, less often.
_COLLECTIONS = (50_000, 20, 20)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the block with the cycle collector's thresholds raised (``_COLLECTIONS``)."""
    before = gc.get_threshold()
    gc.set_threshold(*_COLLECTIONS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _use_rules(codes: Sequence[str], explicit: Sequence[str] = (), device_expression: Optional[str] = None) -> None:
    """The rules of the run, in a worker: by code, with how the user selected them, and the device
    setup the fixes would add."""
    global _rules, _device_expression
    gc.set_threshold(*_COLLECTIONS)  # (a worker process; in process, check_targets restores them)
    _rules = select_rules(codes) if codes else []
    for rule in _rules:
        rule.selected_explicitly = rule.code in explicit
    _device_expression = device_expression


def analyse(job: tuple[str, bytes, Seeds, Optional[tuple]]) -> dict:
    """The findings of one file (without their path) or its error, as JSON values. ``known``: the
    module (and facts) the project's seeds were computed from (only within one process)."""
    path, data, seeds, known = job
    module, facts = known if known is not None else (None, None)
    try:
        if is_notebook(path):
            findings = check_notebook(data, path, _rules, _device_expression)
        else:
            if module is None:
                module = parse(data)
            else:
                remember_source(module, data)  # for its noqa comments, without generating the code again
            try:
                findings = check_module(module, path, _rules, seeds, facts, _device_expression)
            finally:
                forget(module)
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


def _crashed(job: tuple) -> dict:
    """The answer for a file whose worker process died (a crash in a native parser): not cached."""
    return {"error": {"message": "cpu2gpu crashed on this file (its worker process died); "
                                 "the other files were checked", "line": None, "column": None, "cell": None},
            "crashed": True}


_FINDING_FIELDS = {"line": int, "column": int, "end_line": int, "end_column": int, "code": str, "name": str,
                   "message": str, "fix_available": bool}
_ERROR_FIELDS = {"message": (str,), "line": (int, type(None)), "column": (int, type(None)),
                 "cell": (int, type(None))}


def _well_formed(answer) -> bool:
    """A cache entry in the shape ``analyse`` answers (else it is a miss: a stale or edited entry)."""
    if not isinstance(answer, dict):
        return False
    if "error" in answer:
        error = answer["error"]
        return isinstance(error, dict) and set(error) == set(_ERROR_FIELDS) and all(
            isinstance(error[k], kinds) and not isinstance(error[k], bool) for k, kinds in _ERROR_FIELDS.items())
    findings = answer.get("findings")
    return isinstance(findings, list) and all(
        isinstance(item, dict) and set(item) - set(NOTEBOOK_FIELDS) == set(_FINDING_FIELDS)
        and all(isinstance(item[k], kind) and (kind is bool or not isinstance(item[k], bool))
                for k, kind in _FINDING_FIELDS.items())
        and all(item.get(k) is None or type(item[k]) is int for k in NOTEBOOK_FIELDS)
        for item in findings)


def check_data(path: str, data: bytes, rules: Sequence[Rule], device_expression: Optional[str] = None) -> FileResult:
    """One text that is not read from its path (standard input): checked on its own, as a notebook
    when the path says so; the project around the path is not read."""
    try:
        findings = check_notebook(data, path, rules, device_expression) if is_notebook(path) \
            else check_module(parse(data), path, rules, device_expression=device_expression)
    except SourceError as error:
        cell = error.cell if isinstance(error, CellError) else None
        return FileResult(path, error=FileError(path, error.message, error.line, error.column, cell))
    return FileResult(path, findings)


class _Jobs(collections.abc.Sequence):
    """The jobs of ``analyse``, made as they are taken. The seeds of a project are read when its first
    file is taken, and the project is forgotten then; a module its reading parsed waits in ``parsed``
    for its job (in process), so that only one project's trees live at a time and each is freed once
    its file is checked, instead of every project's living to the end of the run."""

    def __init__(self, pending: list, projects: ProjectSet) -> None:
        self.pending, self.projects = pending, projects
        self.seeds: dict[str, Seeds] = {}
        self.parsed: dict = {}
        self.read: set = set()  # the roots whose seeds are read

    def __len__(self) -> int:
        return len(self.pending)

    def __getitem__(self, index):  # type: ignore[override]
        _, path, data, _ = self.pending[index]
        root = self.projects.root_of(path)
        if root is not None and root not in self.read:
            self.read.add(root)
            group = [other for _, other, _, _ in self.pending if self.projects.root_of(other) == root]
            self.seeds.update(self.projects.seeds(group, self.parsed))
            self.projects.release(root)
        known = _same_module(self.parsed.pop(path, None), data)
        return path, data, self.seeds.get(path, NO_SEEDS), known


class _Some(collections.abc.Sequence):
    """The jobs at some indices of a ``_Jobs``, made as they are taken (for ``ordered_map``)."""

    def __init__(self, jobs: _Jobs, indices: list[int]) -> None:
        self.jobs, self.indices = jobs, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index):  # type: ignore[override]
        return self.jobs[self.indices[index]]


def _spread(jobs_list: _Jobs, in_play: list[bool], jobs: int, initargs: tuple) -> Iterator[dict]:
    """The answers of a run over worker processes, in order. A file whose project reading parsed and
    analysed it already in this process (its tree does not travel) is checked here, with that analysis,
    as ``-j 1`` checks it, while the workers check the files outside any project in play; the files of a
    project that its reading did not parse go to the workers after that."""
    alone = [i for i, playing in enumerate(in_play) if not playing]
    answers: dict[int, dict] = {}
    remote = cast(Generator[dict, None, None], ordered_map(analyse, _Some(jobs_list, alone), jobs,
                                                           initializer=_use_rules, initargs=initargs, crashed=_crashed))
    try:
        taken = zip(alone, remote)
        for index, answer in taken:  # the workers start on the first ones meanwhile
            answers[index] = answer
            break
        _use_rules(*initargs)
        later = []
        for index in (i for i, playing in enumerate(in_play) if playing):
            job = jobs_list[index]
            if job[3] is None:  # not parsed by its project's reading: a worker checks it
                later.append(index)
            else:
                answers[index] = analyse(job)
        for index, answer in taken:
            answers[index] = answer
    finally:
        remote.close()
    for index, answer in zip(later, ordered_map(analyse, _Some(jobs_list, later), jobs, initializer=_use_rules,
                                                initargs=initargs, crashed=_crashed)):
        answers[index] = answer
    for index in range(len(in_play)):
        yield answers[index]


# -- the whole run --


def check_targets(targets: Sequence[Target], rules: Sequence[Rule], jobs: int, cache: Optional[Cache],
                  quiet: bool = True, device_expression: Optional[str] = None) -> list[FileResult]:
    """One result per file read (files skipped by the torch pre-filter have none), in target order."""
    with fewer_collections():
        return _check_targets(targets, rules, jobs, cache, quiet, device_expression)


def _check_targets(targets: Sequence[Target], rules: Sequence[Rule], jobs: int, cache: Optional[Cache],
                   quiet: bool, device_expression: Optional[str]) -> list[FileResult]:
    slots: list[Optional[FileResult]] = []
    pending: list[tuple[int, str, bytes, Optional[str]]] = []  # slot, path, bytes, cache key
    read = [(target, *(read_target(target.path) if target.error is None
                       else (None, FileError(target.path, target.error)))) for target in targets]
    # (only files that could be read: the project must not open a FIFO or a device)
    projects = ProjectSet([target.path for target, data, _ in read if data is not None])
    # the project around each file, from its import lines (no parse): hashed for the cache keys only
    digests = projects.digests() if cache is not None else dict.fromkeys(projects.in_play(), b"in play")
    for target, data, error in read:
        if data is None:
            slots.append(FileResult(target.path, error=error))
            continue
        if not target.named and not mentions_torch(data) and not digests.get(target.path):
            continue  # (a project file in play is read even without torch: others hand it tensors)
        # a file's findings depend on the project around it: a change in model.py re-checks main.py
        key = cache.key(data + digests.get(target.path, b""), "ipynb" if is_notebook(target.path) else "py") \
            if cache is not None else None
        answer = cache.get(key) if cache is not None and key is not None else None
        if answer is not None and _well_formed(answer):
            slots.append(_result(target.path, answer))
            continue
        slots.append(None)
        pending.append((len(slots) - 1, target.path, data, key))
    progress = Progress.for_terminal(len(pending), "cpu2gpu check", quiet)
    codes = [rule.code for rule in rules]
    explicit = [rule.code for rule in rules if rule.selected_explicitly]
    in_process = workers_for(jobs, len(pending)) == 1
    jobs_list = _Jobs(pending, projects)
    del projects
    initargs = (codes, explicit, device_expression)
    if in_process:
        answers = ordered_map(analyse, jobs_list, jobs, initializer=_use_rules, initargs=initargs, crashed=_crashed)
    else:
        answers = _spread(jobs_list, [bool(digests.get(path)) for _, path, _, _ in pending], jobs, initargs)
    try:
        for (slot, path, _, key), answer in zip(pending, answers):
            if answer.pop("crashed", False):
                key = None
            if key is not None and cache is not None:
                cache.put(key, answer)
            slots[slot] = _result(path, answer)
            progress.advance()
    finally:
        progress.close()
    return [result for result in slots if result is not None]
