"""Run a notebook's code cells in order, in one namespace, as a Jupyter kernel does (without IPython).

Each cell is compiled on its own under the name ``PATH:cell N`` (N as ``cpu2gpu check`` numbers the
code cells) and its text is put in ``linecache``: tracebacks, the diagnosis, the device audit and
needs-data then say ``train.ipynb:cell 4:3`` with no line map to apply afterwards. IPython lines
are skipped as ``check`` skips them, except the timing magics (``%time x = f()`` binds ``x``, so its
statement runs, once). Figures go to the non-interactive backend, as ``%matplotlib inline`` would
keep ``plt.show()`` from opening a window and waiting.
"""

from __future__ import annotations

import builtins
import linecache
import os
import re
import sys
import types

from ..tracing import usercode

CELL_SEP = ":cell "
_TIMED = re.compile(r"^(\s*)%(?:time|timeit|prun)\b((?:\s+-[A-Za-z](?:\s*\d+)?)*)\s+(\S.*)$")


def is_notebook(path: str) -> bool:
    # cpu2gpu.notebooks.cells.is_notebook's test, without importing libcst into every run's child
    return path.endswith(".ipynb")


def cell_filename(path: str, number: int) -> str:
    return f"{path}{CELL_SEP}{number}"


def program_file(filename: str) -> str:
    """The file a code object comes from: the notebook for one of its cells."""
    head, sep, tail = filename.rpartition(CELL_SEP)
    return head if sep and tail.isdigit() and is_notebook(head) else filename


def display(*objs, **kwargs) -> None:
    """IPython's ``display`` with no front end: the text form, as a console shows it."""
    for obj in objs:
        print(repr(obj))


def _python(cell) -> str:
    """The cell's Python: the placeholders of ``runnable_cells``, with timed statements put back."""
    lines = cell.source.splitlines(keepends=True)
    for number, magic in cell.magics.items():
        timed = _TIMED.match(magic)
        if timed and number <= len(lines):
            ending = lines[number - 1][len(lines[number - 1].rstrip("\r\n")):]
            lines[number - 1] = timed.group(1) + timed.group(3) + ending
    return "".join(lines)


def compile_cells(path: str) -> list:
    """Every cell compiled before any runs: a cell that does not parse stops the run at the start,
    as ``check`` refuses the notebook, rather than after the cells above it have trained."""
    # only for a notebook: cells imports libcst and the static engine (~0.25 s), which a script's run does not need
    from cpu2gpu.notebooks.cells import runnable_cells

    with open(path, "rb") as f:
        cells = runnable_cells(f.read())
    codes = []
    for cell in cells:
        name = cell_filename(path, cell.number)
        text = cell.text if cell.text.endswith("\n") or not cell.text else cell.text + "\n"
        linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
        codes.append(_compile(_python(cell), name))
    return codes


def _compile(source: str, name: str):
    """A cell's code, compiled as a script's is: loops capped, lines recorded (usercode)."""
    return usercode.compile_user(source.encode("utf-8"), name)


def run(path: str) -> dict:
    """Run the notebook at ``path``; its namespace (also reached from a traceback's cell frames)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    codes = compile_cells(path)
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace.update(__builtins__=builtins, display=display)
    previous = sys.modules.get("__main__")
    sys.modules["__main__"] = module  # classes defined in a cell pickle as they do in a kernel
    try:
        for code in codes:
            exec(code, namespace)
    finally:
        if previous is not None:
            sys.modules["__main__"] = previous
    return namespace
