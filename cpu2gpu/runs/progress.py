"""A one-line progress bar on stderr, for runs over many files on a terminal."""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

# Fewer files than this finish before a bar would be worth reading.
MIN_FILES = 50


class Progress:
    def __init__(self, total: int, label: str, enabled: bool, stream: Optional[TextIO] = None) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled and total >= MIN_FILES
        self._shown = 0.0

    @classmethod
    def for_terminal(cls, total: int, label: str, quiet: bool) -> "Progress":
        stream = sys.stderr
        return cls(total, label, not quiet and stream.isatty(), stream)

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and (now - self._shown > 0.1 or self.done == self.total):
            self._shown = now
            width = 30
            filled = width * self.done // max(self.total, 1)
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\r\033[K")  # erase the bar: the report follows on a clean line
            self.stream.flush()
