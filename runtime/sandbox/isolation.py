"""Which isolation a run gets, and what it leaves open (the run's result and verify's report say both).

On Linux with Landlock (ABI 2+) the kernel lets the run, and every process it starts, write only in the
run's own folder (the copy, its TMPDIR and HOME) and under /dev; the write watch (writewatch.py, seccomp)
names each attempt at the user's folder and refuses there the changes of metadata that Landlock lets
through. Without them, the audit hook (sandbox.py) is the only guard, and it sees only what Python does.
Either way the parent compares the user's folder after the run (folderstate.py).
"""

from __future__ import annotations

import os

from . import landlock

LANDLOCK, AUDIT_HOOK = "landlock", "audit hook"
CHOICE_VARIABLE = "CPU2GPU_ISOLATION"  # "audit-hook": the fallback alone (a kernel that misbehaves; tests)
DEVICES = "/dev"  # /dev/null, /dev/shm (loader workers' shared memory), the GPU's device files

NOT_COVERED = {
    (LANDLOCK, True): "reading stays allowed everywhere; the network and programs outside the run (a server "
                      "the script talks to) are not confined; chmod/chown/utime in the user's folder are refused "
                      "by the write watch, which a second thread racing it could slip past",
    (LANDLOCK, False): "reading stays allowed everywhere; the network is not confined; a refused write is "
                       "reported only when Python made it (native code and programs just see EACCES); chmod/chown/"
                       "utime are refused only for Python's own calls",
    (AUDIT_HOOK, True): "only what Python itself does is refused by the audit hook, and the user's folder by the "
                        "write watch (a second thread racing it could slip past); other places can be written",
    (AUDIT_HOOK, False): "only what Python itself does: native code, ctypes and other programs can write "
                         "anywhere (the parent then finds the user's files changed, after the fact); an open "
                         "relative to a dir_fd is not resolved",
}


def writable(private: str) -> list[str]:
    """Where the run may write: its own folder (which holds the copy, TMPDIR and HOME) and /dev."""
    return [os.path.realpath(p) for p in (private, DEVICES) if os.path.isdir(p)]


def confine(private: str) -> dict:
    """Apply Landlock to this process (call it while it has one thread); the record of what holds."""
    try:
        abi = landlock.restrict(writable(private))
    except (landlock.Unavailable, OSError) as e:
        return {"kind": AUDIT_HOOK, "why": str(e)}
    return {"kind": LANDLOCK, "abi": abi, "writable": writable(private)}


def finish(record: dict, watch: str | None, why_no_watch: str | None = None) -> dict:
    """The record with the write watch added and what the isolation does not cover."""
    record = dict(record, watch=watch)
    if why_no_watch:
        record["why_no_watch"] = why_no_watch
    record["not_covered"] = NOT_COVERED[(record["kind"], watch is not None)]
    return record


def describe(record: dict | None) -> str:
    """One line for the text report."""
    if not record:
        return "isolation: none recorded"
    if record["kind"] == LANDLOCK:
        head = f"Landlock (ABI {record.get('abi')}): writes only in the run's own folder and /dev"
    else:
        head = "the audit hook (Python's own writes into the user's folder refused)"
        if record.get("why"):
            head += f"; no Landlock: {record['why']}"
    if record.get("watch"):
        head += f", {record['watch']} names each attempt at the user's folder"
    return f"isolation: {head}. Not covered: {record.get('not_covered', '')}"
