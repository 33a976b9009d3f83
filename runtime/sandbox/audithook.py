"""Child side: the script runs in a copy of its folder and must never write into the original.

The copy holds clones or copies of the user's files, and links to the largest ones (see
``runner.copy_tree``). A write through such a link would land in the user's file, so every write
path the interpreter offers is watched with an audit hook (PEP 578): ``open``/``io.open``/
``os.open`` (which numpy, pathlib and shutil go through), ``os.truncate``, ``os.remove``,
``os.rename``/``os.replace``, ``os.mkdir``, ``os.link``/``os.symlink``, ``os.chmod``/``os.utime``/
``os.chown``, ``shutil.rmtree`` (a ``dir_fd`` resolved where the event gives it: not ``open``'s); plus
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
parent compares the user's folder before and after the run and fails the run if a file moved. Where
the kernel confines the run (isolation.py: Landlock), this hook still turns writes to our links into
private files, and its refusals come first for what Python does. Every refusal is recorded
(``refused``): a script that catches the PermissionError must not pass.
"""

from __future__ import annotations

import os
import shutil
import sys

from ..records import RefusedWrite

_SPAWN_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "pty.spawn"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class Sandbox:
    def __init__(self, workdir: str, orig_root: str) -> None:
        self.workdir = os.path.realpath(workdir)
        # the run's own temp folder (the work copy's parent) may lie inside the original root
        self.private = os.path.dirname(os.path.dirname(self.workdir))
        self.orig_root = os.path.realpath(orig_root)
        self._materialized = False
        self.refused: list[RefusedWrite] = []  # the writes refused, for the verdict

    def _refuse(self, path: str, event: str, what: str) -> None:
        if len(self.refused) < 50:
            self.refused.append({"path": path, "call": event, "place": "original", "by": "audit hook"})
        raise PermissionError(f"cpu2gpu verify: the run may not {what} the original folder ({path})")

    @staticmethod
    def _path(file, dir_fd=None) -> str:
        """``file`` as an absolute path; relative to ``dir_fd`` when one is given (Linux: /proc/self/fd)."""
        path = os.fsdecode(file)
        if isinstance(dir_fd, int) and not os.path.isabs(path):
            try:
                return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
            except OSError:
                pass
        return os.path.abspath(path)

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
    def before_write(self, file, keeps_content: bool, dir_fd=None, event: str = "open") -> None:
        """Make a write to ``file`` land in the copy, or refuse it."""
        if not isinstance(file, (str, bytes, os.PathLike)):
            return  # a file descriptor: it was opened through this guard
        path = self._path(file, dir_fd)
        if self._our_link(path):
            target = os.path.realpath(path)
            os.unlink(path)
            if keeps_content and os.path.isfile(target):
                shutil.copy2(target, path)
            else:  # the write starts from nothing, but the file still exists (O_TRUNC, "x")
                open(path, "wb").close()
                shutil.copymode(target, path)
            return
        if self._is_original(os.path.realpath(path)) and not _bytecode_cache(path):
            self._refuse(path, event, "write into")

    def before_entry_change(self, file, dir_fd=None, event: str = "os.rename") -> None:
        """Remove, rename, make or link: the entry itself changes (a link goes, not its target)."""
        if not isinstance(file, (str, bytes, os.PathLike)):
            return
        path = self._path(file, dir_fd)
        parent = os.path.realpath(os.path.dirname(path))
        if self._is_original(os.path.join(parent, os.path.basename(path))) and not _bytecode_cache(path):
            self._refuse(path, event, "change")

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
        elif event == "os.truncate":
            self.before_write(args[0], keeps_content=True, event=event)
        elif event in ("os.chmod", "os.chown", "os.utime"):  # the dir_fd comes last
            self.before_write(args[0], keeps_content=True, dir_fd=args[-1], event=event)
        elif event in ("os.remove", "os.rmdir", "shutil.rmtree", "os.mkdir"):
            self.before_entry_change(args[0], args[-1] if event != "shutil.rmtree" else None, event)
        elif event == "sqlite3.connect":
            self.before_write(args[0], keeps_content=True, event=event)
        elif event in _SPAWN_EVENTS:
            self.materialize_links()
        elif event in ("os.rename", "os.link"):  # (src, dst, src_dir_fd, dst_dir_fd): a link to an original
            self.before_entry_change(args[0], args[2], event)  # would let a later write reach it
            self.before_entry_change(args[1], args[3], event)
        elif event == "os.symlink":  # (src, dst, dir_fd): only the new entry changes a folder
            self.before_entry_change(args[1], args[2], event)


def _bytecode_cache(path: str) -> bool:
    """importlib caching bytecode beside a module reached through a link: refused quietly, not the script's."""
    parent, name = os.path.split(path)
    return name == "__pycache__" or (os.path.basename(parent) == "__pycache__" and ".pyc" in name)


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
