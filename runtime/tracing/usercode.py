"""The user's files as the run compiles them: loops capped (cappedloops) and lines recorded (linetrace).

The script, the modules of the user's folder it imports and a notebook's cells are compiled from
their source with the transforms the run needs, on the same lines and columns, so that tracebacks,
diagnoses and line numbers stay the user's; never from a cached ``.pyc``.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import runpy
import sys
from typing import Callable

# What each transform does to a file's tree; installed by cappedloops and linetrace.
_TRANSFORMS: list[Callable[[ast.Module, str], ast.Module]] = []


def add_transform(transform: Callable[[ast.Module, str], ast.Module]) -> None:
    if transform not in _TRANSFORMS:
        _TRANSFORMS.append(transform)


def compile_user(source: bytes, path: str):
    """The code of one of the user's files (or cells) with every installed transform applied."""
    if not _TRANSFORMS:
        return compile(source, path, "exec", dont_inherit=True)
    tree = ast.parse(source, path)
    for transform in _TRANSFORMS:
        tree = transform(tree, path)
    return compile(ast.fix_missing_locations(tree), path, "exec", dont_inherit=True)


class _UserLoader(importlib.machinery.SourceFileLoader):
    """A user's module, compiled with the run's transforms."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return compile_user(self.get_data(path), path)


class _UserFiles(importlib.abc.MetaPathFinder):
    def __init__(self, is_user_file) -> None:
        self.is_user_file = is_user_file

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None
        if not spec.origin or not self.is_user_file(spec.origin):
            return None
        spec.loader = _UserLoader(fullname, spec.origin)
        return spec


def install(is_user_file) -> None:
    """Compile the user's modules imported from now on with the run's transforms."""
    sys.meta_path.insert(0, _UserFiles(is_user_file))


def run_script(path: str) -> dict:
    """``runpy.run_path(path, run_name="__main__")``, compiled with the run's transforms."""
    run_code = getattr(runpy, "_run_module_code", None)
    if run_code is None:
        return runpy.run_path(path, run_name="__main__")
    with open(path, "rb") as f:
        source = f.read()
    return run_code(compile_user(source, path), None, "__main__", None, "", path)
