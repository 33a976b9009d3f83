"""CG101 model-not-moved."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ..analysis.facts import Kind, Place
from ..rewrite.fixes import Edit, Fix, InsertAfter, Replace
from .base import Hit, Invalid, Rule, RuleContext, moved_to
from .runtimeside import BINDING, CPU_MODULE, DEVICE_MISMATCH, RuntimeRepair, RuntimeSide, Symptom


class ModelNotMoved(Rule):
    """A module that is called or trained never reaches the device.

    What it finds: an ``nn.Module`` instance (a class of the file, a ``torch.nn`` layer,
    a ``torchvision.models`` factory) that is called on data or whose parameters go to
    an optimizer, with no ``.to(device)`` / ``.cuda()`` anywhere.

    Why it breaks on the GPU: its weights stay on the CPU. Fed device tensors it fails
    with "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor)
    should be the same"; fed CPU tensors it silently trains on the CPU.

    Example::

        model = Net()                      # before
        model = Net().to(device)           # after
    """

    code = "CG101"
    name = "model-not-moved"
    message = "module `{name}` is used but never moved to the device"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "module", "a device mismatch where a module on the failing lines (the outermost) still has its weights "
            "on the CPU, a device tensor is on its line, and the run never called it on the device",
            "{name} ({type}) stayed on the CPU while {tensor} is on cuda:0 at {at}; move the model with .to(device)",
            DEVICE_MISMATCH),),
        records=("a device run that trained, in which no module ran forward on the device",),
        repair=RuntimeRepair(BINDING, located=CPU_MODULE),
    )
    VALID = [
        # a data transform's own layer, applied to what a data set's worker makes on the CPU
        "import torch\nfrom torch import nn\nfrom torchvision import transforms\nclass Blur:\n"
        "    def __init__(self):\n        self.conv = nn.Conv2d(3, 3, 3, padding=1, bias=False)\n"
        "        self.to_tensor = transforms.ToTensor()\n"
        "    def __call__(self, img):\n        with torch.no_grad():\n            return self.conv(self.to_tensor(img)[None])[0]\n"
        "blur = Blur()\n",
        "import torch.nn as nn\nmodel = nn.Linear(1, 1).to(device)\nmodel(x)\n",
        "import torch.nn as nn\nmodel = nn.Linear(1, 1)\nmodel.to(device)\nmodel(x)\n",
        "import torch.nn as nn\nmodel = nn.Linear(1, 1)\nif use_cuda:\n    model.cuda()\nmodel(x)\n",
        "import torch.nn as nn\nrelu = nn.ReLU()\nrelu(x)\n",
        "import torch.nn as nn\nmodel = nn.Linear(1, 1)\n",
        # Holds nothing to move: only a forward().
        "import torch\nfrom torch import nn\nclass Double(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
        "double = Double()\ndouble(torch.ones(1))\n",
        # Places its own layers.
        "from torch import nn\nclass Split(nn.Module):\n    def __init__(self, rank):\n        super().__init__()\n"
        "        self.fc = nn.Linear(1, 1).cuda(rank)\nSplit(0)(x)\n",
        # Built and handed to code outside the file.
        "import torch\nfrom torch import nn\ndef load_train_objs():\n    model = nn.Linear(1, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n    return model, optimizer\n",
    ]
    INVALID = [
        Invalid(  # models kept in a list, and a second model trained by the same function
            "import torch\nfrom torch import nn\nnets = [nn.Linear(1, 1), nn.Linear(1, 1)]\n"
            "for net in nets:\n    net(torch.ones(2, 1))\ndef fit(m):\n    m(torch.ones(2, 1))\n"
            "a = nn.Linear(1, 1)\nb = nn.Linear(1, 1)\nfit(a)\nfit(b)\n",
            "import torch\nfrom torch import nn\n\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            "nets = [nn.Linear(1, 1).to(device), nn.Linear(1, 1).to(device)]\n"
            "for net in nets:\n    net(torch.ones(2, 1, device=device))\ndef fit(m):\n    m(torch.ones(2, 1, device=device))\n"
            "a = nn.Linear(1, 1).to(device)\nb = nn.Linear(1, 1).to(device)\nfit(a)\nfit(b)\n",
        ),
        Invalid(  # a container filled after it is built: moved after its last layer
            "import torch\nfrom torch import nn\nmodel = nn.Sequential()\nmodel.add_module('fc', nn.Linear(3, 8))\n"
            "for i in range(2):\n    model.add_module(f'act{i}', nn.ReLU())\nout = model(x)\n",
            "import torch\nfrom torch import nn\n\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            "model = nn.Sequential()\nmodel.add_module('fc', nn.Linear(3, 8))\n"
            "for i in range(2):\n    model.add_module(f'act{i}', nn.ReLU())\nmodel.to(device)\nout = model(x)\n",
        ),
        Invalid(
            "import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(1, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
            "import torch\nimport torch.nn as nn\n\n"
            'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n\n'
            "model = nn.Linear(1, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        ),
        Invalid(
            "from torch import nn\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(1, 1)\nnet = nn.DataParallel(Net())\nnet(x)\n",
            "from torch import nn\nimport torch\n\n"
            'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
            "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(1, 1)\nnet = nn.DataParallel(Net())\nnet.to(device)\nnet(x)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for value in facts.values:
            if value.kind is not Kind.MODULE or not facts.is_bound(value) or value.explicit is not None:
                continue
            if value.weighted_loss:
                continue  # CG106 says it in the loss's terms
            if value.loaded_without_map_location:
                continue  # a whole model from torch.load: CG202's map_location=device places it
            if value.context == "module-method":
                continue  # a layer built inside a module's method: CG111 builds it in __init__
            if any(move.place is Place.DEVICE for move in value.moves):
                continue
            if value.attached_to is not None:
                continue  # a layer set on another model: it moves with that model
            message = self.message.format(name=value.name or _code(value.node))
            cls = value.class_value
            if cls is not None and cls.origin_file is not None:
                message += f" (class `{cls.name}` from {cls.origin_file})"  # the reason lies in another file
            yield self.hit(value.node, move_module(ctx, value), message)


def move_module(ctx: RuleContext, value) -> Optional[Fix]:
    """Move a module where it is built: chained on ``name = Net()``, else on the next line; a
    container filled after it is built (``add_module``), after the last layer is added."""
    device, needs_setup = ctx.device_for(value.scope, value.time)
    stmt = value.binding_stmt
    if value.changed_elsewhere:
        return None  # layers added in another block: no one place moves them all
    if value.last_change_stmt is not None and value.name is not None:
        edit: Edit = InsertAfter(value.last_change_stmt, f"{value.name}.to({device})")
    elif value.fix_node is not None:
        edit = Replace(value.fix_node, moved_to(device))
    elif stmt is not None and value.name is not None:
        edit = InsertAfter(stmt, f"{value.name}.to({device})")
    else:
        edit = Replace(value.node, moved_to(device))
    return Fix([edit], needs_device_setup=needs_setup, description=f"move `{value.name}` to the device")


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
