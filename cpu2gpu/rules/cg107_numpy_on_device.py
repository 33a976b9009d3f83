"""CG107 numpy-on-device."""

from __future__ import annotations

from typing import Iterator, cast

import libcst as cst

from ..analysis.facts import Place
from ..rewrite.fixes import Fix, Replace, method_call
from .base import Hit, Invalid, Rule, RuleContext, method_called
from .runtimeside import BINDING, RuntimeRepair, RuntimeSide, Symptom


class NumpyOnDevice(Rule):
    """``.numpy()`` on a tensor that is on the device, or the tensor given to NumPy or matplotlib.

    What it finds: ``.numpy()`` called on a model output, or on any tensor that is
    (or, once migrated, will be) on the device, also the values of a model's own
    methods (``model.sample(n)``) and of functions that call the model; and such a
    tensor given to a NumPy, matplotlib, seaborn, SciPy or scikit-learn metrics
    function (``np.array(pred)``, ``np.clip(img, 0, 1)``, ``plt.imshow(img)``).

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
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "numpy", "a TypeError: NumPy (or matplotlib) was handed a device tensor",
            "a device tensor reached .numpy() at {at}; call .cpu() before .numpy()",
            ("device type tensor to numpy",), raised="builtins.TypeError"),),
        repair=RuntimeRepair(BINDING),
    )
    VALID = [
        "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\npred = model(x).detach().cpu().numpy()\n",
        "import torch\na = torch.zeros(3)\nprint(a.numpy())\n",
        # the branch that runs without a GPU
        "import torch\ntrain_on_gpu = torch.cuda.is_available()\nmodel = torch.nn.Linear(1, 1).to(device)\n"
        "out = model(x).detach()\nres = out.numpy() if not train_on_gpu else out.cpu().numpy()\n"
        "if train_on_gpu:\n    arr = out.cpu().numpy()\nelse:\n    arr = out.numpy()\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\npred = model(x).detach().numpy()\n",
            "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\npred = model(x).detach().cpu().numpy()\n",
        ),
        Invalid(
            "import numpy as np\nimport matplotlib.pyplot as plt\nimport torch\nmodel = torch.nn.Linear(1, 1).to(device)\n"
            "pred = model(x).detach()\nplt.imshow(np.clip(pred, 0, 1))\nprint(np.array(pred))\n",
            "import numpy as np\nimport matplotlib.pyplot as plt\nimport torch\nmodel = torch.nn.Linear(1, 1).to(device)\n"
            "pred = model(x).detach()\nplt.imshow(np.clip(pred.cpu(), 0, 1))\nprint(np.array(pred.cpu()))\n",
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
        for use in ctx.facts.uses:
            if use.kind != "host" or ctx.facts.place(use.values[0]) is not Place.DEVICE:
                continue
            function = cst.Module([]).code_for_node(cast(cst.Call, use.node).func)  # (a host use is a call)
            message = f"`{function}` of a tensor on the device; copy it to the CPU first"
            if use.values[0].is_list:
                yield self.hit(use.arg_nodes[0], None, message.replace("a tensor", "a list of tensors"))
                continue  # (a list has no .cpu(): its elements must each be copied)
            yield self.hit(use.arg_nodes[0], Fix([Replace(use.arg_nodes[0], method_called("cpu"))]),
                           message)
