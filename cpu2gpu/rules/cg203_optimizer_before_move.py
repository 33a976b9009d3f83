"""CG203 optimizer-before-move."""

from __future__ import annotations

from typing import Iterator

from ..analysis.facts import Place
from .base import Hit, Invalid, Rule, RuleContext
from .cg101_model_not_moved import move_module
from .runtimeside import DEVICE_MISMATCH, RULE_FIX, RuntimeRepair, RuntimeSide, Symptom


class OptimizerBeforeMove(Rule):
    """An optimizer is built from a model's parameters before the model is moved.

    What it finds: ``optimizer = SGD(model.parameters())`` followed later by
    ``model.to(device)``.

    Why it breaks on the GPU: built-in optimizers look their parameters up at each
    step and survive a later move, but optimizers that make state when built
    (Adagrad), an optimizer whose state is loaded (``optimizer.load_state_dict``)
    before the move, and many third-party ones keep CPU tensors and fail at the
    first step on the GPU: "Expected all tensors to be on the same device". Those
    two cases are reported as failures, the others as a warning. Moving first is
    always right.

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
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "optimizer-state", "a device mismatch on a line that calls .step(, where an optimizer there holds state "
            "on the CPU for parameters on the device",
            "the optimizer {optimizer} holds state on the CPU while its parameters are on the device at {at}: it "
            "was built, or its state loaded, before the model was moved; move the model first", DEVICE_MISMATCH),),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(1, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "opt.load_state_dict(torch.load('opt.pt', map_location=device))\nmodel.to(device)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(1, 1).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "opt.load_state_dict(torch.load('opt.pt', map_location=device))\nmodel.to(device)\n",
        ),
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
        moved: set[int] = set()  # one fix per model, the loaded state named first
        uses = sorted((u for u in facts.uses if u.kind in ("train", "load-state")), key=lambda u: u.kind != "load-state")
        for use in uses:
            module = use.module  # the model trained, or whose optimizer's state is loaded (always set)
            if module is None or id(module) in moved:
                continue
            later = [m for m in module.moves if m.place is Place.DEVICE and m.time > use.time]
            if not later or module.explicit is Place.DEVICE:
                continue
            if any(m.place is Place.DEVICE for m in module.moves if m.time <= use.time):
                continue
            name = module.name or "model"
            if use.kind == "load-state":
                message = self.loaded_message.format(name=name)
            elif _resolve(facts, use.node) in _STATE_AT_CONSTRUCTION:
                message = self.state_message.format(name=name, optimizer=_resolve(facts, use.node).rsplit(".", 1)[1])
            else:
                message = self.message.format(name=name)
            moved.add(id(module))
            yield self.hit(use.node, move_module(ctx, module), message)

    loaded_message = ("optimizer state is loaded before `{name}` is moved: it stays on the CPU and the first GPU step "
                      "fails; move the model before building the optimizer and loading its state")
    state_message = ("`{optimizer}` makes its state when built: built before `{name}` is moved, its first GPU step "
                     "fails; move the model first")


# Optimizers that allocate per-parameter state in __init__, on the parameters' device at that time.
_STATE_AT_CONSTRUCTION = frozenset({"torch.optim.Adagrad", "torch.optim.adagrad.Adagrad"})


def _resolve(facts, node) -> str:
    func = getattr(node, "func", None)
    return (facts.imports.resolve(func) if facts.imports is not None and func is not None else None) or ""
