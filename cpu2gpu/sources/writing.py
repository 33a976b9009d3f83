"""Writing a rewrite back: all or nothing, in the file's own bytes, never code that does not parse.

What each kind of file gets (the CLI reports a refusal on one line naming the file, exit 2):

- a regular file: replaced through a temp file in its folder (``os.replace``), keeping its mode
  and owner; the bytes come from libcst, which keeps the encoding, BOM and line endings;
- a symbolic link: the link stays, the file it points to is rewritten;
- a read-only file (no write bit, or not writable by us): refused, "file is read-only";
- a file that changed on disk since it was read: refused, left as it is;
- a rewrite that Python cannot parse: refused, the original is untouched.
- a file that cannot be decoded, a binary file: refused before this, by ``engine.parse``;
  an empty file has nothing to fix and is never written.

SIGINT and SIGTERM that arrive while a file is being replaced are held until the rename is
done, so an interrupted run leaves each file wholly old or wholly new and no temp file behind.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .syntax import rewrite_parse_problem

TEMP_SUFFIX = ".cpu2gpu-tmp"
_CHANGED = "file changed on disk while it was being rewritten; left as it is"
_HELD_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s)


class WriteError(Exception):
    """A file that was not written; the message says why, the file is as it was."""


def write_rewrite(path: str, old: bytes, new: bytes) -> None:
    """Replace the file at ``path``, read as ``old``, by ``new``; raise ``WriteError`` to refuse."""
    target = Path(os.path.realpath(path))  # through a symlink: the link stays, its target changes
    try:
        info = target.stat()
    except OSError as error:
        raise WriteError(f"cannot write the file: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise WriteError("not a regular file; left as it is")
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise WriteError("file is read-only; left as it is")
    # a notebook's JSON is not Python: its cells were checked one by one when they were rewritten
    problem = "" if path.endswith(".ipynb") else rewrite_parse_problem(old, new)
    if problem:
        raise WriteError(f"internal error: the rewrite does not parse ({problem}); file left unchanged")
    try:
        write_atomic(str(target), new, expected=old)
    except OSError as error:
        raise WriteError(f"cannot write the file: {error.strerror or error}") from None


def write_atomic(path: str, data: bytes, expected: bytes | None = None) -> None:
    """Replace ``path`` by ``data`` through a temp file in the same folder, keeping mode and owner.

    With ``expected``, refuse (``WriteError``) when the file no longer holds those bytes.
    """
    import tempfile  # (only a rewrite writes: a check does not load it, nor random and shutil behind it)

    target = Path(path)
    with _signals_held():
        info = target.stat()
        if expected is not None and target.read_bytes() != expected:
            raise WriteError(_CHANGED)
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=str(target.parent))
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temp, stat.S_IMODE(info.st_mode))
            if (info.st_uid, info.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.chown(temp, info.st_uid, info.st_gid)
                except OSError:  # not ours to give away: the file becomes the writer's
                    pass
            if expected is not None:
                # the temp file took time to write and sync: an edit made meanwhile must win
                _refuse_if_moved_on(target, info, expected)
            os.replace(temp, path)
        except BaseException:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass
            raise


def _refuse_if_moved_on(target: Path, before: os.stat_result, expected: bytes) -> None:
    """Raise ``WriteError`` when the file is no longer the one read: content, size, mtime, inode."""
    now = target.stat()
    same_file = (now.st_ino, now.st_size, now.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    if not same_file or target.read_bytes() != expected:
        raise WriteError(_CHANGED)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP for the duration, then deliver them to the handlers of before."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are only ever delivered to the main thread
        return
    pending: list[int] = []
    previous = {}
    for signum in _HELD_SIGNALS:
        handler = signal.getsignal(signum)
        if handler is None:  # installed outside Python: cannot be restored, leave it alone
            continue
        previous[signum] = handler
        signal.signal(signum, lambda number, frame: pending.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)
