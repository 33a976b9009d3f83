"""No module of either half takes an underscore name from another module of the package.

A leading underscore says "only this module uses it": a name another module imports (``from .core
import _x``), or reads off an imported module (``engine._x``, ``getattr(engine, "_x")``), is shared, and is
then public, named for what it does. Dunder names (``__version__``) are public. Read from the source with
``ast``: nothing is imported, torch is not needed. The tests themselves may use private names.

- ``cpu2gpu/``, the static half, and ``runtime/``, installed as ``cpu2gpu.runtime``: every import, at the
  top, inside a function or under ``if TYPE_CHECKING:``.
- Only names of the package count: ``torch._C`` or ``sys._getframe`` are another project's business.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
HALVES = {"cpu2gpu": "cpu2gpu", "runtime": "cpu2gpu.runtime"}  # folder -> its import name

def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ours(dotted: str) -> bool:
    return dotted == "cpu2gpu" or dotted.startswith("cpu2gpu.")


def _is_module(dotted: str) -> bool:
    """Whether an import name of the package is a module (or a package) rather than a name in one."""
    parts = dotted.split(".")
    if parts[:2] == ["cpu2gpu", "runtime"]:
        path = ROOT.joinpath("runtime", *parts[2:])
    else:
        path = ROOT.joinpath("cpu2gpu", *parts[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _module_of(path: Path) -> tuple[str, str]:
    """A source file's import name and the package its relative imports start from."""
    for folder, dotted in HALVES.items():
        if path.is_relative_to(ROOT / folder):
            parts = [*dotted.split("."), *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                return ".".join(parts[:-1]), ".".join(parts[:-1])
            return ".".join(parts), ".".join(parts[:-1])
    raise ValueError(path)


def _dotted(node: ast.AST, modules: dict[str, str]) -> str | None:
    """The import name an expression stands for (``F`` or ``cpu2gpu.engine``), when it names an imported module."""
    if isinstance(node, ast.Name):
        return modules.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, modules)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def private_names_taken(source: str, module: str, package: str,
                        is_module: Callable[[str], bool] = _is_module) -> Iterator[tuple[int, str]]:
    """(line, the private name as ``module._name``) for every underscore name of another module of the
    package that this source imports or reads off an imported module."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> the module of the package it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if not _ours(target):
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if _private(alias.name) or any(_private(part) for part in target.split(".")):
                    yield node.lineno, full
                if is_module(full):
                    modules[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not _ours(alias.name):
                    continue
                if any(_private(part) for part in alias.name.split(".")):
                    yield node.lineno, alias.name
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:  # import cpu2gpu.engine binds cpu2gpu
                    modules["cpu2gpu"] = "cpu2gpu"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = _dotted(node.value, modules)
            if base is not None and is_module(base):
                yield node.lineno, f"{base}.{node.attr}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2:
            base = _dotted(node.args[0], modules)
            name = node.args[1]
            if base is not None and is_module(base) and isinstance(name, ast.Constant) \
                    and isinstance(name.value, str) and _private(name.value):
                yield node.lineno, f"{base}.{name.value}"


def _taken() -> dict[tuple[str, str], list[int]]:
    """(file, private name) -> the lines that take it, over both halves."""
    found: dict[tuple[str, str], list[int]] = {}
    for folder in HALVES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            module, package = _module_of(path)
            for line, name in private_names_taken(path.read_text(encoding="utf-8"), module, package):
                found.setdefault((path.relative_to(ROOT).as_posix(), name), []).append(line)
    return found


def test_no_module_takes_a_private_name_from_another():
    taken = _taken()
    wrong = [f"{file}:{line}: {name}" for (file, name), lines in sorted(taken.items())
             for line in lines]
    assert not wrong, "underscore names shared between modules (make them public):\n" + "\n".join(wrong)


@pytest.mark.parametrize("source,expected", [
    ("from .core import _x, y", ["cpu2gpu.analysis.core._x"]),
    ("from ..engine import _deep as deep", ["cpu2gpu.engine._deep"]),
    ("from cpu2gpu.analysis.core import Scope as _Scope, __doc__", []),  # a private alias of a public name
    ("from . import core\ncore._role(x)", ["cpu2gpu.analysis.core._role"]),
    ("from .. import engine as e\ne._fixed_bytes", ["cpu2gpu.engine._fixed_bytes"]),
    ("import cpu2gpu.engine\ncpu2gpu.engine._deep", ["cpu2gpu.engine._deep"]),
    ("import cpu2gpu.engine as e\ngetattr(e, '_deep')", ["cpu2gpu.engine._deep"]),
    ("def f():\n    from .core import _lazy", ["cpu2gpu.analysis.core._lazy"]),
    ("if TYPE_CHECKING:\n    from .core import _T", ["cpu2gpu.analysis.core._T"]),
    ("from .core import Scope\nScope._cache", []),  # a class's attribute, not a module's
    ("import torch\ntorch._C\nfrom torch import _C\nimport sys\nsys._getframe()", []),  # not ours
    ("self._x = other._y", []),
])
def test_what_counts_as_taking_a_private_name(source, expected):
    def is_module(dotted: str) -> bool:
        return dotted in ("cpu2gpu", "cpu2gpu.engine", "cpu2gpu.analysis", "cpu2gpu.analysis.core")

    found = [name for _, name in private_names_taken(source, "cpu2gpu.analysis.statements", "cpu2gpu.analysis",
                                                     is_module)]
    assert found == expected
