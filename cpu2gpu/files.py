"""Finding the files to process (writing them back is in ``writing.py``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

from .ignore import IgnoreRules

SKIPPED_DIRS = frozenset({
    "__pycache__", "venv", "env", "node_modules", "build", "dist", "site-packages",
})
SOURCE_SUFFIXES = (".py", ".ipynb")


@dataclass(frozen=True)
class Target:
    path: str  # as the user will read it
    named: bool  # given on the command line (always parsed) rather than found in a folder


def _is_virtualenv(path: Path) -> bool:
    return (path / "pyvenv.cfg").exists()


def discover(paths: Sequence[str], exclude: Sequence[str] = (), respect_gitignore: bool = True,
             force_exclude: bool = False) -> Iterator[Target]:
    """Files named on the command line, then the Python files and notebooks of the folders, sorted.

    In folders, hidden folders, virtual environments, build output, what ``.gitignore``
    ignores and what matches ``exclude`` are skipped; a file named on the command line
    is always taken, unless ``force_exclude`` (as a pre-commit hook, which names every
    file, needs) and it matches ``exclude``.
    """
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from _walk(path, exclude, IgnoreRules.for_folder(path) if respect_gitignore else None)
        elif not (force_exclude and _excluded_anywhere(path, exclude)):
            yield Target(raw, True)


def _walk(root: Path, exclude: Sequence[str], ignored: Optional[IgnoreRules]) -> Iterator[Target]:
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        folder_path = Path(folder)
        if ignored is not None:
            ignored.enter(folder_path)
        dirs[:] = sorted(
            d for d in dirs
            if not _skipped_dir(folder_path / d) and not _excluded(folder_path / d, exclude)
            and not (ignored is not None and ignored.ignores(folder_path / d, is_dir=True))
        )
        for name in files:
            path = folder_path / name
            if name.endswith(SOURCE_SUFFIXES) and not _excluded(path, exclude) and not (
                    ignored is not None and ignored.ignores(path, is_dir=False)):
                found.append(str(path))
    for path in sorted(found):
        yield Target(path, False)


def _skipped_dir(path: Path) -> bool:
    name = path.name
    return (name.startswith(".") or name in SKIPPED_DIRS or name.endswith(".egg-info")
            or _is_virtualenv(path))


def _excluded(path: Path, patterns: Iterable[str]) -> bool:
    return any(path.match(p) or path.name == p for p in patterns)


def _excluded_anywhere(path: Path, patterns: Sequence[str]) -> bool:
    """The file or one of its folders matches a pattern (the walk would not have reached it)."""
    return bool(patterns) and any(_excluded(candidate, patterns) for candidate in (path, *path.parents)
                                  if candidate.name)


def mentions_torch(data: bytes) -> bool:
    """The cheap pre-filter for folder walks: no 'torch' in the bytes, nothing to report."""
    return b"torch" in data
