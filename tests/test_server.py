"""`cpu2gpu server`: a real LSP client (pytest-lsp) talks to the server over stdio.

Open a document, receive its diagnostics, ask for the code actions, apply one, send the change,
and see the diagnostics go. Waits are for notifications, with a generous timeout; nothing is timed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402
from pygls.protocol import default_converter  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features  # noqa: E402

WAIT_S = float(os.environ.get("CPU2GPU_TEST_LSP_WAIT_S", "120"))  # the machines that run the tests can be slow and busy: a generous bound, not a measurement

SCRIPT = """import torch
import torch.nn as nn

model = nn.Linear(4, 2)
x = torch.randn(8, 4)
out = model(x)
print(out.detach().numpy())
"""

UNSAFE = """import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.ones(4)

    def forward(self, x):
        return x * self.scale
"""


def _recording_client() -> LanguageClient:
    """pytest-lsp's client, which also keeps every publishDiagnostics in ``published``, in order."""
    client = LanguageClient(converter_factory=default_converter)
    client.published = []

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        client.diagnostics[params.uri] = params.diagnostics
        client.published.append(params)

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: publish})
    return client


@pytest_lsp.fixture(config=ClientServerConfig(
    server_command=[sys.executable, "-m", "cpu2gpu", "server", "--debounce", "0.05"],
    client_factory=_recording_client))
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), root_uri=root.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="workspace")]))
    yield
    await lsp_client.shutdown_session()


# -- a small client-side toolkit --------------------------------------------------------

class Documents:
    """The client's copies of its open documents, and the versions it sent."""

    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.texts: dict[str, str] = {}
        self.versions: dict[str, int] = {}

    def open(self, path: Path, text: str, language: str = "python") -> str:
        uri = path.as_uri()
        self.texts[uri], self.versions[uri] = text, 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)))
        return uri

    def change(self, uri: str, text: str) -> None:
        self.texts[uri] = text
        self.versions[uri] += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            [types.TextDocumentContentChangeWholeDocument(text=text)]))

    def apply(self, edit: types.WorkspaceEdit) -> None:
        """Apply a workspace edit as an editor does, and tell the server (didChange)."""
        changes = [(change.text_document.uri, change.text_document.version, change.edits)
                   for change in edit.document_changes or []]
        changes += [(uri, None, edits) for uri, edits in (edit.changes or {}).items()]
        assert changes
        for uri, version, edits in changes:
            if version is not None:
                assert version == self.versions[uri], "an edit for another version of the document"
            self.change(uri, apply_edits(self.texts[uri], edits))


def apply_edits(text: str, edits) -> str:
    lines = text.splitlines(keepends=True)

    def offset(position: types.Position) -> int:
        # the test texts are ASCII: UTF-16 units are characters
        return sum(len(line) for line in lines[:position.line]) + position.character

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        start, end = offset(edit.range.start), offset(edit.range.end)
        text = text[:start] + edit.new_text + text[end:]
    return text


async def diagnostics(client: LanguageClient, uri: str, version: Optional[int] = None,
                      after: int = 0) -> list[types.Diagnostic]:
    """The latest diagnostics the server published for ``uri`` (for that version of it, when given),
    among the publications from number ``after`` on; waits for them."""

    async def wait() -> list[types.Diagnostic]:
        while True:
            for published in reversed(client.published[after:]):
                if published.uri == uri and (version is None or published.version == version):
                    return list(published.diagnostics)
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(wait(), WAIT_S)


async def actions(client: LanguageClient, uri: str, where: types.Range, diags, only=None) -> list[types.CodeAction]:
    result = await asyncio.wait_for(client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=where,
        context=types.CodeActionContext(diagnostics=diags, only=only))), WAIT_S)
    return list(result or [])


def codes(diags) -> list[str]:
    return sorted(d.code for d in diags)


# -- Python files ---------------------------------------------------------------------------

@pytest.mark.asyncio
async def test_diagnostics_quick_fix_and_fix_all(client: LanguageClient, tmp_path):
    docs = Documents(client)
    uri = docs.open(tmp_path / "train.py", SCRIPT)  # not on disk: the editor's text is what counts
    diags = await diagnostics(client, uri, 1)
    assert codes(diags) == ["CG101", "CG102", "CG107"]
    numpy = next(d for d in diags if d.code == "CG107")
    assert numpy.source == "cpu2gpu"
    assert numpy.severity == types.DiagnosticSeverity.Warning
    # `numpy` in `print(out.detach().numpy())`, line 7: 0-based line 6, columns as the finding's
    assert (numpy.range.start.line, numpy.range.start.character) == (6, 19)
    assert (numpy.range.end.line, numpy.range.end.character) == (6, 24)

    found = await actions(client, uri, numpy.range, [numpy])
    quick = [a for a in found if a.kind == types.CodeActionKind.QuickFix]
    assert [a.title for a in quick] == ["Fix CG107: numpy-on-device"] or quick[0].title.startswith("Fix CG107")
    assert quick[0].is_preferred and "(unsafe)" not in quick[0].title
    assert quick[0].diagnostics[0].code == "CG107"
    assert any(a.kind == "source.fixAll.cpu2gpu" for a in found)

    docs.apply(quick[0].edit)  # that one fix only
    assert "out.detach().cpu().numpy()" in docs.texts[uri]
    assert "model = nn.Linear(4, 2)\n" in docs.texts[uri]
    diags = await diagnostics(client, uri, docs.versions[uri])
    assert codes(diags) == ["CG101", "CG102"]

    everything = types.Range(types.Position(0, 0), types.Position(0, 0))
    found = await actions(client, uri, everything, [], only=["source.fixAll.cpu2gpu"])
    assert [a.kind for a in found] == ["source.fixAll.cpu2gpu"]
    docs.apply(found[0].edit)
    assert "model = nn.Linear(4, 2).to(device)" in docs.texts[uri]
    assert await diagnostics(client, uri, docs.versions[uri]) == []


@pytest.mark.asyncio
async def test_an_unsafe_fix_is_offered_marked_and_not_preferred(client: LanguageClient, tmp_path):
    docs = Documents(client)
    uri = docs.open(tmp_path / "net.py", UNSAFE)
    diags = await diagnostics(client, uri, 1)
    assert codes(diags) == ["CG105"]
    found = await actions(client, uri, diags[0].range, diags)
    quick = [a for a in found if a.kind == types.CodeActionKind.QuickFix]
    assert len(quick) == 1 and quick[0].title.endswith("(unsafe)") and not quick[0].is_preferred
    # fix-all applies the safe fixes only: none here
    assert not [a for a in found if a.kind == "source.fixAll.cpu2gpu"]
    docs.apply(quick[0].edit)
    assert "register_buffer" in docs.texts[uri]
    assert await diagnostics(client, uri, docs.versions[uri]) == []


@pytest.mark.asyncio
async def test_settings_come_from_the_files_pyproject(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.cpu2gpu]\nignore = ["CG107"]\n')
    docs = Documents(client)
    uri = docs.open(tmp_path / "train.py", SCRIPT)
    assert codes(await diagnostics(client, uri, 1)) == ["CG101", "CG102"]


@pytest.mark.asyncio
async def test_the_fixes_use_the_configured_device_style(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\ndependencies = ["torch>=2.6"]\n[tool.cpu2gpu]\ndevice-style = "accelerator"\n')
    docs = Documents(client)
    uri = docs.open(tmp_path / "train.py", SCRIPT)
    await diagnostics(client, uri, 1)
    everything = types.Range(types.Position(0, 0), types.Position(0, 0))
    found = await actions(client, uri, everything, [], only=["source.fixAll.cpu2gpu"])
    docs.apply(found[0].edit)
    assert "torch.accelerator.current_accelerator() if torch.accelerator.is_available()" in docs.texts[uri]


@pytest.mark.asyncio
async def test_the_ddp_migration_needs_show_where_the_project_asks_for_them(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.cpu2gpu]\ndistributed = "ddp"\n')
    script = (Path(__file__).parent.parent / "fixtures" / "distributed" / "cnn.py").read_text()
    docs = Documents(client)
    uri = docs.open(tmp_path / "train.py", script)
    assert "CG400" in codes(await diagnostics(client, uri, 1))


@pytest.mark.asyncio
async def test_a_broken_pyproject_is_reported_on_the_file(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.cpu2gpu]\nselect = 3\n')
    docs = Documents(client)
    uri = docs.open(tmp_path / "train.py", SCRIPT)
    diags = await diagnostics(client, uri, 1)
    assert len(diags) == 1 and "select must be a list of strings" in diags[0].message
    assert diags[0].severity == types.DiagnosticSeverity.Error


@pytest.mark.asyncio
async def test_the_newest_text_wins(client: LanguageClient, tmp_path):
    docs = Documents(client)
    uri = docs.open(tmp_path / "train.py", SCRIPT)
    for _ in range(5):  # a burst of typing: each change supersedes the one before
        docs.change(uri, SCRIPT.replace("print(out.detach().numpy())\n", ""))
        docs.change(uri, SCRIPT)
    docs.change(uri, SCRIPT.replace("print(out.detach().numpy())\n", ""))
    assert codes(await diagnostics(client, uri, docs.versions[uri])) == ["CG101", "CG102"]


@pytest.mark.asyncio
async def test_a_syntax_error_is_one_diagnostic(client: LanguageClient, tmp_path):
    docs = Documents(client)
    uri = docs.open(tmp_path / "train.py", SCRIPT + "def broken(:\n")
    diags = await diagnostics(client, uri, 1)
    assert len(diags) == 1 and diags[0].message.startswith("cpu2gpu: not analysed:")
    assert diags[0].range.start.line == 7
    docs.change(uri, SCRIPT)
    assert codes(await diagnostics(client, uri, 2)) == ["CG101", "CG102", "CG107"]


MAIN = "import torch\nfrom model import Net\n\nnet = Net()\nprint(net(torch.ones(1, 4)))\n"
STATELESS = "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
WITH_LAYER = ("import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.fc(x)\n")


@pytest.mark.asyncio
async def test_the_project_around_the_file_with_the_editors_texts(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.cpu2gpu]\n")
    (tmp_path / "main.py").write_text(MAIN)
    (tmp_path / "model.py").write_text(STATELESS)
    docs = Documents(client)
    main = docs.open(tmp_path / "main.py", MAIN)
    assert await diagnostics(client, main, 1) == []  # Net has no parameters: nothing to move
    model = docs.open(tmp_path / "model.py", STATELESS)
    await diagnostics(client, model, 1)
    docs.change(model, WITH_LAYER)  # unsaved: the disk still has the stateless Net
    await diagnostics(client, model, 2)
    mark = len(client.published)
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=model)))
    diags = await diagnostics(client, main, 1, after=mark)  # a save re-checks the open files
    assert "CG101" in codes(diags)
    assert any(d.code == "CG101" and "from model.py" in d.message for d in diags)


# -- notebooks ----------------------------------------------------------------------------

CELLS = ["import torch\nmodel = torch.nn.Linear(2, 2)\n", "# a comment\nx = torch.randn(3, 2)\ny = model(x)\n"]


@pytest.mark.asyncio
async def test_notebook_document_cells_are_one_program(client: LanguageClient, tmp_path):
    notebook = (tmp_path / "train.ipynb").as_uri()
    cells = [f"vscode-notebook-cell:{tmp_path / 'train.ipynb'}#cell{i}" for i in range(3)]
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=notebook, notebook_type="jupyter-notebook", version=1, cells=[
            types.NotebookCell(kind=types.NotebookCellKind.Code, document=cells[0]),
            types.NotebookCell(kind=types.NotebookCellKind.Markup, document=cells[1]),
            types.NotebookCell(kind=types.NotebookCellKind.Code, document=cells[2])]),
        cell_text_documents=[
            types.TextDocumentItem(uri=cells[0], language_id="python", version=1, text=CELLS[0]),
            types.TextDocumentItem(uri=cells[1], language_id="markdown", version=1, text="# Title\n"),
            types.TextDocumentItem(uri=cells[2], language_id="python", version=1, text=CELLS[1])]))
    first, second = await diagnostics(client, cells[0], 1), await diagnostics(client, cells[2], 1)
    assert codes(first) == ["CG101"] and first[0].range.start.line == 1
    assert codes(second) == ["CG102"] and second[0].range.start.line == 1  # the line in its cell

    found = await actions(client, cells[2], second[0].range, second)
    quick = [a for a in found if a.kind == types.CodeActionKind.QuickFix]
    assert quick and quick[0].is_preferred
    edits = {change.text_document.uri: change.edits for change in quick[0].edit.document_changes}
    # moving x needs the device, which goes after the import, in the first cell
    assert set(edits) == {cells[0], cells[2]}
    assert "device=device" in apply_edits(CELLS[1], edits[cells[2]])
    assert "device = torch.device(" in apply_edits(CELLS[0], edits[cells[0]])

    fixed = [apply_edits(CELLS[0], edits[cells[0]]), apply_edits(CELLS[1], edits[cells[2]])]
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook, version=2),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
            types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(uri=cell, version=2),
                changes=[types.TextDocumentContentChangeWholeDocument(text=text)])
            for cell, text in zip((cells[0], cells[2]), fixed)]))))
    first, second = await diagnostics(client, cells[0], 2), await diagnostics(client, cells[2], 2)
    assert codes(first) == ["CG101"] and second == []


@pytest.mark.asyncio
async def test_an_ipynb_opened_as_text_has_positions_in_its_json(client: LanguageClient, tmp_path):
    data = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Title\n"]}] + [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": text.splitlines(keepends=True)} for text in CELLS],
        "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    text = json.dumps(data, indent=1) + "\n"
    docs = Documents(client)
    uri = docs.open(tmp_path / "train.ipynb", text, language="json")
    diags = await diagnostics(client, uri, 1)
    assert codes(diags) == ["CG101", "CG102"]
    lines = text.splitlines()
    for diag in diags:
        shown = lines[diag.range.start.line][diag.range.start.character:diag.range.end.character]
        assert shown in ("torch.nn.Linear(2, 2)", "torch.randn(3, 2)")
    found = await actions(client, uri, diags[0].range, diags, only=["source.fixAll"])
    assert [a.kind for a in found] == ["source.fixAll.cpu2gpu"]
    docs.apply(found[0].edit)
    json.loads(docs.texts[uri])  # still a notebook, its layout kept
    assert docs.texts[uri].startswith('{\n "cells": [')
    assert await diagnostics(client, uri, 2) == []


# -- without pygls --------------------------------------------------------------------------

def test_server_without_pygls_says_so_in_one_line():
    code = ("import sys; sys.modules['pygls'] = None\n"
            "from cpu2gpu.cli import main\n"
            "main(['server'])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: `cpu2gpu server` cannot start: pygls is not installed (pip install 'cpu2gpu[lsp]')"]
