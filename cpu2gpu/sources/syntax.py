"""What Python itself makes of a source text, before libcst is allowed near it.

- ``python_verdict``: Python's parser judges every file first (libcst accepts code that Python
  refuses, such as ``b"é"``, and crashes on some that Python refuses cheaply, such as 1,300 nested
  parentheses); a tree nested deeper than ``MAX_NESTING`` is refused as well, because libcst's
  parse time grows with the square of the depth (a chain of 4,000 ``+`` terms takes minutes).
- ``newer_syntax``: where Python refuses code that libcst reads, whether the code is in a syntax
  newer than the running Python's (``match`` on 3.9, ``type X = ...`` on 3.11): then libcst judges.
- ``python_lines``: the lines of a text as Python counts them.
- ``python_syntax_error``: the last check before a rewrite is handed out or written.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import libcst as cst

# The deepest syntax tree cpu2gpu analyses (nodes from a statement of the module down to the innermost
# expression). Real code stays far below it; a chain of 1,000 ``+`` terms reaches it.
MAX_NESTING = 1000

# Python's own limit on nested brackets (the same in every version); libcst crashes far above it.
_MAX_BRACKETS = 200

# Python's messages for code nested too deeply (libcst must never see such code: it may crash on it).
_NESTING_MESSAGES = ("too many nested parentheses", "too many statically nested blocks",
                     "too many levels of indentation", "too complex", "too deeply nested")

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def python_lines(text: str, keepends: bool = False) -> list[str]:
    """The lines of ``text`` as Python counts them: only ``\\n``, ``\\r\\n`` and ``\\r`` end a line
    (``str.splitlines`` also breaks at form feeds, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029)."""
    if keepends:
        return _LINE.findall(text)
    return _LINE_BREAK.split(text)


@dataclass(frozen=True)
class Refusal:
    """Why a source text is not analysed; ``nesting``: too deep to hand to libcst at all."""

    message: str
    line: Optional[int] = None
    column: Optional[int] = None
    nesting: bool = False


def python_verdict(text: str) -> tuple[Optional[ast.Module], Optional[Refusal]]:
    """Python's syntax tree of ``text``, or why Python (or the nesting limit) refuses it."""
    try:
        with warnings.catch_warnings():  # invalid escape sequences and the like are not ours to report
            warnings.simplefilter("ignore")
            tree = compile(text, "<source>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        message = error.msg or "invalid syntax"
        nesting = any(part in message for part in _NESTING_MESSAGES)
        return None, Refusal(f"syntax error: {message}", error.lineno, error.offset, nesting)
    except (RecursionError, MemoryError):
        return None, Refusal("syntax error: nested too deeply for Python to compile it", nesting=True)
    except ValueError as error:  # (NUL bytes are refused before this)
        return None, Refusal(f"syntax error: {error}")
    assert isinstance(tree, ast.Module)  # what compile gives with PyCF_ONLY_AST in "exec" mode
    deep = _too_deep(tree, text)
    if deep is not None:
        line, column = deep
        return tree, Refusal(f"not analysed: the code is nested more than {MAX_NESTING} levels deep "
                             "(cpu2gpu's limit: its parser's time grows with the square of the depth)",
                             line, column, nesting=True)
    return tree, None


def _too_deep(tree: ast.Module, text: str) -> Optional[tuple[int, int]]:
    """Where the tree gets deeper than ``MAX_NESTING`` (line, 1-based column), or None.

    Only nodes that span enough characters to hold that much nesting are looked into: every level
    of nesting takes at least one character (two with the levels that carry no position, such as
    ``arguments``), so the walk visits little more than the compound statements.
    """
    starts: Optional[list[int]] = None
    stack: list[tuple[ast.AST, int, tuple[int, int]]] = [(node, 1, (node.lineno, node.col_offset + 1))
                                                         for node in tree.body]
    while stack:
        node, depth, where = stack.pop()
        if depth > MAX_NESTING:
            return where
        lineno = getattr(node, "lineno", None)
        if lineno is not None:
            # (the nodes with a lineno have the other three: statements, expressions, arguments...)
            col_offset: int = getattr(node, "col_offset")
            end_col_offset: Optional[int] = getattr(node, "end_col_offset")
            where = (lineno, col_offset + 1)
            end = getattr(node, "end_lineno") or lineno
            if end == lineno:
                span = (end_col_offset or 0) - col_offset
            else:
                if starts is None:
                    starts = [0]
                    for line in python_lines(text, keepends=True):
                        starts.append(starts[-1] + len(line))
                # an upper bound in characters (the columns are UTF-8 offsets)
                span = starts[min(end, len(starts)) - 1] - starts[min(lineno, len(starts)) - 1] \
                    + (end_col_offset or 0)
            if depth + 2 * span + 8 <= MAX_NESTING:
                continue
        stack.extend((child, depth + 1, where) for child in ast.iter_child_nodes(node))
    return None


def brackets_within_limit(text: str) -> bool:
    """Brackets nested no deeper than Python allows (read with the tokenizer; False if it fails)."""
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.OP:
                if token.string in "([{":
                    depth += 1
                    if depth > _MAX_BRACKETS:
                        return False
                elif token.string in ")]}":
                    depth -= 1
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError):
        return False
    return True


_Test = Optional[Callable[[Any], bool]]  # (its node: of the kind beside it)


def _constructs() -> list[tuple[type, tuple[int, int], _Test]]:
    """libcst nodes of syntax newer than some Python: (node type, first version, test or None)."""
    table: list[tuple[str, tuple[int, int], _Test]] = [
        ("Match", (3, 10), None),
        ("TryStar", (3, 11), None),
        ("Index", (3, 11), lambda node: getattr(node, "star", None) is not None),  # a[*b]
        ("TypeAlias", (3, 12), None),
        ("TypeParameters", (3, 12), None),
        ("TypeParam", (3, 13), lambda node: getattr(node, "default", None) is not None),
        ("TemplatedString", (3, 14), None),
        # except A, B: (without parentheses)
        ("ExceptHandler", (3, 14), lambda node: isinstance(node.type, cst.Tuple) and not node.type.lpar),
        ("ExceptStarHandler", (3, 14), lambda node: isinstance(node.type, cst.Tuple) and not node.type.lpar),
    ]
    return [(getattr(cst, name), version, test) for name, version, test in table if hasattr(cst, name)]


def newer_syntax(module: cst.Module, refusal: Refusal) -> bool:
    """Does ``module`` (which libcst read and Python refused) use syntax newer than this Python's?"""
    running = sys.version_info[:2]
    wanted: list[tuple[type, _Test]] = [(kind, test) for kind, version, test in _constructs() if version > running]
    if running < (3, 12) and "f-string" in refusal.message:  # PEP 701 f-strings (nested quotes, ...)
        wanted.append((cst.FormattedString, None))
    if not wanted:
        return False
    kinds = tuple(kind for kind, _ in wanted)
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, kinds):
            for kind, test in wanted:
                if isinstance(node, kind) and (test is None or test(node)):
                    return True
        stack.extend(node.children)
    return False


def python_syntax_error(data: Union[str, bytes]) -> str:
    """Why Python's parser rejects ``data`` (its coding line and BOM honoured), or "" if it accepts it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, "<rewrite>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return f"line {error.lineno}: {error.msg}"
    except (ValueError, RecursionError, MemoryError) as error:
        return str(error) or type(error).__name__
    return ""


def rewrite_parse_problem(old: bytes, new: bytes) -> str:
    """Why the rewrite ``new`` of ``old`` does not parse, or "".

    Only a rewrite of code that this Python parses is judged here: code in a newer syntax than the
    running Python's is left to libcst, which parsed the original.
    """
    problem = python_syntax_error(new)
    if problem and not python_syntax_error(old):
        return problem
    return ""
