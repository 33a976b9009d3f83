"""In ``runtime/``, installed as ``cpu2gpu.runtime``, imports belong at the top of the module. An import
that must wait (inside a function, or under an ``if`` that runs: anything but ``if TYPE_CHECKING:``)
says why in a comment, on its own line or on the comment line(s) directly above it; one comment covers
the contiguous block of imports right below it (no blank line between them). A pragma alone
(``# noqa: F401``, ``# type: ignore``) says nothing. Read from the source with ``ast`` and ``tokenize``:
nothing is imported, torch is not needed.

The reasons found in the runtime: torch (and its submodules) in a module the parent imports without
torch, or in the child before its isolation is applied; a module that costs start-up time where it is
seldom needed (the CLI's verify and migrate, the static engine for a notebook); an optional package.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"
PRAGMA = re.compile(r"\b(noqa(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?|pragma:[^#]*)")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def lazy_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports that do not run at the module's top: inside a function (or a class), or under an ``if``
    other than ``if TYPE_CHECKING:`` (whose ``else:`` runs, and counts). A module-level ``try:`` or
    ``with`` runs at import, as the top does."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt], lazy: bool) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if lazy:
                    found.append(node)
            elif isinstance(node, ast.If):
                visit(node.body, lazy or not _is_type_checking(node.test))
                visit(node.orelse, True)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(node.body, True)
            elif isinstance(node, ast.Match):
                for case in node.cases:
                    visit(case.body, True)
            else:  # try, with, for, while: the body runs where the statement does
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []), lazy)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, lazy)

    visit(tree.body, False)
    return found


def comments(source: str) -> set[int]:
    """The lines with a comment that says something (a pragma alone does not)."""
    out = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            words = PRAGMA.sub("", token.string.lstrip("#")).strip(" #-:;,()")
            if re.search(r"\w", words):
                out.add(token.start[0])
    return out


def uncommented(source: str) -> list[int]:
    """The first lines of the lazy imports that have no comment saying why."""
    tree = ast.parse(source)
    lines = source.splitlines()
    said = comments(source)
    import_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            import_lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    missing = []
    for node in lazy_imports(tree):
        if any(n in said for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)):
            continue
        above = node.lineno - 1  # up through the block of imports right above, to the comment on top of it
        while above >= 1 and above in import_lines:
            above -= 1
        while above >= 1 and lines[above - 1].lstrip().startswith("#") and above not in said:
            above -= 1  # a comment of several lines: its words may sit above a pragma or an empty '#'
        if not (above >= 1 and above in said and lines[above - 1].lstrip().startswith("#")):
            missing.append(node.lineno)
    return missing


def _files() -> list[Path]:
    return sorted(RUNTIME.rglob("*.py"))


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(RUNTIME)))
def test_every_lazy_import_says_why_it_waits(path):
    source = path.read_text()
    lines = source.splitlines()
    missing = [f"{path.relative_to(RUNTIME.parent)}:{n}: {lines[n - 1].strip()}" for n in uncommented(source)]
    assert not missing, "a lazy import with no comment saying why (or move it to the top):\n" + "\n".join(missing)


@pytest.mark.parametrize("source, expected", [
    ("import os\n", []),
    ("def f():\n    import os\n", [2]),
    ("def f():\n    import os  # noqa: F401\n", [2]),
    ("def f():\n    import torch  # the parent imports this module without torch\n", []),
    ("def f():\n    # the parent imports this module without torch\n    import torch\n", []),
    ("def f():\n    # torch: after the split\n    import torch\n    from . import harness\n"
     "    from ..steps import band\n", []),
    ("def f():\n    # torch: after the split\n    import torch\n\n    from . import harness\n", [5]),
    ("def f():\n    # torch: after the split\n    import torch\n    x = 1\n    import sys\n", [5]),
    ("def f():\n    import json\n    # a comment below says nothing of the import above\n", [2]),
    ("def f():\n    try:\n        import numpy  # optional package\n    except ImportError:\n        pass\n", []),
    ("def f():\n    try:\n        import numpy\n    except ImportError:\n        pass\n", [3]),
    ("if x:\n    import sys\n", [2]),
    ("if x:\n    pass\nelse:\n    import sys\n", [4]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n", []),
    ("import typing\nif typing.TYPE_CHECKING:\n    import torch\nelse:\n    import json\n", [5]),
    ("try:\n    import fcntl\nexcept ImportError:\n    fcntl = None\n", []),
    ("class C:\n    import os\n", [2]),
    ("def f():\n    # the parent imports this module without torch\n    # noqa\n    import torch\n", []),
    ("def f():\n    # noqa: F401\n    import torch\n", [3]),
    ("def f():\n    # optional\n    import a\n    import b  # b too\n    import c\n", []),
    ("def f():\n    from x import (\n        a,\n        b,  # the parent imports this module without it\n    )\n", []),
])
def test_the_check_itself(source, expected):
    assert uncommented(source) == expected
