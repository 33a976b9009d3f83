"""Which lines of the user's files run from some point on (sys.settrace, started late).

Evidence that the code after the training ran: tracing starts at the cap of
--max-steps, when little is left to run, so its cost stays small.
"""

from __future__ import annotations

import os
import sys

_forks_hooked = False


def _untrace_in_child():
    sys.settrace(None)  # a forked DataLoader worker reports nothing back


class Lines:
    def __init__(self, is_user_file) -> None:
        self.seen: set = set()
        self._is_user_file = is_user_file
        self._user: dict = {}
        self.active = False

    def _is_user(self, filename) -> bool:
        known = self._user.get(filename)
        if known is None:
            known = self._user[filename] = self._is_user_file(filename)
        return known

    def _on_call(self, frame, event, arg):
        return self._on_line if self._is_user(frame.f_code.co_filename) else None

    def _on_line(self, frame, event, arg):
        if event == "line":
            self.seen.add((frame.f_code.co_filename, frame.f_lineno))
        return self._on_line

    def start(self, frame) -> None:
        """Trace from here on, the user's frames already running included (the script's body)."""
        global _forks_hooked
        if not _forks_hooked and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_untrace_in_child)
            _forks_hooked = True
        while frame is not None:
            if self._is_user(frame.f_code.co_filename):
                frame.f_trace = self._on_line
            frame = frame.f_back
        sys.settrace(self._on_call)
        self.active = True

    def stop(self) -> None:
        if self.active:
            sys.settrace(None)
            self.active = False
