"""Where a few nodes are, without generating the code of the whole file.

libcst's PositionProvider regenerates a module's code to count lines, which costs
about as much as parsing it again. A finding needs the positions of a handful of
nodes. Python's own parser (many times faster) gives the line and column each
statement starts on, nested ones included, so only the innermost statement that
holds a finding is generated: inside the blocks that enclose it (which reproduce
its indentation), and for a compound statement whose header holds the finding,
with its body cut to ``pass``.

Each generated statement is checked against Python's parser (it must start on the
same column); any disagreement, or a node outside every statement, falls back to
PositionProvider over the whole module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, cast

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from ..analysis.classdefs import child_nodes

_PASS_BLOCK = cst.IndentedBlock(body=[cst.SimpleStatementLine(body=[cst.Pass()])])


@dataclass
class _Segment:
    """A statement to generate alone, inside copies of the blocks that enclose it."""

    statement: cst.BaseStatement  # what is generated (for a header: the statement with its body cut)
    blocks: tuple[cst.IndentedBlock, ...]  # enclosing blocks, outermost first
    line: int  # where Python's parser says it starts
    column: int
    nodes: list[cst.CSTNode]  # the wanted nodes in it


# Python's statements that each libcst statement may stand for (any other is a simple statement).
_PYTHON_KINDS: dict[type, tuple[type, ...]] = {
    cst.If: (ast.If,), cst.For: (ast.For, ast.AsyncFor), cst.While: (ast.While,),
    cst.With: (ast.With, ast.AsyncWith), cst.Try: (ast.Try,),
    cst.FunctionDef: (ast.FunctionDef, ast.AsyncFunctionDef), cst.ClassDef: (ast.ClassDef,),
    cst.Match: (ast.Match,),
}
if hasattr(cst, "TryStar") and hasattr(ast, "TryStar"):
    _PYTHON_KINDS[cst.TryStar] = (ast.TryStar,)
_COMPOUND = (*(kind for kinds in _PYTHON_KINDS.values() for kind in kinds), getattr(ast, "TryStar", ast.Try))
_SIMPLE = tuple(t for t in vars(ast).values() if isinstance(t, type) and issubclass(t, ast.stmt)
                and t is not ast.stmt and not issubclass(t, _COMPOUND))


class _Unmatched(Exception):
    """libcst's statements and Python's do not pair up: use the whole-module way."""


def node_positions(module: cst.Module, nodes: Iterable[cst.CSTNode], source: str,
                   tree: Optional[ast.Module] = None) -> dict:
    """node -> CodeRange (lines from 1, columns from 0, as PositionProvider gives them).
    ``tree``: Python's tree of ``source``, when the caller has it."""
    wanted = {id(n): n for n in nodes}
    if tree is None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return _whole(module)  # newer syntax than this Python, or too deep: PositionProvider does it
    segments: list[_Segment] = []
    try:
        _collect(module.body, tree.body, (), set(wanted), segments)
    except _Unmatched:
        return _whole(module)
    found: dict = {}
    for segment in segments:
        located = _locate(module, segment)
        if located is None:
            return _whole(module)
        found.update(located)
    if len(found) < len(wanted):
        return _whole(module)  # a node outside the statements (the module itself): the slow way
    return found


def _whole(module: cst.Module) -> dict:
    """The fallback: every node's position, from one code generation of the whole file."""
    return _positions(module)


def _positions(module: cst.Module) -> dict:
    """PositionProvider's ranges for every node of ``module``.

    MetadataWrapper.resolve runs the provider (one code generation) and then an empty visiting pass
    over the tree for batchable providers, which costs as much again; the provider is run alone when
    this libcst allows it.
    """
    provider = PositionProvider()
    try:
        provider._gen_impl(module)
        return provider._computed  # type: ignore[return-value]
    except (AttributeError, TypeError):  # another libcst's internals: the public way
        return dict(MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider))


def _collect(body: Sequence[cst.BaseStatement], python: Sequence[ast.stmt], blocks: tuple, remaining: set[int],
             segments: list[_Segment]) -> None:
    """Pair a block's libcst statements with Python's and note the segments that hold the nodes still
    in ``remaining`` (ids, removed as they are found: the search stops when none is left)."""
    index = 0
    for stmt in body:
        if not remaining:
            return
        if index >= len(python):
            raise _Unmatched
        first = python[index]
        if not isinstance(first, _PYTHON_KINDS.get(type(stmt), _SIMPLE)):
            raise _Unmatched
        index += len(stmt.body) if isinstance(stmt, cst.SimpleStatementLine) else 1
        nested = None
        if not isinstance(stmt, cst.SimpleStatementLine) and id(stmt) not in remaining:
            nested = _nested_blocks(stmt, first)
        if nested is None:  # a simple statement, or one generated whole
            _add(segments, remaining, stmt, blocks, first, _inside(stmt, remaining))
            continue
        header = _inside(stmt, remaining, {id(block) for block, _ in nested})
        if header:
            cut = _header_only(stmt)
            if cut is None:
                _add(segments, remaining, stmt, blocks, first, _inside(stmt, remaining))
                continue
            _add(segments, remaining, cut, blocks, first, header)
        for block, python_body in nested:
            _collect(block.body, python_body, (*blocks, block), remaining, segments)
    if index != len(python):
        raise _Unmatched


def _inside(node: cst.CSTNode, remaining: set[int], stops: frozenset[int] | set[int] = frozenset()) -> list:
    """The nodes under ``node`` whose ids are in ``remaining``, not looking inside the ``stops``."""
    found = []
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in remaining:
            found.append(current)
        stack.extend(child for child in child_nodes(current) if id(child) not in stops)
    return found


def _add(segments: list[_Segment], remaining: set[int], statement: cst.BaseStatement, blocks: tuple,
         python: ast.stmt, nodes: list) -> None:
    if nodes:
        segments.append(_Segment(statement, blocks, python.lineno, python.col_offset, nodes))
        remaining.difference_update(id(n) for n in nodes)


def _nested_blocks(stmt: cst.BaseStatement, python: ast.stmt) -> Optional[list[tuple[cst.IndentedBlock, list]]]:
    """The indented blocks of a compound statement with Python's statements for each; None where a
    part cannot be paired (a one-line body, an ``elif`` chain, ``match``): then it is generated whole."""
    if not isinstance(stmt, (cst.For, cst.While, cst.If, cst.Try, cst.With, cst.FunctionDef, cst.ClassDef)):
        return None
    # Python's statement is of the same kind as libcst's: both read the same source
    python_stmt = cast(Any, python)
    pairs: list[tuple[cst.CSTNode, list]] = [(stmt.body, python_stmt.body)]
    if isinstance(stmt, (cst.For, cst.While, cst.If, cst.Try)) and stmt.orelse is not None:
        if not isinstance(stmt.orelse, cst.Else):
            return None  # elif
        pairs.append((stmt.orelse.body, python_stmt.orelse))
    if isinstance(stmt, cst.Try):
        if len(stmt.handlers) != len(python_stmt.handlers):
            return None
        pairs += [(h.body, p.body) for h, p in zip(stmt.handlers, python_stmt.handlers)]
        if stmt.finalbody is not None:
            pairs.append((stmt.finalbody.body, python_stmt.finalbody))
    if any(not isinstance(block, cst.IndentedBlock) or not isinstance(body, list) for block, body in pairs):
        return None
    return pairs  # type: ignore[return-value]


def _header_only(stmt: cst.BaseStatement) -> Optional[cst.BaseStatement]:
    """The statement with its body cut to ``pass`` (the header's positions do not depend on what follows)."""
    if isinstance(stmt, (cst.For, cst.While, cst.If)):
        return stmt.with_changes(body=_PASS_BLOCK, orelse=None)
    if isinstance(stmt, (cst.With, cst.FunctionDef, cst.ClassDef)):
        return stmt.with_changes(body=_PASS_BLOCK)
    return None


def _locate(module: cst.Module, segment: _Segment) -> Optional[dict]:
    snippet: cst.BaseStatement = segment.statement
    for block in reversed(segment.blocks):  # `if _:` lines stand in for the enclosing headers
        snippet = cst.If(test=cst.Name("_"), body=block.with_changes(body=[snippet]))
    mini = module.with_changes(header=[], body=[snippet], footer=[])
    positions = _positions(mini)
    anchor = positions[segment.statement].start
    if anchor.column != segment.column:
        return None
    offset = segment.line - anchor.line
    return {node: CodeRange(CodePosition(where.start.line + offset, where.start.column),
                            CodePosition(where.end.line + offset, where.end.column))
            for node in segment.nodes for where in (positions[node],)}
