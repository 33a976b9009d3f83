"""Child side: the script runs in a copy of its folder and must never write into the original.

The copy holds clones or copies of the user's files, and links to the largest ones (see
``runner.copy_tree``). A write through such a link would land in the user's file, so every write
path the interpreter offers is watched with an audit hook (PEP 578): ``open``/``io.open``/
``os.open`` (which numpy, pathlib and shutil go through), ``os.truncate``, ``os.remove``,
``os.rename``/``os.replace``, ``os.chmod``/``os.utime``/``os.chown``, ``shutil.rmtree``; plus
torch's writers that open files in C++ (``torch.save`` of a path, ``torch.jit.save``), and
``sqlite3.connect``.

- A write to one of our links first replaces the link by a private file (a copy when the write
  keeps the old bytes: append, ``r+``), so the script sees its own file and the original is
  untouched.
- Any other write that would land inside the original folder (an absolute path into it, a path
  through a linked folder) is refused with ``PermissionError``: the run fails and says why.

- Before another program starts (``subprocess``, ``os.system``, ``os.exec*``, ``posix_spawn``),
  which no hook of ours can watch, every link is replaced by a copy: the copy is then complete.

Other native code that opens files itself (a C extension writing by path) is not seen; the
parent compares the linked originals before and after the run and fails the run if one moved.
"""

from __future__ import annotations

import os
import shutil
import sys

_SPAWN_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "pty.spawn"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class Sandbox:
    def __init__(self, workdir: str, orig_root: str) -> None:
        self.workdir = os.path.realpath(workdir)
        # the run's own temp folder (the work copy's parent) may lie inside the original root
        self.private = os.path.dirname(os.path.dirname(self.workdir))
        self.orig_root = os.path.realpath(orig_root)
        self._materialized = False

    # --- what a path means --------------------------------------------------------------
    @staticmethod
    def _inside(path: str, root: str) -> bool:
        return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

    def _is_original(self, real: str) -> bool:
        return self._inside(real, self.orig_root) and not self._inside(real, self.private)

    def _our_link(self, path: str) -> bool:
        """A link in the work copy that leads out of it (to an original)."""
        if not os.path.islink(path):
            return False
        parent = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        return self._inside(parent, self.workdir) and not self._inside(os.path.realpath(path), self.workdir)

    # --- what to do before a write ------------------------------------------------------
    def before_write(self, file, keeps_content: bool) -> None:
        """Make a write to ``file`` land in the copy, or refuse it."""
        if not isinstance(file, (str, bytes, os.PathLike)):
            return  # a file descriptor: it was opened through this guard
        path = os.path.abspath(os.fsdecode(file))
        if self._our_link(path):
            target = os.path.realpath(path)
            os.unlink(path)
            if keeps_content and os.path.isfile(target):
                shutil.copy2(target, path)
            else:  # the write starts from nothing, but the file still exists (O_TRUNC, "x")
                open(path, "wb").close()
                shutil.copymode(target, path)
            return
        if self._is_original(os.path.realpath(path)):
            raise PermissionError(f"cpu2gpu verify: the run may not write into the original folder ({path})")

    def before_entry_change(self, file) -> None:
        """Remove or rename: the entry itself goes (a link goes, not its target)."""
        if not isinstance(file, (str, bytes, os.PathLike)):
            return
        path = os.path.abspath(os.fsdecode(file))
        parent = os.path.realpath(os.path.dirname(path))
        if self._is_original(os.path.join(parent, os.path.basename(path))):
            raise PermissionError(f"cpu2gpu verify: the run may not change the original folder ({path})")

    def materialize_links(self) -> None:
        """Replace every link to an original by a copy (once: later walks find none)."""
        if self._materialized:
            return
        self._materialized = True
        for dirpath, dirnames, filenames in os.walk(self.workdir):
            for name in filenames + dirnames:
                path = os.path.join(dirpath, name)
                if self._our_link(path) and os.path.isfile(path):
                    target = os.path.realpath(path)
                    os.unlink(path)
                    shutil.copy2(target, path)

    # --- the audit hook -----------------------------------------------------------------
    def audit(self, event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            if isinstance(mode, str):
                writes = any(c in mode for c in "wax+")
                keeps = writes and "w" not in mode and "x" not in mode
            else:
                flags = flags or 0
                writes = bool(flags & _WRITE_FLAGS)
                keeps = writes and not flags & os.O_TRUNC
            if writes:
                self.before_write(path, keeps)
        elif event in ("os.truncate", "os.chmod", "os.chown", "os.utime"):
            self.before_write(args[0], keeps_content=True)
        elif event in ("os.remove", "os.rmdir", "shutil.rmtree"):
            self.before_entry_change(args[0])
        elif event == "sqlite3.connect":
            self.before_write(args[0], keeps_content=True)
        elif event in _SPAWN_EVENTS:
            self.materialize_links()
        elif event == "os.rename":
            self.before_entry_change(args[0])
            self.before_entry_change(args[1])


def _wrap_path_writer(owner, name: str, sandbox: Sandbox, path_arg: int = 0) -> None:
    """Guard a writer that opens its file in native code: break our link first."""
    original = getattr(owner, name, None)
    if original is None:
        return

    def guarded(*args, **kwargs):
        if len(args) > path_arg and isinstance(args[path_arg], (str, bytes, os.PathLike)):
            sandbox.before_write(args[path_arg], keeps_content=False)
        return original(*args, **kwargs)

    setattr(owner, name, guarded)


def install(workdir: str, orig_root: str) -> Sandbox:
    sandbox = Sandbox(workdir, orig_root)
    sys.addaudithook(sandbox.audit)
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        # torch.save(obj, "x.pt") opens "x.pt" in C++ through PyTorchFileWriter
        _wrap_path_writer(torch._C, "PyTorchFileWriter", sandbox)
        _wrap_path_writer(torch.jit, "save", sandbox, path_arg=1)
    return sandbox
