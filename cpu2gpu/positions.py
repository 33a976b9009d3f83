"""Where a few nodes are, without generating the code of the whole file.

libcst's PositionProvider regenerates a module's code to count lines, which costs
about as much as parsing it again. A finding needs the positions of a handful of
nodes: Python's own parser (many times faster) gives the line each top-level
statement starts on, and only the statements that hold a finding are generated.
"""

from __future__ import annotations

import ast
from typing import Iterable, Optional

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from .classdefs import walk


def node_positions(module: cst.Module, nodes: Iterable[cst.CSTNode], source: str) -> dict:
    """node -> CodeRange (lines from 1, columns from 0, as PositionProvider gives them)."""
    wanted = {id(n): n for n in nodes}
    starts = _statement_starts(module, source)
    if starts is None:
        return _whole(module)
    found: dict = {}
    for stmt, first_line in zip(module.body, starts):
        inside = [n for n in walk(stmt) if id(n) in wanted]
        if not inside:
            continue
        mini = module.with_changes(header=[], body=[stmt], footer=[])
        positions = MetadataWrapper(mini, unsafe_skip_copy=True).resolve(PositionProvider)
        offset = first_line - _first_code_line(mini.code)
        for node in inside:
            where = positions[node]
            found[node] = CodeRange(CodePosition(where.start.line + offset, where.start.column),
                                    CodePosition(where.end.line + offset, where.end.column))
    if len(found) < len(wanted):
        return _whole(module)  # a node outside the statements (the module itself): the slow way
    return found


def _whole(module: cst.Module) -> dict:
    return dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider))


def _statement_starts(module: cst.Module, source: str) -> Optional[list[int]]:
    """The line of the first token of each top-level statement, from Python's parser."""
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # newer syntax than this Python, or too deep: PositionProvider does it
    starts: list[int] = []
    index = 0
    for stmt in module.body:
        if index >= len(body):
            return None
        node = body[index]
        decorators = getattr(node, "decorator_list", None) or []
        starts.append(min([node.lineno, *[d.lineno for d in decorators]]))
        index += len(stmt.body) if isinstance(stmt, cst.SimpleStatementLine) else 1
    return starts if index == len(body) else None


def _first_code_line(code: str) -> int:
    for number, line in enumerate(code.splitlines(), 1):
        text = line.strip()
        if text and not text.startswith("#"):
            return number
    return 1
