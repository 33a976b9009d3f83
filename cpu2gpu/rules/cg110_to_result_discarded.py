"""CG110 to-result-discarded."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import DEVICE_MISMATCH, RULE_FIX, RuntimeRepair, RuntimeSide, Symptom


class ToResultDiscarded(Rule):
    """``t.to(device)`` on a tensor as a statement of its own: the moved copy is thrown away.

    What it finds: ``x.to(device)``, ``x.cuda()``, ``x.cpu()`` written as a bare
    statement where ``x`` is a tensor or a batch.

    Why it breaks on the GPU: modules move in place, tensors do not: ``.to()``
    returns a new tensor on the device and leaves ``x`` where it was. On a CPU-only
    machine the call is a no-op either way, so the mistake only shows on the GPU:
    "Expected all tensors to be on the same device".

    Example::

        x.to(device)       # before
        x = x.to(device)   # after
    """

    code = "CG110"
    name = "to-result-discarded"
    message = "`{call}` does not move `{target}` in place: tensors are copied; assign the result"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "bare-move", "a device mismatch where a CPU tensor on the failing line was given `name.to(...)` or "
            "`name.cuda()` as a statement of its own, earlier in the function",
            "{name} stayed on the CPU at {at}: `{move}` at line {move_line} does not move it in place; "
            "write `{name} = {move}`", DEVICE_MISMATCH),),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        "import torch\nmodel = torch.nn.Linear(2, 2)\nmodel.to(device)\n",
        "import torch\nx = torch.ones(2)\nx = x.to(device)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 2).to(device)\nx = torch.ones(2)\nx.to(device)\nprint(model(x))\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 2).to(device)\nx = torch.ones(2)\nx = x.to(device)\nprint(model(x))\n",
        ),
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 2).to(device)\nloader = torch.utils.data.DataLoader(ds, pin_memory=True)\nfor x, y in loader:\n    x.to(device); y.to(device)\n"
            "    print(model(x), y)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 2).to(device)\nloader = torch.utils.data.DataLoader(ds, pin_memory=True)\nfor x, y in loader:\n    x = x.to(device); y = y.to(device)\n"
            "    print(model(x), y)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        for stmt in ctx.facts.discarded_moves:
            call = stmt.value
            target = call.func.value
            fix = Fix([Replace(stmt, _assign_back)])
            code = cst.Module([]).code_for_node
            yield self.hit(stmt, fix, self.message.format(call=code(call), target=code(target)))


def _assign_back(stmt: cst.CSTNode) -> cst.CSTNode:
    """``x.to(device)`` -> ``x = x.to(device)``, keeping a trailing ``;``."""
    assert isinstance(stmt, cst.Expr)
    target = stmt.value.func.value  # type: ignore[attr-defined]
    return cst.Assign(targets=[cst.AssignTarget(target=target.with_changes(lpar=[], rpar=[]))], value=stmt.value,
                      semicolon=stmt.semicolon)
