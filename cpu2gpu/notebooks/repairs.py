"""``cpu2gpu migrate`` on a notebook: a cause the run located in a cell, repaired as in a script.

The run names a cell and a line in it (``train.ipynb:cell 4:3``). The repair is made in the notebook's
program (the code cells as one module, as ``check`` and ``rewrite`` read it), where the binding may be in
another cell than the failure and the device line goes after the imports of the cell that imports torch;
the changed cells are then written back into the notebook, everything else byte for byte.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..engine import SourceError
from ..migration import Evidence, Repair, repair, rule_fix
from .cells import load, with_program


@dataclasses.dataclass(frozen=True)
class CellRepair:
    """The notebook's new bytes, the repair (its line is the program's), and its place as cell and line."""

    data: bytes
    repair: Repair
    cell: int
    line: int


def repair_cell(raw: bytes, path: str, evidence: Evidence, cell: int) -> Optional[CellRepair]:
    """The edit for ``evidence``, met in code cell ``cell`` (lines counted in that cell; 0: a cause with no
    line, such as the leaves an optimizer trains), or None."""
    try:
        notebook = load(raw)
    except SourceError:
        return None
    if not notebook.cells or not 0 <= cell <= len(notebook.cells):
        return None
    offset = notebook.cells[cell - 1].first_line - 1 if cell else 0
    at = dataclasses.replace(evidence, line=evidence.line + offset if evidence.line else 0,
                             def_line=evidence.def_line + offset if evidence.def_line else 0)
    program = notebook.program.encode("utf-8")
    fixed = rule_fix(program, path, at.rule, at.line) if at.kind == "rule" else repair(program, at)
    if fixed is None:
        return None
    try:
        data = with_program(notebook, fixed.data.decode("utf-8"))
    except SourceError:  # the edit cannot be cut back into the cells
        return None
    if data == raw:
        return None
    where, line = notebook.locate(fixed.line)
    return CellRepair(data, fixed, where.number, line)
