"""The language server: ``cpu2gpu server`` (stdio), built on pygls (``pip install 'cpu2gpu[lsp]'``).

What it does:

- Diagnostics for every open Python file, Jupyter notebook (LSP 3.17 notebook documents: one set
  of diagnostics per code cell, the cells checked as one program) and ``.ipynb`` file opened as
  text (the findings placed on the JSON strings that hold the code). They are computed after the
  user stops typing for ``DEBOUNCE_S`` seconds (didOpen, didChange, didSave), each document in a
  worker process of its own (``workers.py``, ``diagnose.py``), so that a big file holds up neither
  the protocol nor the other documents; a newer change cancels an analysis that is waiting or
  running (its process is killed). A save re-checks every open document: the project around a file
  may have changed.
- Each finding reads the settings of the file's pyproject.toml (``[tool.cpu2gpu]``) and the project
  around it (``project/projectset.py``), from the disk, with the editor's texts of the open files.
- Code actions: each fix as a ``quickfix`` (that one finding's fix, and the device setup it needs;
  the safe ones preferred, the unsafe ones titled "(unsafe)"), and ``source.fixAll.cpu2gpu``: every
  fix that ``cpu2gpu rewrite`` applies (the safe ones, unless ``unsafe-fixes = true``).
  A ``.ipynb`` opened as text gets the fix-all action only.
- The protocol keeps answering (``framing.py``, ``protocol.py``): a broken frame gets a parse error
  and the next frame is read; a request whose params do not fit gets InvalidParams, one after
  ``shutdown`` InvalidRequest; ``exit`` exits 0 after ``shutdown``, else 1; stdin closed ends the
  server (and its workers) at once, in the middle of an analysis too.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import sys
import threading
from typing import Optional, Sequence

from lsprotocol import types as lsp
from pygls.io_ import StdinAsyncReader, StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from .. import __version__
from ..sources.syntax import python_lines
from .diagnose import IPYNB_TEXT, NOTEBOOK, PYTHON, Outcome, Snapshot, compute, failed, fixes
from .documents import file_bytes
from .protocol import Cpu2gpuProtocol, serve
from .workers import JobFailed, WorkerDied, Workers

logger = logging.getLogger(__name__)

FIX_ALL_KIND = "source.fixAll.cpu2gpu"
DEBOUNCE_S = float(os.environ.get("CPU2GPU_LSP_DEBOUNCE", "0.3"))
_WAIT_FOR_ANALYSIS_S = 30.0  # a code action asked while the document is analysed waits this long at most


class Cpu2gpuServer(LanguageServer):
    def __init__(self, debounce: float = DEBOUNCE_S) -> None:
        super().__init__(
            "cpu2gpu", __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
            notebook_document_sync=lsp.NotebookDocumentSyncOptions(
                notebook_selector=[lsp.NotebookDocumentFilterWithCells(
                    cells=[lsp.NotebookCellLanguage(language="python")], notebook="*")],
                save=True),
            protocol_cls=Cpu2gpuProtocol)
        self.debounce = debounce
        self.workers = Workers(preload=["cpu2gpu.lsp.diagnose"])
        self.generation: dict[str, int] = {}
        self.pending: dict[str, asyncio.Task] = {}
        self.outcomes: dict[str, Outcome] = {}

    @property
    def shut_down(self) -> bool:
        return isinstance(self.protocol, Cpu2gpuProtocol) and self.protocol.shut_down

    def serve_stdio(self) -> int:
        """Serve over stdin and stdout until ``exit`` or the end of stdin; the exit status: 0 after
        ``shutdown``, else 1 (as the LSP asks of ``exit``). The analyses under way are killed."""
        assert isinstance(self.protocol, Cpu2gpuProtocol)
        self._stop_event = threading.Event()  # (pygls's shutdown() sets it)
        self.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
        status = None
        try:
            self.workers.prepare()
            asyncio.run(serve(StdinAsyncReader(sys.stdin.buffer, self.thread_pool), self.protocol, self._stop_event))
        except SystemExit as exit:  # pygls's ``exit`` handler, with the status the LSP asks for
            status = exit.code if isinstance(exit.code, int) else 1
        except BrokenPipeError:
            logger.error("the client has gone (stdout is closed)")
        finally:
            self.workers.close()
            self.shutdown()
        return (0 if self.shut_down else 1) if status is None else status

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

    # -- analysis: debounced, in a worker process, the newest change wins --------------

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
        # a newer change cancels this task, and with it the worker's analysis (schedule, forget)
        try:
            outcome = await self.workers.run(compute, snapshot, affinity=key)
        except (WorkerDied, JobFailed) as error:
            outcome = failed(snapshot, (str(error).strip().splitlines() or [type(error).__name__])[-1])
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

    @server.feature(lsp.INITIALIZED)
    def initialized(ls: Cpu2gpuServer, params: lsp.InitializedParams) -> None:
        ls.workers.warm()  # the first worker starts (and imports the analysis) before the first document

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
        if outcome is None or not outcome.analysed:
            return None
        only = params.context.only
        wants_fixes = not only or any(lsp.CodeActionKind.QuickFix.value.startswith(kind) for kind in only)
        wants_all = not only or any(FIX_ALL_KIND.startswith(kind) for kind in only)
        wanted = []
        if wants_fixes:
            uri = params.text_document.uri
            for diagnostic, number in zip(outcome.diagnostics.get(uri, []), outcome.numbers.get(uri, [])):
                if number is not None and _overlaps(diagnostic.range, params.range) \
                        and outcome.findings[number].safety is not None:
                    wanted.append((number, diagnostic))
        if not wanted and not wants_all:
            return None
        try:  # on the worker that analysed the document, where it can (its report is kept there)
            texts, all_texts = await ls.workers.run(fixes, outcome.snapshot, [number for number, _ in wanted], wants_all,
                                                    affinity=outcome.snapshot.key)
        except (WorkerDied, JobFailed) as error:
            logger.error("no fixes for %s: %s", params.text_document.uri, error)
            return None
        actions = []
        for (number, diagnostic), fixed in zip(wanted, texts):
            edit = ls.workspace_edit(outcome.snapshot, fixed) if fixed is not None else None
            if edit is None:
                continue
            item = outcome.findings[number]
            safe = item.safety == "safe"
            what = item.description or item.name
            actions.append(lsp.CodeAction(
                title=f"Fix {item.code}: {what}" + ("" if safe else " (unsafe)"),
                kind=lsp.CodeActionKind.QuickFix, diagnostics=[diagnostic], is_preferred=safe, edit=edit))
        if all_texts is not None:
            edit = ls.workspace_edit(outcome.snapshot, all_texts)
            if edit is not None:
                unsafe = outcome.unsafe_fixes
                actions.append(lsp.CodeAction(
                    title="cpu2gpu: fix all" + (" (safe and unsafe fixes)" if unsafe else " (safe fixes)"),
                    kind=FIX_ALL_KIND, edit=edit))
        return actions

    return server


def _overlaps(a: lsp.Range, b: lsp.Range) -> bool:
    def key(position: lsp.Position) -> tuple[int, int]:
        return position.line, position.character

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def main() -> None:
    sys.exit(build_server().serve_stdio())
