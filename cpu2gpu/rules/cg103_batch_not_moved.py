"""CG103 batch-not-moved."""

from __future__ import annotations

from typing import Iterator

from ..facts import Kind, Origin
from ..fixes import Fix, InsertAtLoopStart
from .base import Hit, Invalid, Rule, RuleContext


class BatchNotMoved(Rule):
    """A DataLoader loop variable is used without a move to the device.

    What it finds: the variables of ``for x, y in loader`` (also under
    ``enumerate``) that reach the model or meet its output while still on the CPU.

    Why it breaks on the GPU: a DataLoader yields CPU tensors; the model's weights
    are on the device, so the forward pass or the loss fails with "Expected all
    tensors to be on the same device".

    Example::

        for images, labels in loader:                                    # before
            outputs = model(images)

        for images, labels in loader:                                    # after
            images, labels = images.to(device), labels.to(device)
            outputs = model(images)
    """

    code = "CG103"
    name = "batch-not-moved"
    message = "batch variable `{name}` from a DataLoader is used without a move to the device"
    VALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nmodel = torch.nn.Linear(2, 1).to(device)\n"
        "for x, y in DataLoader(ds):\n    x, y = x.to(device), y.to(device)\n    loss = model(x) - y\n",
        "import torch\nfrom torch.utils.data import DataLoader\nmodel = torch.nn.Linear(2, 1).to(device)\n"
        "for x, _ in DataLoader(ds):\n    print(x.shape)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader as DL\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 1).to(device)\nloader = DL(ds, pin_memory=True)\n"
            "for i, (x, y) in enumerate(loader):\n    # forward\n    loss = (model(x) - y).pow(2).mean()\n",
            "import torch\nfrom torch.utils.data import DataLoader as DL\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 1).to(device)\nloader = DL(ds, pin_memory=True)\n"
            "for i, (x, y) in enumerate(loader):\n    x, y = x.to(device), y.to(device)\n    # forward\n"
            "    loss = (model(x) - y).pow(2).mean()\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        by_loop: dict[int, list] = {}
        for value in facts.values:
            if value.kind is Kind.BATCH and value.origin is Origin.LOOP and facts.is_bound(value):
                by_loop.setdefault(id(value.loop), []).append(value)
        for values in by_loop.values():
            loop = values[0].loop
            device, needs_setup = ctx.device_for(values[0].scope)
            names = [v.name for v in values]
            moved = ", ".join(f"{n}.to({device})" for n in names)
            fix = Fix([InsertAtLoopStart(loop, f"{', '.join(names)} = {moved}")], needs_device_setup=needs_setup)
            for value in values:
                yield self.hit(value.node, fix, self.message.format(name=value.name))
