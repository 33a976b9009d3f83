"""Does Python itself parse these bytes? The last check before a rewrite is handed out or written."""

from __future__ import annotations

import ast


def python_syntax_error(data: bytes) -> str:
    """Why Python's parser rejects ``data`` (its coding line and BOM honoured), or "" if it accepts it."""
    try:
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
