"""The progress of a verification on the terminal: one line per run (its label,
device, step n/N, last loss), on stderr, so that stdout keeps only the report.

On a terminal the lines are redrawn in place; elsewhere (forced with
--progress: logs, CI) each update is a new line, at most one per run every
PLAIN_EVERY_S, and the last one always.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from typing import Optional

from ..records import RunResult

PLAIN_EVERY_S = 2.0
LIVE_EVERY_S = 0.1
DEVICES = {"cpu": "cpu", "sim": "simulated cuda", "cuda": "cuda", "sim-mps": "simulated mps", "mps": "mps", "xpu": "xpu"}
STATES = {"ok": "done", "max_steps": "done (max-steps)", "needs_data": "needs data"}


def choose(stream, *, quiet: bool, force: bool, show_output: bool):
    """The view to use, or None: shown on a terminal unless quiet, elsewhere only when forced."""
    tty = bool(getattr(stream, "isatty", lambda: False)())
    if quiet or not (tty or force):
        return None
    # The runs' own output (--show-output) goes to stderr too and would break a redraw.
    live = tty and not show_output and os.environ.get("TERM") != "dumb"
    return ProgressView(stream, live=live)


def header(script: str, device: str, specs: list, max_steps) -> str:
    modes = ", ".join(s.mode for s in specs if s.role == "migrated")
    asked = f"device {device}" + (f" ({modes})" if device == "auto" else "")
    steps = f", at most {max_steps} steps each" if max_steps else ""
    return f"cpu2gpu verify {script}: {asked}, {len(specs)} run{'s' if len(specs) != 1 else ''}{steps}"


class ProgressView:
    def __init__(self, stream, live: bool):
        self.stream = stream
        self.live = live
        self.lock = threading.Lock()
        self.order: list = []
        self.modes: dict = {}
        self.lines: dict = {}
        self.printed: dict = {}  # label -> when its last plain line went out
        self.max_steps = None
        self.drawn = 0
        self.last_draw: Optional[float] = None

    def start(self, script: str, device: str, specs: list, max_steps) -> None:
        with self.lock:
            self.max_steps = max_steps
            self.order = [s.label for s in specs]
            self.modes = {s.label: s.mode for s in specs}
            self._write(header(script, device, specs, max_steps) + "\n")
            for label in self.order:
                self.lines[label] = self._line(label, DEVICES.get(self.modes[label], ""), None, None, "waiting")
            if self.live:
                self._draw()

    def begin(self, label: str) -> None:
        """The run's child starts (runs wait for a free job)."""
        with self.lock:
            self.lines[label] = self._line(label, DEVICES.get(self.modes.get(label, ""), ""), None, None, "starting")
            if self.live:
                self._draw()

    def update(self, label: str, info: dict) -> None:
        """A progress line of the child: {"steps": n, "loss": x}."""
        with self.lock:
            mode = self.modes.get(label, "")
            self.lines[label] = self._line(label, DEVICES.get(mode, mode), info.get("steps"), info.get("loss"), "")
            if self.live:
                now = time.monotonic()
                if self.last_draw is None or now - self.last_draw >= LIVE_EVERY_S:
                    self._draw()
            else:
                now = time.monotonic()
                last = self.printed.get(label)
                if last is None or now - last >= PLAIN_EVERY_S:
                    self.printed[label] = now
                    self._write(self.lines[label] + "\n")

    def done(self, label: str, result: RunResult) -> None:
        with self.lock:
            mode = result.get("mode") or self.modes.get(label, "")
            device = DEVICES.get(mode, mode)
            if mode == "cuda" and result.get("device_name"):
                device = result["device_name"]  # the GPU's name
            losses = result.get("losses") or []
            status = result.get("status", "")
            state = STATES.get(status)
            if state is None:
                exc = result.get("exception") or {}
                state = f"{status}: {exc['type']}" if exc.get("type") and exc["type"] != status else status
            self.lines[label] = self._line(label, device, result.get("steps", 0), losses[-1] if losses else None, state)
            if self.live:
                self._draw()
            else:
                self._write(self.lines[label] + "\n")

    def _line(self, label, device, steps, loss, state) -> str:
        width = max((len(x) for x in self.order), default=len(label))
        parts = [label.ljust(width), device.ljust(14)]
        if steps is not None:
            parts.append(f"step {steps}/{self.max_steps}" if self.max_steps else f"step {steps}")
        if loss is not None:
            parts.append(f"loss {loss:.6g}" if isinstance(loss, (int, float)) and math.isfinite(loss)
                         else f"loss {loss}")
        if state:
            parts.append(state)
        return "  ".join(parts).rstrip()

    def _draw(self) -> None:
        cols = shutil.get_terminal_size((100, 24)).columns
        out = [f"\x1b[{self.drawn}F"] if self.drawn else []
        for label in self.order:
            # One screen line each (cut to the width), so that moving up `drawn` lines lands right.
            out.append("\x1b[2K" + self.lines[label][:max(10, cols - 1)] + "\n")
        self.drawn = len(self.order)
        self.last_draw = time.monotonic()
        self._write("".join(out))

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass
