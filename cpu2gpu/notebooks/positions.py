"""Where a line of a notebook cell sits in the text of the ``.ipynb`` file itself.

Findings in a notebook name the code cell and the line in it (``train.ipynb:cell 3:2:5``). An
editor that opens the file as text, a SARIF viewer and GitHub's annotations need a line and a
column of the file: the JSON string that holds that line of the cell's ``source``. Jupyter writes
a source as a list of strings, one line each, so such a position is the line of the file that
shows the code. The file is scanned once, for the places of the cells' source strings only.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Optional, Union

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]|[^\s{}\[\],:"]+', re.S)
_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|.)', re.S)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass(frozen=True)
class _String:
    start: int  # offset of the opening quote in the file's text
    end: int  # offset after the closing quote


_Node = Union[_String, dict, list, None]


class _Scanner:
    def __init__(self, raw: str) -> None:
        self.tokens = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(raw)]
        self.at = 0

    def value(self) -> _Node:
        text, start, end = self.tokens[self.at]
        self.at += 1
        if text == "{":
            members: dict = {}
            while self.tokens[self.at][0] != "}":
                key = self.tokens[self.at][0]
                self.at += 2  # the key and the colon
                members[key] = self.value()
                if self.tokens[self.at][0] == ",":
                    self.at += 1
            self.at += 1
            return members
        if text == "[":
            items: list = []
            while self.tokens[self.at][0] != "]":
                items.append(self.value())
                if self.tokens[self.at][0] == ",":
                    self.at += 1
            self.at += 1
            return items
        if text.startswith('"'):
            return _String(start, end)
        return None


class NotebookPositions:
    """The places of the cells' source strings in a notebook's text (empty when it cannot tell)."""

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\n", raw)]
        self.sources: dict[int, list[_String]] = {}  # cell index -> its source strings
        try:
            top = _Scanner(raw).value()
        except (IndexError, RecursionError):
            return
        cells = top.get('"cells"') if isinstance(top, dict) else None
        for index, cell in enumerate(cells if isinstance(cells, list) else []):
            source = cell.get('"source"') if isinstance(cell, dict) else None
            parts = [source] if isinstance(source, _String) else source
            if isinstance(parts, list) and parts and all(isinstance(p, _String) for p in parts):
                self.sources[index] = parts

    def _line_column(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def _offsets(self, part: _String) -> list[int]:
        """The file offset of each character of a JSON string's value, then of its closing quote."""
        offsets, at = [], part.start + 1
        while at < part.end - 1:
            offsets.append(at)
            escape = _ESCAPE.match(self.raw, at) if self.raw[at] == "\\" else None
            step = len(escape.group()) if escape else 1
            if escape and step == 6 and 0xD800 <= int(escape.group()[2:], 16) <= 0xDBFF:
                low = _ESCAPE.match(self.raw, at + 6)
                if low is not None and len(low.group()) == 6:
                    step = 12  # a surrogate pair is one character of the value
            at += step
        offsets.append(at)
        return offsets

    def locate(self, cell_index: int, cell_text: str, line: int, column: int) -> Optional[tuple[int, int]]:
        """The file's 1-based line and column of a 1-based line and column of the cell's text."""
        parts = self.sources.get(cell_index)
        if not parts:
            return None
        lines = _LINE.findall(cell_text)
        offset = sum(len(text) for text in lines[:line - 1]) + column - 1
        offset = max(0, min(offset, len(cell_text)))
        for number, part in enumerate(parts):
            offsets = self._offsets(part)
            length = len(offsets) - 1
            if offset < length or number == len(parts) - 1:
                return self._line_column(offsets[min(offset, length)])
            offset -= length
        return None
