"""How a run reports its progress while it goes: the child appends one small
JSON line per update to a file the parent names, and the parent reads the new
lines while it waits for the child.

A file, not a pipe: the script owns the child's stdout and stderr, and a file
never blocks the child when the parent reads late. No torch here: the parent
imports it too.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Optional

EVERY_S = 0.2  # the child writes at most this often (plus the last line)
POLL_S = 0.2  # the parent looks at the file this often


class Writer:
    """Child side: a line with the steps and the last loss, at most every EVERY_S."""

    def __init__(self, path: str, rec, every: float = EVERY_S):
        # Opened before the sandbox is installed: the file lies outside the run's folder.
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.rec = rec
        self.every = every
        self.last: Optional[float] = None

    def on_step(self, optimizer, args, kwargs) -> None:
        now = time.monotonic()
        if self.last is not None and now - self.last < self.every:
            return
        self.last = now
        self.write()

    def write(self, end: bool = False) -> None:
        losses = self.rec.losses
        line = {"steps": self.rec.steps, "loss": losses[-1] if losses else None}
        if end:
            line["end"] = True
        try:  # one small O_APPEND write: the parent never reads half a line as whole
            os.write(self.fd, (json.dumps(line) + "\n").encode())
        except (OSError, ValueError):
            pass  # progress is a courtesy: it never fails the run


def install(path: str, rec) -> Writer:
    """Write progress after every optimizer step (throttled); registered after the
    harness's hook, so that the step is already counted."""
    # the child's side: the parent imports this module, without torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    writer = Writer(path, rec)
    register_optimizer_step_post_hook(writer.on_step)
    return writer


class Reader:
    """Parent side: the newest complete line of the file, read incrementally."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.rest = b""

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return None
        self.offset += len(data)
        *lines, self.rest = (self.rest + data).split(b"\n")
        for raw in reversed(lines):
            try:
                return json.loads(raw)
            except ValueError:
                continue
        return None


def follow(proc: subprocess.Popen, path: str, timeout: float, on_progress) -> None:
    """proc.wait(timeout), calling on_progress(line) with each new line seen meanwhile.
    Raises subprocess.TimeoutExpired as wait() does."""
    reader = Reader(path)
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        try:
            proc.wait(timeout=min(POLL_S, remaining))
            break
        except subprocess.TimeoutExpired:
            pass
        line = reader.poll()
        if line is not None:
            on_progress(line)
    line = reader.poll()
    if line is not None:
        on_progress(line)
