"""CG107 numpy-on-device."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..facts import Place
from ..fixes import Fix, Replace, method_call
from .base import Hit, Invalid, Rule, RuleContext


class NumpyOnDevice(Rule):
    """``.numpy()`` on a tensor that is on the device.

    What it finds: ``.numpy()`` called on a model output, or on any tensor that is
    (or, once migrated, will be) on the device.

    Why it breaks on the GPU: NumPy arrays live in host memory: "can't convert
    cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host
    memory first."

    Example::

        pred = model(x).detach().numpy()        # before
        pred = model(x).detach().cpu().numpy()  # after
    """

    code = "CG107"
    name = "numpy-on-device"
    message = "`.numpy()` of a tensor on the device; copy it to the CPU first"
    VALID = [
        "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\npred = model(x).detach().cpu().numpy()\n",
        "import torch\na = torch.zeros(3)\nprint(a.numpy())\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\npred = model(x).detach().numpy()\n",
            "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\npred = model(x).detach().cpu().numpy()\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        for use in ctx.facts.uses:
            if use.kind != "numpy" or ctx.facts.place(use.values[0]) is not Place.DEVICE:
                continue
            call = use.node
            assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)

            def build(node: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                receiver = method_call(node.func.value, "cpu")
                return node.with_changes(func=node.func.with_changes(value=receiver))

            yield self.hit(call.func.attr, Fix([Replace(call, build)]))
