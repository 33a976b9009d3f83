"""CG203 optimizer-before-move."""

from __future__ import annotations

from typing import Iterator

from ..facts import Place
from .base import Hit, Invalid, Rule, RuleContext
from .cg101_model_not_moved import move_module


class OptimizerBeforeMove(Rule):
    """An optimizer is built from a model's parameters before the model is moved.

    What it finds: ``optimizer = SGD(model.parameters())`` followed later by
    ``model.to(device)``.

    Why it breaks on the GPU: built-in optimizers look their parameters up at each
    step and survive it, but optimizers that make state when built (Adagrad), an
    optimizer whose state is loaded before the move, and many third-party ones keep
    CPU tensors and fail at the first step on the GPU. Moving first is always right.

    Example::

        model = Net()                                         # before
        optimizer = torch.optim.Adagrad(model.parameters())
        model.to(device)

        model = Net().to(device)                              # after
        optimizer = torch.optim.Adagrad(model.parameters())
        model.to(device)
    """

    code = "CG203"
    name = "optimizer-before-move"
    message = "optimizer built from `{name}` before `{name}` is moved to the device; move the model first"
    VALID = [
        "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(1, 1)\nopt = torch.optim.Adagrad(model.parameters())\nmodel.to(device)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(1, 1).to(device)\nopt = torch.optim.Adagrad(model.parameters())\n"
            "model.to(device)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for use in facts.uses:
            if use.kind != "train":
                continue
            module = use.module
            later = [m for m in module.moves if m.place is Place.DEVICE and m.time > use.time]
            if not later or module.explicit is Place.DEVICE:
                continue
            if any(m.place is Place.DEVICE for m in module.moves if m.time <= use.time):
                continue
            yield self.hit(use.node, move_module(ctx, module), self.message.format(name=module.name or "model"))
