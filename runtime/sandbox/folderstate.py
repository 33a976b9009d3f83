"""The user's folder before and after a run: what changed (a write that no guard saw, after the fact).

Each entry's kind, size, mtime, mode and owner, not its bytes: reading every byte of a data set twice
would cost more than the run. Where the kernel confined the run (isolation.py), the run could not have
made a change, so the parent does not compare (someone editing the folder meanwhile is not the run).
"""

from __future__ import annotations

import os
import stat

MAX_ENTRIES = 100_000  # past this the rest of the folder is not compared
OWN_PREFIX = "cpu2gpu-"  # the runs' own temporary folders, when the folder copied is a temporary one


def snapshot(root: str, skip_dirs: set, private: str | None = None) -> dict:
    """{path relative to root: (kind, size, mtime_ns, mode, uid, gid)} of the folder's entries."""
    out: dict = {}
    skip_real = os.path.realpath(private) if private else None
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip_dirs and not d.startswith(OWN_PREFIX)
                       and os.path.realpath(os.path.join(dirpath, d)) != skip_real]
        for name in dirnames + filenames:
            if name.startswith(OWN_PREFIX):
                continue
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            kind = stat.S_IFMT(info.st_mode)
            is_dir = stat.S_ISDIR(info.st_mode)
            # a folder's own size and mtime move with its entries, which are compared one by one
            out[os.path.relpath(path, root)] = (kind, 0 if is_dir else info.st_size, 0 if is_dir else info.st_mtime_ns,
                                                info.st_mode, info.st_uid, info.st_gid)
            if len(out) >= MAX_ENTRIES:
                return out
    return out


def changes(before: dict, root: str, skip_dirs: set, private: str | None = None) -> list[str]:
    """The entries (relative paths) added, removed or changed since ``before``."""
    if not before and not os.path.isdir(root):
        return []
    after = snapshot(root, skip_dirs, private)
    if len(before) >= MAX_ENTRIES:  # compare only what was seen before
        after = {k: v for k, v in after.items() if k in before}
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
