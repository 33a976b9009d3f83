"""Telling "the script needs data that is not here" apart from a failure of the migration.

Under ``--synthetic-data`` a run that fails because a file it reads does not
exist did not show anything about the migration: it is reported as "needs
data: PATH". A path the script itself wrote (or removed) earlier in the run is
its own output, not input data: failing to find it again is the script's
failure, not missing data, so the child keeps a set of those paths.
"""

from __future__ import annotations

import errno
import os
import re
import sys

# Messages of readers that raise without a filename (h5py, Hugging Face, DataLoader
# workers re-raising a FileNotFoundError as text).
_PATTERNS = (
    re.compile(r"No such file or directory: '([^']+)'"),
    re.compile(r"No such file or directory: \"([^\"]+)\""),
    re.compile(r"unable to open file: name = '([^']+)'"),
    re.compile(r"Unable to find '([^']+)'"),
    re.compile(r"[Ff]ile (?:does not exist|not found): '?([^'\s]+)'?"),
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class NeedsData(FileNotFoundError):
    """Raised by a stand-in in place of a data set it cannot make (its files are needed)."""

    def __init__(self, path, what: str, is_path: bool = True):
        super().__init__(errno.ENOENT, f"{what} has no synthetic stand-in and needs its data", os.fspath(path))
        self.what = what
        self.is_path = is_path  # False for a name such as a hub data set's


class Tracker:
    """The paths the script wrote, created or removed in this run (absolute)."""

    def __init__(self) -> None:
        self.own: set = set()

    def _note(self, path) -> None:
        if isinstance(path, (str, bytes, os.PathLike)):
            try:
                self.own.add(os.path.abspath(os.fsdecode(path)))
            except (TypeError, ValueError):
                pass

    def audit(self, event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
            if writes:
                self._note(path)
        elif event in ("os.mkdir", "os.remove", "os.rmdir", "shutil.rmtree", "os.symlink", "os.link"):
            self._note(args[0] if event not in ("os.symlink", "os.link") else args[1])
        elif event == "os.rename":
            self._note(args[0])
            self._note(args[1])
        elif event == "shutil.copyfile":
            self._note(args[1])

    def is_own(self, path: str) -> bool:
        return os.path.abspath(path) in self.own


def install() -> Tracker:
    tracker = Tracker()
    sys.addaudithook(tracker.audit)
    return tracker


def exception_chain(exc):
    """The exception and those it was raised from or during (a ``sys.exit`` in an ``except`` block)."""
    seen, todo = [], [exc]
    while todo and len(seen) < 20:
        e = todo.pop(0)
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
    return seen


def _missing_path(e) -> str | None:
    if isinstance(e, NeedsData):
        return e.filename
    is_missing = isinstance(e, FileNotFoundError) or (isinstance(e, OSError) and e.errno == errno.ENOENT)
    if not is_missing:
        return None
    if e.filename:
        return os.fsdecode(e.filename)
    text = str(e)
    for pattern in _PATTERNS:
        m = pattern.search(text)
        if m:
            return m.group(1)
    return None


def find(exc: BaseException, tracker: Tracker | None) -> dict | None:
    """The data the failed run was missing: {"path", "what"}, or None when it failed for another reason."""
    for e in exception_chain(exc):
        path = _missing_path(e)
        if path is None:
            continue
        if not isinstance(e, NeedsData) and tracker is not None and tracker.is_own(path):
            return None  # the script's own output: a failure of the script
        if not getattr(e, "is_path", True):
            return {"path": path, "what": e.what, "is_path": False}
        return {"path": os.path.abspath(path), "what": getattr(e, "what", None), "is_path": True}
    return None


def locate(path: str, workdir: str, orig_root: str) -> tuple:
    """Where the missing path lies for the user (the run works in a copy), and whether it exists
    there: then the data is there, but outside the folder that each run copies."""
    workdir = os.path.realpath(workdir)
    real = os.path.realpath(path)
    copy_base = os.path.dirname(workdir)  # the copy's parent holds paths like ../data
    if real == workdir or real.startswith(copy_base + os.sep):
        original = os.path.normpath(os.path.join(orig_root, os.path.relpath(real, workdir)))
    else:
        original = real
    return original, os.path.exists(original)
