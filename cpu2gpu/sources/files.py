"""Finding the files to process (writing them back is in ``writing.py``)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from pathlib import PurePosixPath
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
    error: Optional[str] = None  # why it cannot be read (a folder the walk could not list)


class PatternError(ValueError):
    """An exclude pattern that cannot match anything (``""``, ``"."``)."""


def check_patterns(patterns: Iterable[str]) -> None:
    """Raise ``PatternError`` naming the first pattern that ``Path.match`` refuses."""
    for pattern in patterns:
        try:
            PurePosixPath("x").match(pattern)
        except ValueError as error:
            raise PatternError(f"exclude pattern {pattern!r} cannot match a path ({error})") from None


def read_source(path: "str | os.PathLike[str]") -> bytes:
    """A file's bytes; ``OSError`` (``IsADirectoryError`` for a folder, ``NotRegularFileError`` for a
    device, a FIFO or a socket, which would never end or block the run) when it cannot be read."""
    with open(path, "rb", opener=_nonblocking) as handle:
        info = os.fstat(handle.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(path)
        return handle.read()


class NotRegularFileError(OSError):
    """A path that is neither a file nor a folder."""


def _nonblocking(path: str, flags: int) -> int:
    # Opening a FIFO for reading waits for a writer; with O_NONBLOCK it returns at once (and is refused).
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def _is_virtualenv(path: Path) -> bool:
    try:
        return (path / "pyvenv.cfg").exists()
    except OSError:  # a folder whose entries cannot be looked at: the walk reports it
        return False


def discover(paths: Sequence[str], exclude: Sequence[str] = (), respect_gitignore: bool = True,
             force_exclude: bool = False) -> Iterator[Target]:
    """Files named on the command line, then the Python files and notebooks of the folders, sorted.

    In folders, hidden folders, virtual environments, build output, what ``.gitignore``
    ignores and what matches ``exclude`` are skipped; a file named on the command line
    is always taken, unless ``force_exclude`` (as a pre-commit hook, which names every
    file, needs) and it matches ``exclude``.
    """
    check_patterns(exclude)
    for raw in paths:
        path = Path(raw)
        try:
            is_dir = path.is_dir()
        except OSError:  # in a folder that cannot be looked into: reading it says why
            is_dir = False
        if is_dir:
            yield from _walk(path, exclude, IgnoreRules.for_folder(path) if respect_gitignore else None)
        elif not (force_exclude and _excluded_anywhere(path, exclude)):
            yield Target(raw, True)


def _walk(root: Path, exclude: Sequence[str], ignored: Optional[IgnoreRules]) -> Iterator[Target]:
    found: list[str] = []
    unreadable: dict[str, str] = {}

    def failed(error: OSError) -> None:
        where = error.filename if isinstance(error.filename, str) else str(root)
        unreadable[where] = f"cannot read the folder: {error.strerror or error}"

    for folder, dirs, files in os.walk(root, onerror=failed):
        folder_path = Path(folder)
        if ignored is not None:
            ignored.enter(folder_path)
        dirs[:] = sorted(
            d for d in dirs
            if not skipped_dir(folder_path / d) and not _excluded(folder_path / d, exclude)
            and not (ignored is not None and ignored.ignores(folder_path / d, is_dir=True))
        )
        for name in files:
            path = folder_path / name
            if name.endswith(SOURCE_SUFFIXES) and not _excluded(path, exclude) and not (
                    ignored is not None and ignored.ignores(path, is_dir=False)) and regular_or_missing(path):
                found.append(str(path))
    for text in sorted([*found, *unreadable]):
        yield Target(text, False, unreadable.get(text))


def regular_or_missing(path: "str | Path") -> bool:
    """A regular file, or a link to one (a FIFO named ``x.py`` would block the run; a socket or a
    device is no source either). A file that vanished or cannot be looked at passes: reading it
    reports why."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True


def skipped_dir(path: Path) -> bool:
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
