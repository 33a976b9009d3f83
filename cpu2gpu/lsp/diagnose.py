"""What a worker process (``workers.py``) computes for the server: the diagnostics of a snapshot of
the editor's documents, and on request the texts its fixes make.

Everything that crosses to the server is plain data (lsprotocol types, dataclasses): the report
itself stays here, the last few of them kept, so that the code actions asked of the worker that
analysed a document use its report instead of analysing the document again.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from lsprotocol import types as lsp
from pygls.workspace.position_codec import PositionCodec

from ..analysis.torchfloor import StyleError
from ..sources.config import ConfigError, Settings, apply_device_style, load_settings
from ..sources.syntax import python_lines
from .documents import Report, analyse, analyse_ipynb, file_bytes, project_seeds_with

SOURCE = "cpu2gpu"
PYTHON, NOTEBOOK, IPYNB_TEXT = "python", "notebook", "ipynb"


@dataclass
class Snapshot:
    """What one analysis reads, taken on the event loop (the workspace is not thread-safe)."""

    key: str  # the text document's URI, or the notebook's
    kind: str
    path: str
    uris: list[str]  # the documents the texts are in: one, or the code cells'
    versions: list[Optional[int]]
    texts: list[str]
    open_files: dict = field(default_factory=dict)  # other open Python files: path -> bytes
    encoding: str = lsp.PositionEncodingKind.Utf16  # of the client's positions


@dataclass
class Fixable:
    """What a code action says of one finding."""

    code: str
    name: str
    safety: Optional[str]  # "safe", "unsafe", or None: no fix
    description: str


@dataclass
class Outcome:
    snapshot: Snapshot
    analysed: bool = False  # a report was made (its findings and fixes can be asked for)
    problem: str = ""  # the settings cannot be read, or the analysis failed
    unsafe_fixes: bool = False  # the setting: what "fix all" applies
    diagnostics: dict = field(default_factory=dict)  # uri -> [Diagnostic]
    findings: list[Fixable] = field(default_factory=list)  # in the report's order
    numbers: dict = field(default_factory=dict)  # uri -> [the index in findings of each diagnostic, or None]


_KEPT = 4
_REPORTS: "OrderedDict[str, tuple[Snapshot, Settings, Report]]" = OrderedDict()  # key -> its last report


def compute(snapshot: Snapshot) -> Outcome:
    """The analysis of one snapshot; never raises."""
    outcome = Outcome(snapshot)
    try:
        settings = _settings(snapshot)
    except (ConfigError, StyleError) as error:
        outcome.problem = str(error)
        outcome.diagnostics[snapshot.uris[0]] = [_problem(f"cpu2gpu: not checked: {error}", lsp.DiagnosticSeverity.Error)] \
            if snapshot.uris else []
        return outcome
    try:
        report = _report(snapshot, settings)
    except Exception as error:  # a bug in the analysis must not take the server down
        return failed(snapshot, f"{type(error).__name__}: {error}")
    _keep(snapshot, settings, report)
    outcome.analysed = True
    outcome.unsafe_fixes = report.settings.unsafe_fixes
    outcome.findings = [Fixable(item.finding.code, item.finding.name, item.fix_safety, item.fix_description)
                        for item in report.located]
    _diagnose(outcome, report)
    return outcome


def failed(snapshot: Snapshot, problem: str) -> Outcome:
    """The outcome of an analysis that did not finish: one error on the document."""
    outcome = Outcome(snapshot, problem=problem)
    if snapshot.uris:
        outcome.diagnostics[snapshot.uris[0]] = [_problem(
            f"cpu2gpu: internal error, file not checked ({problem})", lsp.DiagnosticSeverity.Error)]
    return outcome


def fixes(snapshot: Snapshot, numbers: Sequence[int], fix_all: bool
          ) -> tuple[list[Optional[list[str]]], Optional[list[str]]]:
    """The texts of the snapshot's documents after the fix of each finding in ``numbers``, and after
    every fix (when ``fix_all``); None where a fix does not apply."""
    settings = _settings(snapshot)
    kept = _REPORTS.get(snapshot.key)
    if kept is not None and kept[0] == snapshot and kept[1] == settings:
        report = kept[2]
    else:  # another worker analysed it: analyse it again
        report = _report(snapshot, settings)
        _keep(snapshot, settings, report)
    return [report.fixed(number) for number in numbers], report.fixed_all() if fix_all else None


def _settings(snapshot: Snapshot) -> Settings:
    start = Path(snapshot.path) if os.path.isabs(snapshot.path) else Path.cwd()
    # the configured device style: the fixes offered are what `rewrite` would write
    return apply_device_style(load_settings(start), None, start)


def _keep(snapshot: Snapshot, settings: Settings, report: Report) -> None:
    _REPORTS[snapshot.key] = (snapshot, settings, report)
    _REPORTS.move_to_end(snapshot.key)
    while len(_REPORTS) > _KEPT:
        _REPORTS.popitem(last=False)


def _report(snapshot: Snapshot, settings: Settings) -> Report:
    if snapshot.kind == NOTEBOOK:
        return analyse(snapshot.path, snapshot.texts, settings, notebook=True)
    if snapshot.kind == IPYNB_TEXT:
        return analyse_ipynb(snapshot.path, snapshot.texts[0], settings)
    text = snapshot.texts[0]
    seeds, known = project_seeds_with(snapshot.path, file_bytes(text), snapshot.open_files) \
        if os.path.isabs(snapshot.path) else (None, None)
    if seeds is None:
        return analyse(snapshot.path, [text], settings)
    return analyse(snapshot.path, [text], settings, seeds=seeds, known=known)


def _document_of(snapshot: Snapshot, finding) -> Optional[int]:
    """The index (in snapshot.uris) of the document a finding is in."""
    if snapshot.kind == NOTEBOOK:
        return finding.cell - 1 if finding.cell is not None and finding.cell - 1 < len(snapshot.uris) else None
    return 0


def _diagnose(outcome: Outcome, report: Report) -> None:
    snapshot = outcome.snapshot
    codec = PositionCodec(snapshot.encoding)
    lines = [python_lines(text) for text in snapshot.texts]
    for uri in snapshot.uris:
        outcome.diagnostics[uri] = []
        outcome.numbers[uri] = []
    error = report.error
    if error is not None:
        index = (getattr(error, "cell", None) or 1) - 1 if snapshot.kind == NOTEBOOK else 0
        if index < len(snapshot.uris):
            line = max((error.line or 1) - 1, 0)
            column = max((error.column or 1) - 1, 0)
            start = codec.position_to_client_units(lines[index], lsp.Position(line, column))
            outcome.diagnostics[snapshot.uris[index]].append(lsp.Diagnostic(
                range=lsp.Range(start, start), message=f"cpu2gpu: not analysed: {error.message}",
                severity=lsp.DiagnosticSeverity.Warning, source=SOURCE))
            outcome.numbers[snapshot.uris[index]].append(None)
        return
    for number, item in enumerate(report.located):
        finding = item.finding
        index = _document_of(snapshot, finding)
        if index is None:
            continue
        position = report.position(number)
        if position is None:
            continue
        line, column, end_line, end_column = position
        start = codec.position_to_client_units(lines[index], lsp.Position(line - 1, column - 1))
        end = codec.position_to_client_units(lines[index], lsp.Position(end_line - 1, end_column - 1))
        safety = item.fix_safety
        message = finding.message + ({"safe": " (fix available)", "unsafe": " (unsafe fix available)"}.get(safety or "", ""))
        diagnostic = lsp.Diagnostic(range=lsp.Range(start, end), message=message,
                                    severity=lsp.DiagnosticSeverity.Warning, code=finding.code, source=SOURCE,
                                    data={"name": finding.name, "fix": safety})
        outcome.diagnostics[snapshot.uris[index]].append(diagnostic)
        outcome.numbers[snapshot.uris[index]].append(number)


def _problem(message: str, severity: lsp.DiagnosticSeverity) -> lsp.Diagnostic:
    position = lsp.Position(0, 0)
    return lsp.Diagnostic(range=lsp.Range(position, position), message=message, severity=severity, source=SOURCE)


__all__ = ["IPYNB_TEXT", "NOTEBOOK", "PYTHON", "SOURCE", "Fixable", "Outcome", "Snapshot", "compute", "failed", "fixes"]
