"""One open document, analysed as ``cpu2gpu check`` and ``rewrite`` would analyse the file on disk.

A document is a Python file (one text) or a notebook (one text per code cell, checked as one
program, as ``notebooks/cells.py`` does for ``.ipynb`` files). ``analyse`` answers its findings with their
fixes; ``Report.fixed`` gives the texts that one finding's fix makes of the document (only that
fix, and the device setup it needs), ``Report.fixed_all`` those of every fix ``rewrite`` applies.
Texts come back in the document's shape: one text, or one per code cell.

The text of the document is the editor's, unsaved edits included; the project around a Python
file (``project.py``: what it imports, what calls it) is read from the disk, except for the files
open in the editor, whose texts are used instead.
"""

from __future__ import annotations

import io
import json
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import libcst as cst

from ..sources.config import Settings
from ..engine import (Analysis, Finding, SourceError, analyze_module, fixed_bytes, locate_with_noqa, parse,
                      remember_source, run_with_deep_stack, select_rules)
from ..analysis.facts import Facts
from ..rewrite.fixes import apply_edits
from ..notebooks.cells import CellError, Notebook, json_layout, load, parse_program, set_cell_source, split_program
from ..project.projectset import ProjectFile, ProjectSet
from ..rules import Hit, Rule
from ..rules.base import Fix
from ..analysis.seeds import NO_SEEDS, Seeds
from ..sources.syntax import python_syntax_error


def rules_for(settings: Settings) -> list[Rule]:
    return select_rules(settings.select, settings.ignore, settings.extend_select)


def file_bytes(text: str) -> bytes:
    """The bytes the file would have on disk (its coding line honoured; UTF-8 when that fails)."""
    data = text.encode("utf-8", "surrogatepass")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data if encoding in ("utf-8", "utf-8-sig") else text.encode(encoding)
    except (SyntaxError, LookupError, UnicodeError):
        return data


def project_seeds_with(path: str, data: bytes, open_files: Mapping[str, bytes] = {}) -> tuple[Seeds, Optional[tuple]]:
    """The seeds of ``path`` from the project around it, reading ``data`` for the file itself and the
    texts of ``open_files`` (path -> bytes: the editor's unsaved buffers) for those files. Also the
    (module, facts or None) the project parsed the file into, when it did, so that it is not parsed twice."""
    if not path.endswith(".py"):
        return NO_SEEDS, None
    projects = ProjectSet([path])
    root, resolved = projects.located[path]
    project = projects.projects[root]
    for other, other_data in [*open_files.items(), (path, data)]:
        if not other.endswith(".py"):
            continue
        other_path = Path(other).resolve()
        if other_path == resolved or root in other_path.parents:
            project.files[other_path] = ProjectFile(other_path, other_data)
    parsed: dict = {}
    seeds = projects.seeds([path], parsed).get(path, NO_SEEDS)
    entry = parsed.get(path)
    known = (entry[1], entry[2]) if entry is not None and entry[0] == data else None
    return seeds, known


@dataclass
class Located:
    finding: Finding  # lines and columns in its text (a notebook's: in its cell; ``finding.cell`` says which)
    hit: Hit

    @property
    def fix_safety(self) -> Optional[str]:
        fix = self.hit.fix
        return None if fix is None else "safe" if fix.safe else "unsafe"

    @property
    def fix_description(self) -> str:
        return self.hit.fix.description if self.hit.fix is not None else ""


@dataclass
class Report:
    path: str
    texts: list[str]  # the document: one text, or one per code cell
    located: list[Located] = field(default_factory=list)
    error: Optional[SourceError] = None  # the document could not be analysed (its ``cell``, for a notebook)
    analysis: Optional[Analysis] = None
    notebook: Optional[Notebook] = None
    rules: Sequence[Rule] = ()
    settings: Settings = field(default_factory=Settings)
    seeds: Seeds = field(default_factory=Seeds)

    def position(self, index: int) -> Optional[tuple[int, int, int, int]]:
        """1-based line, column, end line, end column of ``located[index]`` in the text of its document."""
        f = self.located[index].finding
        return f.line, f.column, f.end_line, f.end_column

    def fixed(self, index: int) -> Optional[list[str]]:
        """The document's texts with only the fix of ``located[index]`` applied (None: no fix, or it fails)."""
        analysis = self.analysis
        if analysis is None:
            return None
        fix = self.located[index].hit.fix
        if fix is None:
            return None
        try:
            return run_with_deep_stack(self._fixed_one, analysis, fix)
        except SourceError:
            return None

    def _fixed_one(self, analysis: Analysis, fix: Fix) -> Optional[list[str]]:
        edits = list(fix.edits)
        if fix.needs_device_setup:
            edits.extend(analysis.context.setup.setup_edits(analysis.module, fix.edits))
        code = apply_edits(analysis.module, edits).code
        return self._texts(analysis.module.code if self.notebook is not None else self.texts[0], code)

    def fixed_all(self, unsafe_fixes: Optional[bool] = None) -> Optional[list[str]]:
        """The document's texts with every fix ``rewrite`` applies (the safe ones, and the unsafe ones
        too when ``unsafe_fixes``, by default the ``unsafe-fixes`` setting); None when none applies."""
        if self.analysis is None:
            return None
        unsafe = self.settings.unsafe_fixes if unsafe_fixes is None else unsafe_fixes
        module = self.analysis.module
        try:
            new = run_with_deep_stack(fixed_bytes, module, self.path, self.rules, unsafe,
                                      self.settings.device_expression, None, self.seeds)
        except SourceError:
            return None
        if new is None:
            return None
        old = module.code if self.notebook is not None else self.texts[0]
        return self._texts(old, new.decode(module.encoding))

    def _texts(self, old: str, code: str) -> Optional[list[str]]:
        if code == old:
            return None
        if python_syntax_error(code) and not python_syntax_error(old):  # a bug in a fix: never hand it out
            return None
        if self.notebook is None:
            return [code]
        try:
            return split_program(self.notebook, code)
        except SourceError:
            return None


def analyse(path: str, texts: Sequence[str], settings: Settings, notebook: bool = False,
            seeds: Seeds = NO_SEEDS, known: Optional[tuple] = None) -> Report:
    """The findings of a document. ``texts``: the Python file's text, or the code cells' texts of a
    notebook. ``known``: (module, facts) the project parsed the file into (``project_seeds_with``)."""
    rules = rules_for(settings)
    report = Report(path, list(texts), rules=rules, settings=settings, seeds=seeds)
    try:
        if notebook:
            report.notebook = _notebook(texts)
            if not report.notebook.cells:
                return report
            module, facts = parse_program(report.notebook), None
            seeds = report.seeds = NO_SEEDS  # as ``check`` reads a notebook: on its own
        elif known is not None:
            module, facts = known
            remember_source(module, texts[0])  # for its noqa comments, without generating the code again
        else:
            module, facts = parse(texts[0]), None
        report.analysis, located = run_with_deep_stack(_locate, module, path, rules, settings.device_expression,
                                                       seeds, facts)
    except SourceError as error:
        report.error = error
        return report
    for finding, hit in located:
        if report.notebook is not None:
            cell, finding.line = report.notebook.locate(finding.line)
            finding.end_line = finding.end_line - cell.first_line + 1
            finding.cell = cell.number
        report.located.append(Located(finding, hit))
    return report


def _locate(module: cst.Module, path: str, rules: Sequence[Rule], device_expression: Optional[str],
            seeds: Seeds, facts: Optional[Facts]) -> tuple[Analysis, list]:
    analysis = analyze_module(module, rules, device_expression, seeds=seeds, facts=facts)
    return locate_with_noqa(analysis, path, rules, device_expression, seeds)


def _notebook(cells: Sequence[str]) -> Notebook:
    """A notebook of these code cells, as ``notebook.load`` reads one from a file."""
    data = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": text}
                      for text in cells],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return load(json.dumps(data).encode("utf-8"))


class IpynbReport(Report):
    """A notebook file opened as text (its JSON): the findings of its code cells, placed on the JSON
    strings that hold their code (``nbpositions``), and the fixes as the new text of the whole file."""

    def __init__(self, path: str, text: str, cells: Report, notebook: Optional[Notebook]) -> None:
        super().__init__(path, [text], cells.located, cells.error, cells.analysis, cells.notebook, cells.rules,
                         cells.settings, cells.seeds)
        self.cells = cells
        self.places: dict[int, tuple[int, int, int, int]] = {}
        if notebook is None:
            return
        indexes = {id(cell): index for index, cell in enumerate(notebook.data["cells"])}
        try:
            from ..notebooks.positions import NotebookPositions
        except ImportError:  # (positions in the file: not in this version)
            return
        finder = NotebookPositions(text)
        for number, item in enumerate(self.located):
            f = item.finding
            assert f.cell is not None  # the cells' report: every finding in a notebook has its cell
            cell = notebook.cells[f.cell - 1]
            index = indexes.get(id(cell.cell))
            start = finder.locate(index, cell.text, f.line, f.column) if index is not None else None
            end = finder.locate(index, cell.text, f.end_line, f.end_column) if index is not None else None
            if start is not None and end is not None:
                self.places[number] = (*start, *end)
        if isinstance(self.error, CellError):
            cell = notebook.cells[self.error.cell - 1]
            index = indexes.get(id(cell.cell))
            where = finder.locate(index, cell.text, self.error.line or 1, self.error.column or 1) \
                if index is not None else None
            line, column = where if where is not None else (None, None)
            self.error = SourceError(f"cell {self.error.cell}: {self.error.message}", line, column)

    def position(self, index: int) -> Optional[tuple[int, int, int, int]]:
        return self.places.get(index)

    def fixed(self, index: int) -> Optional[list[str]]:
        return self._file(self.cells.fixed(index))

    def fixed_all(self, unsafe_fixes: Optional[bool] = None) -> Optional[list[str]]:
        return self._file(self.cells.fixed_all(unsafe_fixes))

    def _file(self, cell_texts: Optional[list[str]]) -> Optional[list[str]]:
        """The file's text with these cell texts (its JSON layout kept), or None when it cannot be kept."""
        if cell_texts is None:
            return None
        try:
            notebook = load(self.texts[0].encode("utf-8"))
            layout = json_layout(notebook)
        except SourceError:
            return None
        for cell, text in zip(notebook.cells, cell_texts):
            if text != cell.text:
                set_cell_source(cell.cell, text)
        return [layout.dump(notebook.data)]


def analyse_ipynb(path: str, text: str, settings: Settings) -> Report:
    """A ``.ipynb`` file's findings, positions in its JSON text (``IpynbReport``)."""
    try:
        notebook = load(text.encode("utf-8"))
    except SourceError as error:
        return Report(path, [text], error=error, settings=settings)
    cells = analyse(path, [cell.text for cell in notebook.cells], settings, notebook=True)
    return IpynbReport(path, text, cells, notebook)


__all__ = ["CellError", "IpynbReport", "Located", "Report", "analyse", "analyse_ipynb", "file_bytes", "project_seeds_with", "rules_for"]
