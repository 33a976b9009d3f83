"""Which lines of the user's files a run executed: the evidence that "proven" covers the code.

A migration is proven only over the code that ran on the device, so every run records the lines of
the user's files it executed, from the script's first line to its last (coverage.py's way, cut down
to what the verdict needs). With ``sys.monitoring`` (Python 3.12+) each line reports once and is then
disabled, so a hot loop costs nothing after its first pass; the cap re-enables them all once, to
count the lines that ran after it. Before 3.12 a ``sys.settrace`` tracer sees only the user's frames
(the call event of any other frame returns at once), which costs one Python call per frame of
torch's own Python code. Forked DataLoader workers report nothing back, so they trace nothing.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

_forks_hooked = False
_MONITORING: Any = getattr(sys, "monitoring", None)
_TOOL_NAME = "cpu2gpu-lines"


def _untrace_in_child() -> None:
    sys.settrace(None)
    if _MONITORING is not None:
        for tool in range(6):
            if _MONITORING.get_tool(tool) == _TOOL_NAME:
                _MONITORING.set_events(tool, 0)


class Lines:
    """The (file, line) pairs of the user's files that ran, and those that ran after the cap."""

    def __init__(self, is_user_file: Callable[[str], bool]) -> None:
        self.seen: set = set()
        self.after: set = set()  # lines that ran after mark_cap()
        self._is_user_file = is_user_file
        self._user: dict = {}
        self._capped = False
        self.active = False
        self._tool: int | None = None

    def _is_user(self, filename) -> bool:
        known = self._user.get(filename)
        if known is None:
            known = self._user[filename] = self._is_user_file(filename)
        return known

    # -- sys.settrace (before Python 3.12) ----------------------------------------

    def _on_call(self, frame, event, arg):
        return self._on_line if self._is_user(frame.f_code.co_filename) else None

    def _on_line(self, frame, event, arg):
        if event == "line":
            key = (frame.f_code.co_filename, frame.f_lineno)
            self.seen.add(key)
            if self._capped:
                self.after.add(key)
        return self._on_line

    # -- sys.monitoring (Python 3.12+) ------------------------------------------------

    def _on_monitored_line(self, code, line):
        if not self._is_user(code.co_filename):
            return _MONITORING.DISABLE
        key = (code.co_filename, line)
        self.seen.add(key)
        if self._capped:
            self.after.add(key)
        return _MONITORING.DISABLE  # once is enough: mark_cap() turns them on again

    def _start_monitoring(self) -> bool:
        mon = _MONITORING
        for tool in range(6):  # the ids a tool may take; coverage.py and debuggers hold others
            if mon.get_tool(tool) is None:
                mon.use_tool_id(tool, _TOOL_NAME)
                mon.register_callback(tool, mon.events.LINE, self._on_monitored_line)
                mon.set_events(tool, mon.events.LINE)
                self._tool = tool
                return True
        return False

    # -- the run's side -------------------------------------------------------------------

    def start(self, frame=None) -> None:
        """Record from here on; `frame`: the user's frames already running (and their callers) too."""
        global _forks_hooked
        if self.active:
            return
        if not _forks_hooked and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_untrace_in_child)
            _forks_hooked = True
        self.active = True
        if _MONITORING is not None and self._start_monitoring():
            return
        while frame is not None:
            if self._is_user(frame.f_code.co_filename):
                frame.f_trace = self._on_line
            frame = frame.f_back
        sys.settrace(self._on_call)

    def mark_cap(self, frame=None) -> None:
        """The cap of --max-steps is reached: from now on the lines that run are also counted in `after`."""
        self._capped = True
        if not self.active:
            self.start(frame)
        elif self._tool is not None:
            _MONITORING.restart_events()

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        if self._tool is not None:
            _MONITORING.set_events(self._tool, 0)
            _MONITORING.free_tool_id(self._tool)
            self._tool = None
        else:
            sys.settrace(None)

    def by_file(self, display: Callable[[str], str]) -> dict:
        """{shown path: sorted lines} of the lines that ran."""
        out: dict = {}
        for filename, line in self.seen:
            out.setdefault(display(filename), set()).add(line)
        return {path: sorted(lines) for path, lines in sorted(out.items())}
