"""CG115 cpu-tensor-type-cast."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis.facts import Place
from ..rewrite.fixes import Fix, Replace, method_call
from .base import Hit, Invalid, Rule, RuleContext


class CpuTensorTypeCast(Rule):
    """``t.type(torch.FloatTensor)`` on a tensor that is on the device.

    What it finds: ``.type()`` with one of the legacy tensor types (``torch.FloatTensor``,
    ``torch.LongTensor``, ...) on a tensor that is, or once migrated will be, on the
    device.

    Why it breaks on the GPU: those types are CPU types: the cast copies the tensor back
    to the CPU ("Expected all tensors to be on the same device" where it meets the
    model), or silently computes there. The dtype method changes the type and keeps the
    device.

    Example::

        x = torch.zeros(4, 3, device=device).type(torch.FloatTensor)   # before
        x = torch.zeros(4, 3, device=device).float()                   # after
    """

    code = "CG115"
    name = "cpu-tensor-type-cast"
    message = "`.type({type})` copies the tensor to the CPU; use `.{method}()`, which keeps its device"
    VALID = [
        "import torch\nx = torch.zeros(3).type(torch.FloatTensor)\nprint(x.sum())\n",
        "import torch\nmodel = torch.nn.Linear(3, 1).to(device)\nx = torch.zeros(4, 3, device=device).float()\nmodel(x)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nmodel = torch.nn.Linear(3, 1).to(device)\n"
            "x = torch.zeros(4, 3, device=device).type(torch.FloatTensor)\nmodel(x)\n",
            "import torch\nmodel = torch.nn.Linear(3, 1).to(device)\n"
            "x = torch.zeros(4, 3, device=device).float()\nmodel(x)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        for call, receiver, method in ctx.facts.cpu_type_casts:
            if ctx.facts.place(receiver) is not Place.DEVICE:
                continue
            assert isinstance(call.func, cst.Attribute)
            fix = Fix([Replace(call, lambda node, m=method: method_call(node.func.value, m))])
            type_name = cst.Module([]).code_for_node(call.args[0].value)
            yield self.hit(call, fix, self.message.format(type=type_name, method=method))
