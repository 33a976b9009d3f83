"""Jupyter notebooks: the code cells checked and rewritten as one program, the file kept as it was.

The code cells are joined, in order, into one module; a comment line marks where each
cell starts, so that findings map back to a cell and a line in it and the rewritten
module splits back into cells. The marks carry a token made for the notebook that no cell
contains, so that no text in a cell can pass for one. IPython syntax (``%magic``, ``!shell``, ``%%cell``
magics, ``obj?``) is not Python: each such line is replaced, for the analysis only,
by a placeholder line (so line numbers hold) and put back word for word afterwards.
``verify`` runs the same cells one by one, placeholders and all (``runnable_cells``).

Only the ``source`` of the cells the rewrite changes is replaced; the notebook is
written back with the JSON layout it was read with (indentation, key order, escaping,
trailing newline). A notebook whose layout cannot be reproduced byte for byte is
refused rather than reformatted.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from ..engine import Finding, SourceError, check_module, fix_module, parse
from ..rewrite.fixes import PLACE_MARK, SECTION_MARK
from .positions import NotebookPositions
from ..rules import Rule

NOTEBOOK_SUFFIX = ".ipynb"

# Place marks: a fix that moves a statement leaves them in their cell, and the device setup goes
# into the cell that imports torch (a cell mark ends an import block).
_CELL_MARK = SECTION_MARK + "{token} {number}>"
_MAGIC_MARK = PLACE_MARK + "magic {token} {number}>"

# Lines IPython rewrites before Python sees them.
_LINE_MAGIC = re.compile(r"^\s*(?:%%?[A-Za-z_]|!(?!=)|\?)")
_ASSIGNED_MAGIC = re.compile(r"^\s*[\w.,\s\[\]()*]+=\s*[%!]")  # files = !ls ; t = %timeit f()
_HELP = re.compile(r"^\s*[\w.]+\s*\?{1,2}\s*$")  # obj? and obj??
# Cell magics whose body is Python (the rest, %%bash, %%writefile..., are not analysed).
_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


class CellError(SourceError):
    """A problem inside one code cell (``cell`` is 1-based among the code cells)."""

    def __init__(self, message: str, cell: int, line: Optional[int] = None, column: Optional[int] = None) -> None:
        super().__init__(message, line, column)
        self.cell = cell


def is_notebook(path: str) -> bool:
    return path.endswith(NOTEBOOK_SUFFIX)


def _lines(text: str) -> list[str]:
    return _LINE.findall(text)


def _split_ending(line: str) -> tuple[str, str]:
    body = line.rstrip("\r\n")
    return body, line[len(body):]


@dataclass
class CodeCell:
    number: int  # 1-based among the code cells
    cell: dict  # the cell's JSON object, changed in place by a rewrite
    text: str  # its source as one string
    first_line: int = 0  # 1-based line of the program where the cell's text starts
    line_count: int = 0
    magics: dict[int, str] = field(default_factory=dict)  # placeholder number -> the original line


@dataclass
class Notebook:
    raw: str
    data: dict
    cells: list[CodeCell]
    program: str  # the code cells as one module, magics replaced
    token: str  # in every mark of the program, in no cell

    def locate(self, line: int) -> tuple[CodeCell, int]:
        """The cell that holds a program line, and the 1-based line inside it."""
        for cell in reversed(self.cells):
            if cell.first_line <= line:
                return cell, min(line - cell.first_line + 1, max(cell.line_count, 1))
        return self.cells[0], 1


def _magic_lines(lines: list[str]) -> set[int]:
    """Indexes of the lines that are IPython syntax, not Python."""
    magics = {i for i, line in enumerate(lines)
              if _LINE_MAGIC.match(line) or _ASSIGNED_MAGIC.match(line) or _HELP.match(line)}
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].lstrip()[2:].split(None, 1)[0] if lines[first].strip() != "%%" else ""
        if name not in _PYTHON_CELL_MAGICS:
            return set(range(len(lines)))  # %%bash, %%writefile, ...: no Python in the cell
    return magics


def _python_language(data: dict) -> bool:
    metadata = data.get("metadata") or {}
    language = (metadata.get("language_info") or {}).get("name") or (metadata.get("kernelspec") or {}).get("language")
    return language is None or str(language).lower() == "python"


def load(raw_bytes: bytes) -> Notebook:
    """Read a notebook; ``SourceError`` when it is not one."""
    try:
        raw = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SourceError(f"not a valid notebook: cannot decode it as UTF-8 ({error.reason})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise SourceError(f"not a valid notebook: invalid JSON: {error.msg}", error.lineno, error.colno) from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        if isinstance(data, dict) and "worksheets" in data:
            raise SourceError("not supported: a notebook in nbformat 3 (convert it with `jupyter nbconvert --to notebook`)")
        raise SourceError("not a valid notebook: no list of cells")
    cells: list[CodeCell] = []
    if _python_language(data):
        for cell in data["cells"]:
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            if isinstance(source, list) and all(isinstance(part, str) for part in source):
                text = "".join(source)
            elif isinstance(source, str):
                text = source
            else:
                raise SourceError(f"not a valid notebook: code cell {len(cells) + 1} has a source that is not text")
            cells.append(CodeCell(len(cells) + 1, cell, text))
    token = _token(cells)
    return Notebook(raw, data, cells, _program(cells, token), token)


def _token(cells: list[CodeCell]) -> str:
    """A token that no cell contains (from the cells' text: the same notebook, the same token)."""
    import hashlib  # (only for a notebook: a check of .py files does not load OpenSSL)

    digest = hashlib.sha256("\0".join(cell.text for cell in cells).encode("utf-8", "surrogatepass"))
    while True:
        token = digest.hexdigest()[:16]
        if not any(token in cell.text for cell in cells):
            return token
        digest.update(b"\0")


def _program(cells: list[CodeCell], token: str) -> str:
    out: list[str] = []
    magic_number = 0
    for cell in cells:
        out.append(_CELL_MARK.format(token=token, number=cell.number) + "\n")
        cell.first_line = len(out) + 1
        lines = _lines(cell.text)
        magics = _magic_lines(lines)
        for index, line in enumerate(lines):
            body, ending = _split_ending(line)
            if index in magics:
                magic_number += 1
                cell.magics[magic_number] = body
                mark = _MAGIC_MARK.format(token=token, number=magic_number)
                indent = body[:len(body) - len(body.lstrip())]
                # Inside a block a comment cannot stand alone: `pass` keeps the block a block.
                line = (f"{indent}pass  {mark}" if indent and len(magics) < len(lines) else mark) + "\n"
            elif not ending:
                line = body + "\n"
            out.append(line)
        cell.line_count = len(lines)
    return "".join(out)


def _mark_pattern(template: str, token: str) -> "re.Pattern[str]":
    """A mark of the program (cell or magic) as a regex whose group 1 is its number."""
    return re.compile(re.escape(template.format(token=token, number="@")).replace("@", r"(\d+)"))


@dataclass
class RunnableCell:
    """A code cell as Python to run on its own (``cpu2gpu verify``)."""

    number: int  # as ``check`` numbers it: 1-based among the code cells
    text: str  # the cell's source, IPython lines included
    source: str  # the same lines, each IPython line replaced by a comment or ``pass`` (line numbers hold)
    magics: dict[int, str]  # 1-based line in the cell -> the IPython line it replaced


def runnable_cells(raw: bytes) -> list[RunnableCell]:
    """The code cells in order, with IPython syntax handled as ``check`` handles it; ``SourceError``
    when the file is not a notebook. A cell that does not parse is left for the runner to report."""
    notebook = load(raw)
    lines = _lines(notebook.program)
    magic_mark = _mark_pattern(_MAGIC_MARK, notebook.token)
    cells = []
    for cell in notebook.cells:
        start = cell.first_line - 1
        chunk = lines[start:start + cell.line_count]
        magics = {}
        for number, line in enumerate(chunk, 1):
            mark = magic_mark.search(line)
            if mark:
                magics[number] = cell.magics[int(mark.group(1))]
        cells.append(RunnableCell(cell.number, cell.text, "".join(chunk), magics))
    return cells


def parse_program(notebook: Notebook):
    """The notebook's program parsed; a SourceError with a line is raised as a CellError, at its cell and line."""
    try:
        return parse(notebook.program)
    except SourceError as error:
        if error.line is None or not notebook.cells:
            raise
        cell, line = notebook.locate(error.line)
        raise CellError(error.message, cell.number, line, error.column) from None


def check_notebook(raw: bytes, path: str, rules: Sequence[Rule], device_expression: Optional[str] = None) -> list[Finding]:
    notebook = load(raw)
    if not notebook.cells:
        return []
    findings = check_module(parse_program(notebook), path, rules, device_expression=device_expression)
    indexes = {id(cell): index for index, cell in enumerate(notebook.data["cells"])}
    places = NotebookPositions(notebook.raw) if findings else None
    for finding in findings:
        cell, finding.line = notebook.locate(finding.line)
        finding.end_line = finding.end_line - cell.first_line + 1
        finding.cell = cell.number
        finding.cell_index = indexes.get(id(cell.cell))
        if places is not None and finding.cell_index is not None:
            start = places.locate(finding.cell_index, cell.text, finding.line, finding.column)
            end = places.locate(finding.cell_index, cell.text, finding.end_line, finding.end_column)
            if start is not None and end is not None:
                finding.file_line, finding.file_column = start
                finding.file_end_line, finding.file_end_column = end
    return findings


def split_program(notebook: Notebook, code: str) -> list[str]:
    """The rewritten program cut back into the cells' texts, magics restored."""
    cell_mark = _mark_pattern(_CELL_MARK, notebook.token)
    magic_mark = re.compile(_mark_pattern(_MAGIC_MARK, notebook.token).pattern + "$")
    texts: list[list[str]] = []
    for line in _lines(code):
        mark = cell_mark.fullmatch(line.rstrip("\r\n"))
        if mark and int(mark.group(1)) == len(texts) + 1:
            texts.append([])
        elif texts:
            texts[-1].append(line)
        else:
            texts = []  # the rewrite put something above the first cell
            break
    if len(texts) != len(notebook.cells):
        raise SourceError("internal error: the rewrite cannot be cut back into the notebook's cells; file left unchanged")
    results = []
    for cell, lines in zip(notebook.cells, texts):
        restored = []
        for line in lines:
            body, ending = _split_ending(line)
            mark = magic_mark.search(body)
            if mark:
                number = int(mark.group(1))
                if number not in cell.magics:
                    raise SourceError(f"internal error: the rewrite moved an IPython line out of cell {cell.number}; "
                                      "file left unchanged")
                body = cell.magics[number]
            restored.append(body + ending)
        text = "".join(restored)
        if not cell.text.endswith("\n") and text.endswith("\n"):
            text = text[:-1]
        results.append(text)
    return results


def set_cell_source(cell: dict, text: str) -> None:
    """Replace a cell's source (in the notebook's JSON data) with ``text``, as a list of lines where it was one."""
    if isinstance(cell.get("source"), list):
        cell["source"] = _lines(text)
    else:
        cell["source"] = text


@dataclass(frozen=True)
class JsonLayout:
    """How a notebook's JSON is written out (``json_layout``): ``dump`` writes data the same way."""

    indent: Union[int, str, None]
    ensure_ascii: bool
    separators: Optional[tuple[str, str]]
    newline: str
    trailing: str

    def dump(self, data: Any) -> str:
        text = json.dumps(data, indent=self.indent, ensure_ascii=self.ensure_ascii, separators=self.separators)
        if self.newline != "\n":
            text = text.replace("\n", self.newline)
        return text + self.trailing


def json_layout(notebook: Notebook) -> JsonLayout:
    """The json.dumps settings that write this notebook back byte for byte."""
    raw = notebook.raw
    newline = "\r\n" if "\r\n" in raw else "\n"
    body = raw.rstrip("\r\n")
    trailing = raw[len(body):]
    indent_match = re.search(r"\n([ \t]+)\S", raw)
    if indent_match:
        spaces = indent_match.group(1)
        indents: list = [len(spaces)] if set(spaces) == {" "} else [spaces]
        separators: list = [None]
    else:
        indents, separators = [None], [None, (",", ":")]
    for indent in indents:
        for ensure_ascii in (False, True):
            for separator in separators:
                layout = JsonLayout(indent, ensure_ascii, separator, newline, trailing)
                if layout.dump(notebook.data) == raw:
                    return layout
    raise SourceError("cannot rewrite this notebook without reformatting its JSON (its layout is not one "
                      "that json.dumps writes); file left unchanged")


def rewrite_notebook(raw: bytes, path: str, rules: Sequence[Rule], unsafe_fixes: bool = False,
                     device_expression: Optional[str] = None) -> bytes:
    """The notebook with every fix applied; the same bytes when nothing changes."""
    notebook = load(raw)
    if not notebook.cells:
        return raw
    module = parse_program(notebook)
    fixed = fix_module(module, path, rules, unsafe_fixes, device_expression)
    if fixed is module or fixed.code == notebook.program:
        return raw
    return with_program(notebook, fixed.code)


def with_program(notebook: Notebook, code: str) -> bytes:
    """The notebook with its program changed to ``code``: the sources of the cells whose text changed are
    replaced, the rest of the file (outputs, metadata, other cells, the JSON layout) stays byte for byte."""
    layout = json_layout(notebook)
    changed = False
    for cell, text in zip(notebook.cells, split_program(notebook, code)):
        if text != cell.text:
            set_cell_source(cell.cell, text)
            changed = True
    return layout.dump(notebook.data).encode("utf-8") if changed else notebook.raw.encode("utf-8")


def cell_diff(old: bytes, new: bytes, path: str, old_name: str, new_name: str) -> str:
    """A unified diff of the cell sources that differ, one hunk set per cell."""
    before, after = load(old), load(new)
    out: list[str] = []
    for old_cell, new_cell in zip(before.cells, after.cells):
        if old_cell.text == new_cell.text:
            continue
        label = f"cell {old_cell.number}"
        diff = difflib.unified_diff(_terminated(old_cell.text), _terminated(new_cell.text),
                                    f"{old_name}:{label}", f"{new_name}:{label}")
        out.extend(diff)
    return "".join(out)


def _terminated(text: str) -> list[str]:
    lines = _lines(text)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return lines
