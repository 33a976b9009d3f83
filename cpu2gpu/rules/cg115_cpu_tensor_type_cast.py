"""CG115 cpu-tensor-type-cast."""

from __future__ import annotations

from typing import Iterator, cast

import libcst as cst

from ..analysis.facts import Place
from ..rewrite.fixes import Fix, Replace, method_call
from .base import Build, Hit, Invalid, Rule, RuleContext
from .runtimeside import RuntimeSide


class CpuTensorTypeCast(Rule):
    """``t.type(torch.FloatTensor)`` on a tensor that is on the device.

    What it finds: ``.type()`` with one of the legacy tensor types (``torch.FloatTensor``,
    ``torch.LongTensor``, ...) on a tensor that is, or once migrated will be, on the
    device, where what the cast gives then meets the device again: it is fed to a module
    there, or an op takes it with a device tensor.

    Why it breaks on the GPU: those types are CPU types: the cast copies the tensor back
    to the CPU ("Expected all tensors to be on the same device" where it meets the
    model). The dtype method changes the type and keeps the device. A cast that only
    meets Python numbers, ``print`` or ``.item()``, and the cast of a 0-dim value (a full
    reduction: ``torch.sum(pred == y).type(torch.FloatTensor)``, which joins device tensors
    as any 0-dim CPU tensor does), run correctly on the GPU: no finding.

    Example::

        x = torch.zeros(4, 3, device=device).type(torch.FloatTensor)   # before
        x = torch.zeros(4, 3, device=device).float()                   # after
    """

    code = "CG115"
    name = "cpu-tensor-type-cast"
    message = "`.type({type})` copies the tensor to the CPU; use `.{method}()`, which keeps its device"
    runtime = RuntimeSide(
        unseen="the cast's CPU copy fails as a CPU tensor that met the device, which the diagnosis blames on the "
               "tensor (CG102, CG104)",
        unrepaired="a run locates the CPU tensor, not the cast: the binding edit of CG102 or CG104 moves it",
    )
    VALID = [
        "import torch\nx = torch.zeros(3).type(torch.FloatTensor)\nprint(x.sum())\n",
        "import torch\nmodel = torch.nn.Linear(3, 1).to(device)\nx = torch.zeros(4, 3, device=device).float()\nmodel(x)\n",
        # a full reduction is 0-dim: its CPU copy divides by a number, and would join device tensors too
        "import torch\nmodel = torch.nn.Linear(3, 2).to(device)\nx = torch.zeros(4, 3, device=device)\n"
        "y = torch.zeros(4, dtype=torch.long, device=device)\npred = model(x).argmax(dim=1)\n"
        "acc = torch.sum(pred == y).type(torch.FloatTensor) / y.size(0)\nprint(acc.item(), acc * model(x).sum())\n",
        "import torch\nmodel = torch.nn.Linear(3, 2).to(device)\nout = model(torch.zeros(4, 3, device=device))\n"
        "correct = (out.argmax(1) == 0).sum()\nprint(correct.type(torch.LongTensor) + 1)\n",
        # not 0-dim, but only read on the host afterwards: it runs on the GPU as written
        "import torch\nmodel = torch.nn.Linear(3, 2).to(device)\nout = model(torch.zeros(4, 3, device=device))\n"
        "probs = out.softmax(1).type(torch.FloatTensor)\nprint(probs.tolist(), probs.numpy())\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nmodel = torch.nn.Linear(3, 1).to(device)\n"
            "x = torch.zeros(4, 3, device=device).type(torch.FloatTensor)\nmodel(x)\n",
            "import torch\nmodel = torch.nn.Linear(3, 1).to(device)\n"
            "x = torch.zeros(4, 3, device=device).float()\nmodel(x)\n",
        ),
        Invalid(  # a cast of a batch of predictions, compared with device labels: not 0-dim
            "import torch\nmodel = torch.nn.Linear(3, 2).to(device)\nx = torch.zeros(4, 3, device=device)\n"
            "y = torch.zeros(4, device=device)\npred = model(x).argmax(dim=1).type(torch.FloatTensor)\n"
            "acc = torch.sum(pred == y) / y.size(0)\n",
            "import torch\nmodel = torch.nn.Linear(3, 2).to(device)\nx = torch.zeros(4, 3, device=device)\n"
            "y = torch.zeros(4, device=device)\npred = model(x).argmax(dim=1).float()\n"
            "acc = torch.sum(pred == y) / y.size(0)\n",
        ),
        Invalid(  # 0-dim, but the target of an in-place op that takes a device tensor
            "import torch\nmodel = torch.nn.Linear(3, 2).to(device)\nout = model(torch.zeros(4, 3, device=device))\n"
            "total = out.sum().type(torch.FloatTensor)\ntotal += out.mean()\n",
            "import torch\nmodel = torch.nn.Linear(3, 2).to(device)\nout = model(torch.zeros(4, 3, device=device))\n"
            "total = out.sum().float()\ntotal += out.mean()\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for call, receiver, method, result in facts.cpu_type_casts:
            if facts.place(receiver) is not Place.DEVICE:
                continue
            # A 0-dim CPU copy joins device tensors in any op but an in-place one's target; any
            # other copy breaks only where it meets the device again.
            if not facts.meets_device(result, in_place_only=facts.is_zero_dim(receiver)):
                continue
            assert isinstance(call.func, cst.Attribute)
            fix = Fix([Replace(call, _cast_by(method))])
            type_name = cst.Module([]).code_for_node(call.args[0].value)
            yield self.hit(call, fix, self.message.format(type=type_name, method=method))


def _cast_by(method: str) -> Build:
    """``x.type(torch.FloatTensor)`` -> ``x.float()``: the cast call (as the edits inside it left it,
    a call of an attribute still) becomes ``method`` called on its receiver."""
    return lambda node: method_call(cast(cst.Attribute, cast(cst.Call, node).func).value, method)
