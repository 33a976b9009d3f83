"""The user's frames of a failing run, as the diagnosis reads them.

Each frame of the user's code in the traceback (``Frame``): the failing statement's text, the names on
it and the values they hold there, its function's arguments and the module whose method runs; the
frame that binds a value a function was given (``holder``); and the frames of a traceback given as text,
which a DataLoader worker's failure carries in its message (``text_user_frame``).
"""

from __future__ import annotations

import linecache
import re
from typing import Any

import torch

NAME = re.compile(r"(?<![\w.'\"])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# An item of a container read on the line: `batch[0]`, `inputs["x"]`, `self.scales[i]` (a literal or one name).
ITEM = re.compile(r"(?<![\w.'\"])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\[\s*(-?\d+|'[^'\\]*'|\"[^\"\\]*\"|[A-Za-z_]\w*)\s*\]")
# A frame of a traceback as text: a DataLoader re-raises a worker's exception with the worker's
# traceback in the message (ExceptionWrapper.reraise: "Caught RuntimeError in DataLoader worker
# process 0.\nOriginal Traceback (most recent call last):\n  File ..."), multiprocessing.Pool as
# the __cause__ (a RemoteTraceback).
TEXT_FRAME = re.compile(
    r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)\n(?:    (?P<source>[^\n]*))?', re.M)


def holder(frame, lineno: int, name: str, value, rec):
    """The frame that binds ``value`` itself: while ``name`` is a parameter of the running function,
    the caller's frame and the name it holds the value by (the frames of torch between them skipped)."""
    while rec is not None and value is not None:
        code = frame.f_code
        argc = code.co_argcount + code.co_kwonlyargcount
        if name not in code.co_varnames[:argc]:
            break
        caller = frame.f_back
        while caller is not None and not rec.is_user_file(caller.f_code.co_filename):
            caller = caller.f_back
        held = None if caller is None else next((n for n, v in list(caller.f_locals.items()) if v is value), None)
        if held is None:
            break
        frame, lineno, name = caller, caller.f_lineno, held
    return frame, lineno, name


def statement_lines(code, lasti, lineno):
    """The lines of the failing expression (all of a call split over lines)."""
    end = lineno
    positions = getattr(code, "co_positions", None)  # Python 3.11+
    if positions is not None:
        try:
            pos = list(positions())[lasti // 2]
            if pos[0] is not None and pos[1] is not None and pos[0] <= lineno <= pos[1]:
                lineno, end = pos[0], pos[1]
        except (IndexError, ValueError):
            pass
    return range(lineno, min(end, lineno + 20) + 1)


class Frame:
    """A frame of the user's code in the traceback, at the line it was running."""

    def __init__(self, frame, lineno, display, lasti=0):
        self.frame = frame
        self.lineno = lineno
        self.file = frame.f_code.co_filename
        self.func = frame.f_code.co_name
        self.where = {"file": display(self.file), "line": lineno}
        self.display = display
        lines = statement_lines(frame.f_code, lasti, lineno)
        self.text = " ".join(linecache.getline(self.file, n).split("#", 1)[0].strip() for n in lines)
        argc = frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount
        self.args = set(frame.f_code.co_varnames[:argc])
        self.owner = frame.f_locals.get("self")
        if self.owner is None and self.func.startswith("<") and frame.f_back is not None:
            self.owner = frame.f_back.f_locals.get("self")  # a comprehension inside a method

    def at(self) -> str:
        return f"{self.where['file']}:{self.lineno}"

    def names(self):
        """(dotted name, value) for each name on the line that resolves."""
        seen = set()
        for m in NAME.finditer(self.text):
            dotted = m.group(0)
            parts = dotted.split(".")
            # also the prefixes: "self.rnn" of "self.rnn.weight"
            for k in range(1, len(parts) + 1):
                name = ".".join(parts[:k])
                if name in seen:
                    continue
                seen.add(name)
                ok, value = self.resolve(parts[:k])
                if ok:
                    yield name, value
        for m in ITEM.finditer(self.text):
            expression = m.group(0)
            if expression in seen:
                continue
            seen.add(expression)
            ok, value = self._item(m.group(1), m.group(2))
            if ok:
                yield expression, value

    def _item(self, container: str, key: str):
        """The item of a plain list, tuple or dict (nothing of the user's runs to read it)."""
        ok, held = self.resolve(container.split("."))
        if not ok or type(held) not in (list, tuple, dict):
            return False, None
        if key[0] in "'\"":
            index: Any = key[1:-1]
        elif key.lstrip("-").isdigit():
            index = int(key)
        else:
            known, index = self.resolve([key])
            if not known or type(index) not in (int, str):
                return False, None
        try:
            return True, held[index]
        except (IndexError, KeyError, TypeError):
            return False, None

    def resolve(self, parts):
        """(True, value) of the dotted name ``parts`` in the frame, (False, None) where it does not resolve."""
        f = self.frame
        if parts[0] in f.f_locals:
            value = f.f_locals[parts[0]]
        elif parts[0] in f.f_globals:
            value = f.f_globals[parts[0]]
        else:
            return False, None
        for p in parts[1:]:
            if not isinstance(value, torch.nn.Module) and type(value).__module__ in ("builtins",):
                return False, None
            try:
                value = getattr(value, p)
            except Exception:
                return False, None
        return True, value


def user_frames(tb, rec, display) -> list:
    """The frames of the user's code in the traceback, outermost first."""
    frames = []
    while tb is not None:
        if rec.is_user_file(tb.tb_frame.f_code.co_filename):
            frames.append(Frame(tb.tb_frame, tb.tb_lineno, display, tb.tb_lasti))
        tb = tb.tb_next
    return frames


def text_user_frame(text: str, rec):
    """(file, line, function, source) of the deepest user frame in a traceback given as text."""
    found = None
    for m in TEXT_FRAME.finditer(text):
        if rec.is_user_file(m["file"]):
            found = m
    if found is None:
        return None
    file, line = found["file"], int(found["line"])
    source = (found["source"] or "").strip() or linecache.getline(file, line).strip()
    return file, line, found["func"].strip(), source


def qualified(file: str, line: int, func: str) -> str:
    """`Class.func` when the def of `func` enclosing `line` is in a class body, else `func`."""
    def indent(text):
        return len(text) - len(text.lstrip())

    n = line
    while n > 1:
        n -= 1
        text = linecache.getline(file, n)
        if re.match(rf"\s*(?:async\s+)?def\s+{re.escape(func)}\b", text):
            depth = indent(text)
            while n > 1 and depth > 0:
                n -= 1
                text = linecache.getline(file, n)
                if text.strip() and indent(text) < depth:
                    match = re.match(r"\s*class\s+(\w+)", text)
                    return f"{match.group(1)}.{func}" if match else func
            return func
    return func
