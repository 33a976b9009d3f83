"""Finding the files to process, and writing them back without ever half-writing one."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

SKIPPED_DIRS = frozenset({
    "__pycache__", ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "env", ".env",
    "node_modules", "build", "dist", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".cpu2gpu_cache",
    "site-packages", ".eggs",
})
SOURCE_SUFFIXES = (".py",)


@dataclass(frozen=True)
class Target:
    path: str  # as the user will read it
    named: bool  # given on the command line (always parsed) rather than found in a folder


def _is_virtualenv(path: Path) -> bool:
    return (path / "pyvenv.cfg").exists()


def discover(paths: Sequence[str], exclude: Sequence[str] = ()) -> Iterator[Target]:
    """Files named on the command line, then the Python files of the folders, sorted."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from _walk(path, exclude)
        else:
            yield Target(raw, True)


def _walk(root: Path, exclude: Sequence[str]) -> Iterator[Target]:
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        folder_path = Path(folder)
        dirs[:] = sorted(
            d for d in dirs
            if d not in SKIPPED_DIRS and not d.endswith(".egg-info") and not _is_virtualenv(folder_path / d)
            and not _excluded(folder_path / d, exclude)
        )
        for name in files:
            if name.endswith(SOURCE_SUFFIXES) and not _excluded(folder_path / name, exclude):
                found.append(str(folder_path / name))
    for path in sorted(found):
        yield Target(path, False)


def _excluded(path: Path, patterns: Iterable[str]) -> bool:
    return any(path.match(p) or path.name == p for p in patterns)


def mentions_torch(data: bytes) -> bool:
    """The cheap pre-filter for folder walks: no 'torch' in the bytes, nothing to report."""
    return b"torch" in data


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` through a temp file in the same folder, keeping its mode."""
    target = Path(path)
    mode = target.stat().st_mode & 0o7777
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".cpu2gpu", dir=str(target.parent))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
