"""CG102 tensor-not-moved."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis.facts import Kind, Origin
from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext, draws_with_generator, follows_input, keyword_added, moved_to
from .runtimeside import BINDING, DEVICE_MISMATCH, TRAINED_TENSORS, RuntimeRepair, RuntimeSide, Symptom


class TensorNotMoved(Rule):
    """A tensor that meets the model or a device tensor stays on the CPU.

    What it finds: a tensor made by a torch factory (``torch.tensor``, ``zeros``,
    ``randn``, ...) or converted from other data (``torch.from_numpy``) without a
    device, that is fed to a module on the device or combined with a device tensor.

    Why it breaks on the GPU: "Expected all tensors to be on the same device, but
    found at least two devices, cuda:0 and cpu!". A factory gets ``device=``, not
    ``.to(device)``: on a leaf made with ``requires_grad=True`` a ``.to`` gives a
    non-leaf copy that an optimizer rejects.

    Example::

        x = torch.tensor([[1.0]])                 # before
        x = torch.tensor([[1.0]], device=device)  # after
        a = torch.from_numpy(arr).float()         # before
        a = torch.from_numpy(arr).float().to(device)  # after
    """

    code = "CG102"
    name = "tensor-not-moved"
    message = "tensor `{name}` stays on the CPU but meets {what} on the device"
    runtime = RuntimeSide(
        symptoms=(
            Symptom("tensor", "a device mismatch where a tensor that a name on the failing line holds (in the "
                      "function's own scope, not given to it) is on the CPU, and no other rule's case tells it",
                      "{name} stayed on the CPU at {at}", DEVICE_MISMATCH),
            Symptom("at-use", "a device mismatch where tensors read on the failing line through an object's "
                      "attribute or a container's item are on the CPU, and a device tensor or module is on the line",
                      "{names} stayed on the CPU at {at}, where {on_device} is on the device: moved where it is used",
                      DEVICE_MISMATCH),
        ),
        records=("event cpu-input-to-device-module: a CPU tensor reached a module on the device",
                 "a run with no module, whose optimizer trained tensors on the CPU"),
        repair=RuntimeRepair(BINDING, located=TRAINED_TENSORS),
    )
    VALID = [
        # torch.normal(mean, std) of a tensor is made where the mean is, and takes no device=
        "import torch\nmean = torch.zeros(3, device=device)\nmodel = torch.nn.Linear(3, 1).to(device)\n"
        "model(torch.normal(mean, 1))\n",
        "import torch\nx = torch.zeros(3, device=device)\nmodel = torch.nn.Linear(3, 1).to(device)\nmodel(x)\n",
        "import torch\nx = torch.zeros(3)\nprint(x.sum())\n",
        "import torch\nmodel = torch.nn.Linear(3, 1).to(device)\nx = torch.zeros(3).to(device)\nmodel(x)\n",
        "import torch\nidx = torch.arange(3)\nlengths = torch.tensor([3, 2])\nprint(idx[lengths])\n",
        # host images converted one by one, stacked on the CPU and moved as one batch
        "import torch\nmodel = torch.nn.Conv2d(3, 8, 3).to(device)\ntns = [torch.from_numpy(d) for d in images]\n"
        "print(torch.stack(tns).mean())\nbatch = torch.stack(tns).to(device)\nout = model(batch)\n",
        # .type(torch.cuda.FloatTensor) is a copy to the GPU, as .cuda() is
        "import torch\nmodel = torch.nn.Conv2d(3, 8, 3).to(device)\ntns = [torch.from_numpy(d) for d in images]\n"
        "out = model(torch.stack(tns).type(torch.cuda.FloatTensor))\n",
        # a comprehension's list is a Python list: appending a device tensor to it is no op on the device
        "import torch\nmodel = torch.nn.Conv2d(3, 8, 3).to(device)\ntns = [torch.from_numpy(d) for d in images]\n"
        "out = model(torch.stack(tns).to(device))\ntns.append(out)\nprint(len(tns))\n",
    ]
    INVALID = [
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\nw = torch.randn(3, requires_grad=True)\nmodel(w)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\nw = torch.randn(3, requires_grad=True, device=device)\nmodel(w)\n",
        ),
        Invalid(
            "import torch\nimport numpy as np\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\nx = torch.from_numpy(np.ones(3)).float()\nloss = model(x)\n",
            "import torch\nimport numpy as np\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\nx = torch.from_numpy(np.ones(3)).float().to(device)\nloss = model(x)\n",
        ),
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "a = torch.ones(2, device=device)\nb = torch.ones(2)\nc = a + b * 2\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "a = torch.ones(2, device=device)\nb = torch.ones(2, device=device)\nc = a + b * 2\n",
        ),
        Invalid(  # no module: the tensors an optimizer trains are the model
            "import torch\nx = torch.randn(8, 3)\nw = torch.randn(3, requires_grad=True)\n"
            "opt = torch.optim.SGD([w], lr=0.1)\nloss = (x @ w).pow(2).mean()\n",
            "import torch\n\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            "x = torch.randn(8, 3, device=device)\nw = torch.randn(3, requires_grad=True, device=device)\n"
            "opt = torch.optim.SGD([w], lr=0.1)\nloss = (x @ w).pow(2).mean()\n",
        ),
        Invalid(  # an MNIST data set's tensors, read as attributes: moved after the casts that read them
            "import torch\nimport torchvision\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(784, 10).to(device)\ntest = torchvision.datasets.MNIST('.', train=False)\n"
            "test_x = test.data.view(-1, 784).float()[:100] / 255.\nprint(model(test_x).argmax(1))\n",
            "import torch\nimport torchvision\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(784, 10).to(device)\ntest = torchvision.datasets.MNIST('.', train=False)\n"
            "test_x = (test.data.view(-1, 784).float()[:100] / 255.).to(device)\nprint(model(test_x).argmax(1))\n",
        ),
        Invalid(  # the same host images, stacked and fed to the model with no move: moved in the comprehension
            "import torch\nimport numpy as np\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Conv2d(3, 8, 3).to(device)\nimages = [np.zeros((3, 8, 8), dtype=np.float32) for _ in range(2)]\n"
            "tns = [torch.from_numpy(d) for d in images]\nout = model(torch.stack(tns))\n",
            "import torch\nimport numpy as np\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Conv2d(3, 8, 3).to(device)\nimages = [np.zeros((3, 8, 8), dtype=np.float32) for _ in range(2)]\n"
            "tns = [torch.from_numpy(d).to(device) for d in images]\nout = model(torch.stack(tns))\n",
        ),
        Invalid(  # a lambda is read at its call, with its arguments
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\ncrit = lambda out, y: ((out - y) ** 2).mean()\n"
            "target = torch.zeros(4, 1)\nloss = crit(model(torch.ones(4, 3, device=device)), target)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\ncrit = lambda out, y: ((out - y) ** 2).mean()\n"
            "target = torch.zeros(4, 1, device=device)\nloss = crit(model(torch.ones(4, 3, device=device)), target)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for value in facts.values:
            if value.kind is not Kind.TENSOR or not facts.is_bound(value) or value.explicit is not None:
                continue
            if value.context is not None and (value.context != "function" or follows_input(facts, value)):
                continue  # made inside a module or a function given device tensors: CG104 / CG105
            device, needs_setup = ctx.device_for(value.scope, value.time)
            if value.origin is Origin.FACTORY and not draws_with_generator(value.node):
                edit = Replace(value.node, keyword_added("device", device))
            else:
                anchor = value.fix_node or value.node
                edit = Replace(anchor, moved_to(device))
            fix = Fix([edit], needs_device_setup=needs_setup)
            name = value.name or cst.Module([]).code_for_node(value.node)
            if any(use.kind == "train-tensors" and value in use.values for use in facts.uses):
                message = f"tensor `{name}` is trained by an optimizer (the script's model, with no module) " \
                          "but stays on the CPU"
            else:
                message = self.message.format(name=name, what=self._what(ctx, value))
            yield self.hit(value.node, fix, message)

    @staticmethod
    def _what(ctx: RuleContext, value) -> str:
        """Name what pulls the tensor to the device: the model, or the output of one."""
        facts = ctx.facts
        for use in facts.uses:
            if use.kind == "call" and use.module is not None and any(value in facts.roots(v) for v in use.values):
                return f"the model `{use.module.name or 'module'}`"
        for use in facts.uses:
            if use.kind == "op" and any(value in facts.roots(v) for v in use.values):
                for other in use.values:
                    if other.output_of is not None:
                        return f"the output of `{other.output_of[0].name or 'module'}`"
        return "a tensor"
