"""Which lines of the user's files a run executed: the evidence that "proven" covers the code.

A migration is proven only over the code that ran on the device, so every run records the
statements of the user's files it executed, from the script's first to its last. The files are
compiled (usercode) with a recorder before each statement, on the statement's own line:
``_cpu2gpu_lines_3.add(12)``, a set's ``add`` of the line number (about 0.1 us). A tracer
(``sys.settrace``) would also be called for every frame of torch's own Python code, and cost a
third of a small script's time; ``sys.monitoring`` (3.12+) is not in every Python this runs on.
The line of a statement is its first line. What runs in a DataLoader worker (a process forked by
multiprocessing) is reported back: each worker writes its sets to a file of the run's own folder after
each batch that ran a line not written yet (``worker_batch_done``) and as it exits (a multiprocessing
finalizer), so a worker its loader has to terminate loses nothing; the parent reads them
(``from_workers``) once it has shut down the workers still alive. The cap of --max-steps swaps the sets for fresh ones, so that the lines
that ran after it are known too.
"""

from __future__ import annotations

import ast
import builtins
import json
import multiprocessing.util
import os
import tempfile
from typing import Callable

from . import usercode

_PREFIX = "_cpu2gpu_lines_"
_DOCSTRING_HOLDERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


class _RecordStatements(ast.NodeTransformer):
    def __init__(self, name: str) -> None:
        self.name = name

    def _recorder(self, stmt: ast.stmt) -> ast.stmt:
        call = ast.Call(func=ast.Attribute(ast.Name(self.name, ast.Load()), "add", ast.Load()),
                        args=[ast.Constant(stmt.lineno)], keywords=[])
        return ast.copy_location(ast.Expr(call), stmt)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list) or not block or not isinstance(block[0], ast.stmt):
                continue
            out: list = []
            for i, stmt in enumerate(block):
                first = i == 0 and field == "body" and isinstance(node, _DOCSTRING_HOLDERS)
                if first and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                        and isinstance(stmt.value.value, str):
                    out.append(stmt)  # the docstring stays the docstring
                    continue
                if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                    out.append(stmt)  # must stay first
                    continue
                out += [self._recorder(stmt), stmt]
            setattr(node, field, out)
        return node


class Lines:
    """The (file, line) pairs of the user's files that ran, and those that ran after the cap."""

    def __init__(self, is_user_file: Callable[[str], bool]) -> None:
        self._is_user_file = is_user_file
        self._names: dict = {}  # file -> the builtin name of its set
        self._before: dict = {}  # file -> the lines that ran before the cap (once it is reached)
        self._capped = False
        self.active = False
        self._inbox: str | None = None  # where the workers write what they ran
        self._workers: set = set()  # (file, line) that ran in workers

    def _record(self, tree: ast.Module, path: str) -> ast.Module:
        if not self.active or not self._is_user_file(path):
            return tree
        name = self._names.get(path)
        if name is None:
            name = self._names[path] = f"{_PREFIX}{len(self._names)}"
            setattr(builtins, name, set())
        return _RecordStatements(name).visit(tree)

    def start(self) -> None:
        """Record the lines of the user's files compiled from now on (usercode), in the workers too."""
        if self.active:
            return
        self.active = True
        usercode.add_transform(self._record)
        self._inbox = tempfile.mkdtemp(prefix="cpu2gpu-lines-")
        multiprocessing.util.register_after_fork(self, Lines._in_worker)

    def _in_worker(self) -> None:
        # multiprocessing clears the finalizers a forked process inherits before it runs this
        self._written = -1
        multiprocessing.util.Finalize(None, self._write_for_parent, exitpriority=10)

    def worker_batch_done(self) -> None:
        """In a DataLoader worker, after each batch: its lines written for the parent if it ran new ones."""
        ran = sum(len(self._now(path)) for path in self._names)
        if ran != getattr(self, "_written", -1):
            self._written = ran
            self._write_for_parent()

    def _write_for_parent(self) -> None:
        if self._inbox is None:
            return
        ran = {path: sorted(self._now(path) | self._before.get(path, set())) for path in self._names}
        target = os.path.join(self._inbox, f"lines-{os.getpid()}.json")
        try:
            with open(target + ".tmp", "w", encoding="utf-8") as f:
                json.dump(ran, f)
            os.replace(target + ".tmp", target)
        except OSError:  # the parent's folder is gone: nothing to report to
            pass

    def from_workers(self) -> None:
        """Add what the workers that have exited ran (call it once the workers are shut down)."""
        if self._inbox is None or not os.path.isdir(self._inbox):
            return
        for name in sorted(os.listdir(self._inbox)):
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self._inbox, name), encoding="utf-8") as f:
                    ran = json.load(f)
            except (OSError, ValueError):
                continue
            for path, lines in ran.items():
                self._workers |= {(path, line) for line in lines}

    def mark_cap(self) -> None:
        """The cap of --max-steps is reached: from now on the lines that run also count in `after`."""
        if self._capped:
            return
        self._capped = True
        for path, name in self._names.items():
            self._before[path] = getattr(builtins, name)
            setattr(builtins, name, set())

    def stop(self) -> None:
        self.active = False

    def _now(self, path: str) -> set:
        return getattr(builtins, self._names[path], set())

    @property
    def compiled(self) -> list:
        """The user's files compiled with a recorder: those that ran (every file of `seen`), and a notebook's
        cells that did not."""
        return list(self._names)

    @property
    def seen(self) -> set:
        out = set(self._workers)
        for path in self._names:
            for line in self._now(path) | self._before.get(path, set()):
                out.add((path, line))
        return out

    @property
    def after(self) -> set:
        if not self._capped:
            return set()
        return {(path, line) for path in self._names for line in self._now(path)}

    def by_file(self, display: Callable[[str], str]) -> dict:
        """{shown path: sorted lines} of the lines that ran."""
        out: dict = {}
        for filename, line in self.seen:
            out.setdefault(display(filename), set()).add(line)
        return {path: sorted(lines) for path, lines in sorted(out.items())}

