"""CG106 loss-weight-not-moved."""

from __future__ import annotations

from typing import Iterator

from ..analysis.facts import Kind, Place
from .base import Hit, Invalid, Rule, RuleContext
from .cg101_model_not_moved import move_module
from .runtimeside import DEVICE_MISMATCH, RULE_FIX, RuntimeRepair, RuntimeSide, Symptom


class LossWeightNotMoved(Rule):
    """A loss built with tensor arguments is not moved to the device.

    What it finds: ``nn.CrossEntropyLoss(weight=w)``, ``nn.BCEWithLogitsLoss(pos_weight=p)``
    and other losses given tensors, with no ``.to(device)``.

    Why it breaks on the GPU: the loss keeps those tensors as buffers on the CPU;
    called with device outputs it fails with "Expected all tensors to be on the
    same device". Losses without tensor arguments need no move.

    Example::

        criterion = nn.CrossEntropyLoss(weight=class_weights)              # before
        criterion = nn.CrossEntropyLoss(weight=class_weights).to(device)   # after
    """

    code = "CG106"
    name = "loss-weight-not-moved"
    message = "loss `{name}` holds tensor arguments on the CPU; move it to the device"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "loss-weight", "a device mismatch where a loss on the failing line keeps its weight or pos_weight "
            "buffer on the CPU",
            "the loss weight {name}.{weight} ({type}) stayed on the CPU at {at}; move the criterion or its weight "
            "to the device", DEVICE_MISMATCH),),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        "import torch\nfrom torch import nn\ncriterion = nn.CrossEntropyLoss()\nloss = criterion(out, y)\n",
        "import torch\nfrom torch import nn\nw = torch.ones(3)\ncriterion = nn.CrossEntropyLoss(weight=w).to(device)\n"
        "loss = criterion(out, y)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch import nn\nw = torch.tensor([1.0, 2.0])\ncriterion = nn.CrossEntropyLoss(weight=w)\n"
            "loss = criterion(out, y)\n",
            "import torch\nfrom torch import nn\n\n"
            'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
            "w = torch.tensor([1.0, 2.0])\ncriterion = nn.CrossEntropyLoss(weight=w).to(device)\n"
            "loss = criterion(out, y)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for value in facts.values:
            if value.kind is not Kind.MODULE or not value.weighted_loss or not facts.is_bound(value):
                continue
            if value.explicit is not None or any(m.place is Place.DEVICE for m in value.moves):
                continue
            yield self.hit(value.node, move_module(ctx, value), self.message.format(name=value.name or "loss"))
