"""Processes by family, read from /proc (Linux): who descends from whom, and ending a whole family.

A process group is not enough: a daemon leaves it with setsid. Here a family is every process below a
pid, found by parent links; it is stopped (SIGSTOP, so that nobody forks while it is walked) until no
new member shows up, then killed. Where there is no /proc, only the root is signalled.
"""

from __future__ import annotations

import os
import signal
import time

PROC = "/proc"
ROUNDS = 50  # walks of the family while it is being stopped; a fork bomb may take several


def parents() -> dict[int, int]:
    """pid -> parent pid, of every process this user can see."""
    out: dict[int, int] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC}/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # the name in parentheses may hold spaces
        if len(fields) >= 2:
            out[int(name)] = int(fields[1])
    return out


def descendants(root: int, tree: dict[int, int] | None = None) -> list[int]:
    """Every process below ``root``, parents before their children."""
    tree = parents() if tree is None else tree
    children: dict[int, list[int]] = {}
    for pid, ppid in tree.items():
        children.setdefault(ppid, []).append(pid)
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out and child != root:
                out.append(child)
                todo.append(child)
    return out


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def kill_family(root: int, include_root: bool = True) -> list[int]:
    """SIGKILL ``root`` (when asked) and every process below it; returns the pids signalled."""
    if not os.path.isdir(PROC):
        if include_root:
            _signal(root, signal.SIGKILL)
        return [root] if include_root else []
    stopped: list[int] = []
    for _ in range(ROUNDS):
        members = descendants(root)
        if include_root:
            members.insert(0, root)
        new = [pid for pid in members if pid not in stopped]
        if not new:
            break
        for pid in new:
            if _signal(pid, signal.SIGSTOP):
                stopped.append(pid)
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return stopped


def with_marker(marker: bytes) -> list[int]:
    """The processes whose environment holds ``marker`` (NAME=value): a run's processes, also those that
    left its family (a daemon whose keeper was killed). An environment read from /proc is the one the
    process started with."""
    out: list[int] = []
    me = os.getpid()
    try:
        names = os.listdir(PROC)
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"{PROC}/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            out.append(int(name))
    return out


def kill_marked(marker: bytes) -> list[int]:
    """SIGKILL every process carrying ``marker``, and their families."""
    killed: list[int] = []
    for _ in range(ROUNDS):
        found = [pid for pid in with_marker(marker) if pid not in killed]
        if not found:
            break
        for pid in found:
            killed += kill_family(pid)
    return killed


def reap(pids: list[int], wait_s: float = 2.0) -> None:
    """Collect those of ``pids`` that are this process's children (orphans adopted as a subreaper),
    once they are dead: never a wait on any child, which would steal another thread's subprocess."""
    mine = {pid for pid, ppid in parents().items() if ppid == os.getpid() and pid in pids}
    deadline = time.monotonic() + wait_s
    while mine and time.monotonic() < deadline:
        for pid in list(mine):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except OSError:
                done = pid
            if done:
                mine.discard(pid)
        if mine:
            time.sleep(0.01)
