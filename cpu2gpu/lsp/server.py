"""The language server: ``cpu2gpu server`` (stdio), built on pygls (``pip install 'cpu2gpu[lsp]'``).

What it does:

- Diagnostics for every open Python file, Jupyter notebook (LSP 3.17 notebook documents: one set
  of diagnostics per code cell, the cells checked as one program) and ``.ipynb`` file opened as
  text (the findings placed on the JSON strings that hold the code). They are computed after the
  user stops typing for ``DEBOUNCE_S`` seconds (didOpen, didChange, didSave), on one worker thread;
  a newer change supersedes an analysis that is waiting or running (its result is dropped). A save
  re-checks every open document: the project around a file may have changed.
- Each finding reads the settings of the file's pyproject.toml (``[tool.cpu2gpu]``) and the project
  around it (``project/projectset.py``), from the disk, with the editor's texts of the open files.
- Code actions: each fix as a ``quickfix`` (that one finding's fix, and the device setup it needs;
  the safe ones preferred, the unsafe ones titled "(unsafe)"), and ``source.fixAll.cpu2gpu``: every
  fix that ``cpu2gpu rewrite`` applies (the safe ones, unless ``unsafe-fixes = true``).
  A ``.ipynb`` opened as text gets the fix-all action only.
"""

from __future__ import annotations

import asyncio
import bisect
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace.position_codec import PositionCodec

from .. import __version__
from ..sources.config import ConfigError, Settings, apply_device_style, load_settings
from ..analysis.torchfloor import StyleError
from ..sources.syntax import python_lines
from .documents import Report, analyse, analyse_ipynb, file_bytes, project_seeds_with

SOURCE = "cpu2gpu"
FIX_ALL_KIND = "source.fixAll.cpu2gpu"
DEBOUNCE_S = float(os.environ.get("CPU2GPU_LSP_DEBOUNCE", "0.3"))
_WAIT_FOR_ANALYSIS_S = 30.0  # a code action asked while the document is analysed waits this long at most

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
class Outcome:
    snapshot: Snapshot
    report: Optional[Report] = None
    problem: str = ""  # the settings cannot be read
    diagnostics: dict = field(default_factory=dict)  # uri -> [Diagnostic]
    owners: dict = field(default_factory=dict)  # id(diagnostic) -> index in report.located


class Cpu2gpuServer(LanguageServer):
    def __init__(self, debounce: float = DEBOUNCE_S) -> None:
        super().__init__(
            "cpu2gpu", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
            notebook_document_sync=lsp.NotebookDocumentSyncOptions(
                notebook_selector=[lsp.NotebookDocumentFilterWithCells(
                    cells=[lsp.NotebookCellLanguage(language="python")], notebook="*")],
                save=True))
        self.debounce = debounce
        # one worker: the engine keeps a small cache of recent sources that is not thread-safe
        self.analysis_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpu2gpu-analysis")
        self.generation: dict[str, int] = {}
        self.pending: dict[str, asyncio.Task] = {}
        self.outcomes: dict[str, Outcome] = {}

    # -- which documents ---------------------------------------------------------------

    def kind_of(self, uri: str, language_id: Optional[str]) -> Optional[str]:
        path = to_fs_path(uri) or uri
        if path.endswith(".ipynb"):
            return IPYNB_TEXT
        if path.endswith((".py", ".pyi")) or language_id == "python":
            return PYTHON
        return None

    def snapshot(self, key: str) -> Optional[Snapshot]:
        notebook = self.workspace.get_notebook_document(notebook_uri=key)
        if notebook is not None:
            cells = [cell.document for cell in notebook.cells if cell.kind == lsp.NotebookCellKind.Code]
            documents = [self.workspace.text_documents.get(uri) for uri in cells]
            documents = [d for d in documents if d is not None and (d.language_id or "python") == "python"]
            return Snapshot(key, NOTEBOOK, to_fs_path(key) or key, [d.uri for d in documents],
                            [d.version for d in documents], [d.source for d in documents],
                            encoding=self.encoding())
        document = self.workspace.text_documents.get(key)
        if document is None:
            return None
        kind = self.kind_of(key, document.language_id)
        if kind is None:
            return None
        path = to_fs_path(key) or key
        others = {}
        if kind == PYTHON:
            for uri, other in self.workspace.text_documents.items():
                other_path = to_fs_path(uri)
                if uri != key and other_path and other_path.endswith(".py"):
                    others[other_path] = file_bytes(other.source)
        return Snapshot(key, kind, path, [key], [document.version], [document.source], others, self.encoding())

    def encoding(self) -> str:
        return self.workspace.position_encoding or lsp.PositionEncodingKind.Utf16

    def keys(self) -> list[str]:
        cells = {cell.document for nb in self.workspace.notebook_documents.values() for cell in nb.cells}
        return [*self.workspace.notebook_documents, *(uri for uri in self.workspace.text_documents if uri not in cells)]

    def key_of(self, uri: str) -> str:
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return notebook.uri if notebook is not None else uri

    # -- analysis: debounced, on the worker, the newest change wins ---------------------

    def schedule(self, key: str, delay: Optional[float] = None) -> None:
        self.generation[key] = generation = self.generation.get(key, 0) + 1
        old = self.pending.pop(key, None)
        if old is not None:
            old.cancel()
        self.pending[key] = asyncio.get_running_loop().create_task(
            self._analyse(key, generation, self.debounce if delay is None else delay))

    async def _analyse(self, key: str, generation: int, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        snapshot = self.snapshot(key)
        if snapshot is None:
            return
        outcome = await asyncio.get_running_loop().run_in_executor(self.analysis_pool, compute, snapshot)
        if self.generation.get(key) != generation:
            return  # superseded while it ran
        previous = self.outcomes.get(key)
        self.outcomes[key] = outcome
        uris = set(outcome.snapshot.uris) | (set(previous.snapshot.uris) if previous is not None else set())
        for uri, version in zip(outcome.snapshot.uris, outcome.snapshot.versions):
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
                uri=uri, version=version, diagnostics=outcome.diagnostics.get(uri, [])))
        for uri in uris - set(outcome.snapshot.uris):  # a cell deleted since
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def forget(self, key: str, uris: Sequence[str]) -> None:
        self.generation[key] = self.generation.get(key, 0) + 1
        task = self.pending.pop(key, None)
        if task is not None:
            task.cancel()
        outcome = self.outcomes.pop(key, None)
        for uri in {*uris, *(outcome.snapshot.uris if outcome is not None else ())}:
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    async def current(self, uri: str) -> Optional[Outcome]:
        """The analysis of the document as it is now (waiting for one under way), or None."""
        key = self.key_of(uri)
        task = self.pending.get(key)
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), _WAIT_FOR_ANALYSIS_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                return None
        outcome = self.outcomes.get(key)
        now = self.snapshot(key)
        if outcome is None or now is None or now.texts != outcome.snapshot.texts:
            return None
        return outcome

    # -- code actions ------------------------------------------------------------------

    def workspace_edit(self, snapshot: Snapshot, texts: Sequence[str]) -> Optional[lsp.WorkspaceEdit]:
        codec = self.workspace.position_codec
        edits = []
        for uri, version, old, new in zip(snapshot.uris, snapshot.versions, snapshot.texts, texts):
            if old != new:
                edits.append((uri, version, text_edit(codec, old, new)))
        if not edits:
            return None
        capabilities = self.client_capabilities.workspace
        versioned = bool(capabilities and capabilities.workspace_edit and capabilities.workspace_edit.document_changes)
        if versioned:
            return lsp.WorkspaceEdit(document_changes=[
                lsp.TextDocumentEdit(lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), [edit])
                for uri, version, edit in edits])
        return lsp.WorkspaceEdit(changes={uri: [edit] for uri, _, edit in edits})


def compute(snapshot: Snapshot) -> Outcome:
    """The analysis of one snapshot, on the worker thread; never raises."""
    outcome = Outcome(snapshot)
    start = Path(snapshot.path) if os.path.isabs(snapshot.path) else Path.cwd()
    try:
        # the configured device style: the fixes offered are what `rewrite` would write
        settings = apply_device_style(load_settings(start), None, start)
    except (ConfigError, StyleError) as error:
        outcome.problem = str(error)
        outcome.diagnostics[snapshot.uris[0]] = [_problem(f"cpu2gpu: not checked: {error}", 0, 0, lsp.DiagnosticSeverity.Error)] \
            if snapshot.uris else []
        return outcome
    try:
        report = outcome.report = _report(snapshot, settings)
    except Exception as error:  # a bug in the analysis must not take the server down
        outcome.problem = f"{type(error).__name__}: {error}"
        if snapshot.uris:
            outcome.diagnostics[snapshot.uris[0]] = [_problem(
                f"cpu2gpu: internal error, file not checked ({outcome.problem})", 0, 0, lsp.DiagnosticSeverity.Error)]
        return outcome
    _diagnose(outcome, report)
    return outcome


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


def _document_of(snapshot: Snapshot, report: Report, finding) -> Optional[int]:
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
        return
    for number, item in enumerate(report.located):
        finding = item.finding
        index = _document_of(snapshot, report, finding)
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
        outcome.owners[id(diagnostic)] = number


def _problem(message: str, line: int, column: int, severity: lsp.DiagnosticSeverity) -> lsp.Diagnostic:
    position = lsp.Position(line, column)
    return lsp.Diagnostic(range=lsp.Range(position, position), message=message, severity=severity, source=SOURCE)


def text_edit(codec, old: str, new: str) -> lsp.TextEdit:
    """One edit that turns ``old`` into ``new``: the whole lines between their common start and end."""
    prefix = 0
    limit = min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    lines = python_lines(old, keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    # whole lines: from the start of the line of the first change to the end of the line of the last
    first = bisect.bisect_right(starts, prefix) - 1
    start = starts[min(first, len(lines))]
    end_offset = len(old) - suffix
    last = bisect.bisect_left(starts, end_offset)
    end = starts[min(last, len(lines))]
    replacement = new[start:len(new) - (len(old) - end)]
    return lsp.TextEdit(range=lsp.Range(_position(codec, lines, starts, start), _position(codec, lines, starts, end)),
                        new_text=replacement)


def _position(codec, lines: list[str], starts: list[int], offset: int) -> lsp.Position:
    index = bisect.bisect_right(starts, offset) - 1
    if index >= len(lines):  # the end of a text that ends with a line break
        if lines and not lines[-1].endswith(("\n", "\r")):
            return codec.position_to_client_units(lines, lsp.Position(len(lines) - 1, len(lines[-1])))
        return lsp.Position(len(lines), 0)
    return codec.position_to_client_units(lines, lsp.Position(index, offset - starts[index]))


# -- the protocol --------------------------------------------------------------------------

def build_server(debounce: float = DEBOUNCE_S) -> Cpu2gpuServer:
    server = Cpu2gpuServer(debounce)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: Cpu2gpuServer, params: lsp.DidOpenTextDocumentParams) -> None:
        if ls.workspace.get_notebook_document(cell_uri=params.text_document.uri) is None:
            ls.schedule(params.text_document.uri, 0)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: Cpu2gpuServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.schedule(ls.key_of(params.text_document.uri))

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: Cpu2gpuServer, params: lsp.DidSaveTextDocumentParams) -> None:
        for key in ls.keys():  # the settings or the project around the others may have changed
            ls.schedule(key)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: Cpu2gpuServer, params: lsp.DidCloseTextDocumentParams) -> None:
        if params.text_document.uri in ls.outcomes or params.text_document.uri in ls.pending:
            ls.forget(params.text_document.uri, [params.text_document.uri])

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: Cpu2gpuServer, params: lsp.DidOpenNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri, 0)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: Cpu2gpuServer, params: lsp.DidChangeNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: Cpu2gpuServer, params: lsp.DidSaveNotebookDocumentParams) -> None:
        for key in ls.keys():
            ls.schedule(key)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: Cpu2gpuServer, params: lsp.DidCloseNotebookDocumentParams) -> None:
        ls.forget(params.notebook_document.uri, [cell.uri for cell in params.cell_text_documents])

    @server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(
        code_action_kinds=[lsp.CodeActionKind.QuickFix, FIX_ALL_KIND]))
    async def code_action(ls: Cpu2gpuServer, params: lsp.CodeActionParams) -> Optional[list[lsp.CodeAction]]:
        outcome = await ls.current(params.text_document.uri)
        if outcome is None or outcome.report is None:
            return None
        only = params.context.only
        wants_fixes = not only or any(lsp.CodeActionKind.QuickFix.value.startswith(kind) for kind in only)
        wants_all = not only or any(FIX_ALL_KIND.startswith(kind) for kind in only)
        wanted = []
        if wants_fixes:
            for diagnostic in outcome.diagnostics.get(params.text_document.uri, []):
                number = outcome.owners.get(id(diagnostic))
                if number is not None and _overlaps(diagnostic.range, params.range) \
                        and outcome.report.located[number].fix_safety is not None:
                    wanted.append((number, diagnostic))
        if not wanted and not wants_all:
            return None
        fixes = await asyncio.get_running_loop().run_in_executor(
            ls.analysis_pool, _fixed_texts, outcome.report, [number for number, _ in wanted], wants_all)
        actions = []
        for (number, diagnostic), texts in zip(wanted, fixes[0]):
            edit = ls.workspace_edit(outcome.snapshot, texts) if texts is not None else None
            if edit is None:
                continue
            item = outcome.report.located[number]
            safe = item.fix_safety == "safe"
            what = item.fix_description or item.finding.name
            actions.append(lsp.CodeAction(
                title=f"Fix {item.finding.code}: {what}" + ("" if safe else " (unsafe)"),
                kind=lsp.CodeActionKind.QuickFix, diagnostics=[diagnostic], is_preferred=safe, edit=edit))
        if fixes[1] is not None:
            edit = ls.workspace_edit(outcome.snapshot, fixes[1])
            if edit is not None:
                unsafe = outcome.report.settings.unsafe_fixes
                actions.append(lsp.CodeAction(
                    title="cpu2gpu: fix all" + (" (safe and unsafe fixes)" if unsafe else " (safe fixes)"),
                    kind=FIX_ALL_KIND, edit=edit))
        return actions

    return server


def _fixed_texts(report: Report, numbers: Sequence[int], fix_all: bool):
    return [report.fixed(number) for number in numbers], report.fixed_all() if fix_all else None


def _overlaps(a: lsp.Range, b: lsp.Range) -> bool:
    def key(position: lsp.Position) -> tuple[int, int]:
        return position.line, position.character

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def main() -> None:
    build_server().start_io()
