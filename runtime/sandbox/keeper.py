"""The run's keeper: the child process splits in two before anything else.

- The lower half runs the script, confined (isolation.py: Landlock) and watched (writewatch.py).
- The upper half, the keeper, stays outside the sandbox: it answers the write watch, adopts every
  process the run orphans (a child subreaper: a daemon that setsids and double-forks lands here, not at
  init), forwards SIGTERM to the run (the parent's timeout, torchrun), and when the run ends (or its
  own parent dies) it kills whatever is left below it, then exits with the run's exit code.

The keeper is the run's ancestor, which is what reading its memory needs where Yama restricts ptrace.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time

from . import isolation, proctree, writewatch

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
POLL_MS = 50
REAP_S = 5.0
LOST = 70 << 8  # the wait status of a run whose end was not seen: exit code 70 (EX_SOFTWARE)


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)) == 0


def become_subreaper() -> bool:
    """Orphans below this process come to it rather than to init (Linux 3.4+)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def split(private: str, orig_root: str, record_to: str, kernel: bool = True) -> dict:
    """Fork. In the run (the child) return the isolation record; in the keeper never return.
    ``private``: the run's own folder; ``orig_root``: the user's; ``record_to``: the watch's record file;
    ``kernel``: False keeps the run to the audit hook (no Landlock, no watch), the keeper still reaps."""
    if not hasattr(os, "fork"):
        return isolation.finish({"kind": isolation.AUDIT_HOOK, "why": "no fork on this system"}, None)
    become_subreaper()
    ours, theirs = socket.socketpair()
    keeper = os.getpid()
    pid = os.fork()
    if pid == 0:
        ours.close()
        return _confine_run(keeper, private, theirs, kernel)
    theirs.close()
    code = _keep(pid, ours, private, orig_root, record_to)
    os._exit(code)


def _confine_run(keeper: int, private: str, channel: socket.socket, kernel: bool) -> dict:
    # Gone with the keeper: nobody would answer the watch, nor end the run's processes.
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != keeper:
        os._exit(70)
    listener = None
    if not kernel:
        why = f"{isolation.CHOICE_VARIABLE}=audit-hook"
        record = {"kind": isolation.AUDIT_HOOK, "why": why}
    else:
        record = isolation.confine(private)
        why = None
        try:
            listener = writewatch.install()
        except (writewatch.Unavailable, OSError) as e:
            why = str(e)
    hello = json.dumps({"landlock": record["kind"] == isolation.LANDLOCK}).encode()
    try:
        socket.send_fds(channel, [hello], [listener] if listener is not None else [])
    except OSError:
        pass
    if listener is not None:
        os.close(listener)  # the keeper holds it; the script must not answer its own calls
    channel.close()
    return isolation.finish(record, "seccomp" if listener is not None else None, why)


def _keep(run: int, channel: socket.socket, private: str, orig_root: str, record_to: str) -> int:
    signal.signal(signal.SIGTERM, lambda *_: _forward(run))
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the parent decides; the run gets what it is sent
    listener = watch = None
    try:
        hello, fds, _, _ = socket.recv_fds(channel, 4096, 1)
        channel.close()
        if fds:
            listener = fds[0]
            landlocked = bool(json.loads(hello or b"{}").get("landlock"))
            watch = writewatch.Watch(os.path.realpath(orig_root), os.path.realpath(private),
                                     isolation.writable(private), landlocked, record_to)
    except (OSError, ValueError):
        pass
    status = _supervise(run, listener, watch, os.getppid())
    proctree.kill_family(os.getpid(), include_root=False)
    _reap_all()
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _forward(run: int) -> None:
    try:
        os.kill(run, signal.SIGTERM)
    except OSError:
        pass


def _supervise(run: int, listener: int | None, watch: writewatch.Watch | None, parent: int) -> int:
    """Answer the watch until the run exits; its wait status. Should the parent die (verify killed
    outright, torchrun gone), the run and all below it are ended: nobody is left to stop them."""
    poller = select.poll()
    if listener is not None:
        poller.register(listener, select.POLLIN)
    watching = listener is not None
    while True:
        if watching:
            for _fd, events in poller.poll(POLL_MS):
                if events & select.POLLIN and watch is not None and listener is not None:
                    watch.serve_one(listener)
                elif events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) and listener is not None:
                    poller.unregister(listener)  # no watched process is left
                    watching = False
        else:
            time.sleep(POLL_MS / 1000)
        status = _reaped(run)
        if status is not None:
            return status
        if os.getppid() != parent:
            proctree.kill_family(os.getpid(), include_root=False)


def _reaped(run: int) -> int | None:
    """Collect dead children (the run, and orphans this subreaper adopted); the run's status once it is."""
    found = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child at all: the run is gone, and not by our wait
            return found if found is not None else LOST
        if pid == 0:
            return found
        if pid == run:
            found = status


def _reap_all() -> None:
    deadline = time.monotonic() + REAP_S
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)
