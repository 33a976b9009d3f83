"""The parent's side of "nothing left running": every run's processes end when verify or migrate ends.

Each run registers its child (the keeper, keeper.py) and its temporary folder while it lasts. A run
that ends normally ends its own family (runner.py). ``guard()`` covers the rest for the command line:
on SIGINT, SIGTERM or SIGHUP, or any exception, it kills every live run's family and the processes
that carry a run's marker, removes their folders, and exits 130, 143 or 129. The command line also
becomes a child subreaper, so that a process whose keeper died comes here, not to init.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from . import keeper, proctree

MARKER_NAME = "CPU2GPU_RUN_ID"  # in every run process's environment: finds those that left the family
SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)

T = TypeVar("T")


class Stopped(Exception):
    """verify is being stopped: no run starts any more."""


@dataclass
class _Run:
    proc: object  # the run's child (a Popen), once started
    marker: bytes
    tmp: str
    keep: bool


_lock = threading.RLock()  # reentrant: the signal handler runs in the main thread, which may hold it
_runs: dict[str, _Run] = {}  # by temporary folder
_stopping = threading.Event()


def marker(token: str) -> bytes:
    return f"{MARKER_NAME}={token}".encode()


def stopping() -> bool:
    return _stopping.is_set()


def enter(tmp: str, token: str, keep: bool) -> None:
    """A run's folder exists: it is removed when verify is stopped."""
    with _lock:
        if _stopping.is_set():
            raise Stopped("verify is being stopped")
        _runs[tmp] = _Run(None, marker(token), tmp, keep)


def spawn(tmp: str, start: Callable[[], T]) -> T:
    """Start the run's child, unless verify is being stopped (then no process starts at all)."""
    with _lock:
        if _stopping.is_set():
            raise Stopped("verify is being stopped")
        proc = start()
        if tmp in _runs:
            _runs[tmp].proc = proc
        return proc


def leave(tmp: str) -> None:
    with _lock:
        _runs.pop(tmp, None)


def end_run(pid: int | None, token_marker: bytes) -> None:
    """Kill a run's whole family: below its child, and whatever carries its marker."""
    killed = proctree.kill_family(pid) if pid else []
    killed += proctree.kill_marked(token_marker)
    proctree.reap([p for p in killed if p != pid])  # orphans adopted here; the child is its Popen's


def stop_all() -> None:
    """End every live run now; their folders go (unless kept)."""
    with _lock:
        _stopping.set()
        runs = list(_runs.values())
    for run in runs:
        # a child already waited for is left alone: its pid may be another process's by now
        alive = run.proc is not None and getattr(run.proc, "returncode", 0) is None
        end_run(getattr(run.proc, "pid", None) if alive else None, run.marker)
    for run in runs:
        if not run.keep:
            shutil.rmtree(run.tmp, ignore_errors=True)


def _on_signal(signum, frame) -> None:
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleaning short
    stop_all()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


@contextmanager
def guard() -> Iterator[None]:
    """For the command line: whatever ends it (a signal, an exception, the end), no run outlives it."""
    keeper.become_subreaper()
    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.getsignal(sig) for sig in SIGNALS} if main else {}
    for sig in before:
        signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        stop_all()
        # the command line runs nothing but runs: whatever still lives below it is theirs
        proctree.reap(proctree.kill_family(os.getpid(), include_root=False), wait_s=0.5)
        for sig, handler in before.items():
            signal.signal(sig, handler)
        _stopping.clear()
