"""CG108 device-mismatch-after-move."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..facts import Place
from ..fixes import Fix, Replace, method_call
from .base import Hit, Invalid, Rule, RuleContext


class DeviceMismatchAfterMove(Rule):
    """A module moved to another device is called with tensors left on the old one.

    What it finds: a call of a module after ``model.to(torch.device("cpu"))`` /
    ``model.cpu()`` (or a move to the device) whose tensor arguments are still where
    the module used to be: the last step of many tutorials, which move the model
    back to the CPU to predict and feed it the training tensors.

    Why it breaks on the GPU: the inputs are on cuda:0 and the weights on the CPU:
    "Expected all tensors to be on the same device". On a CPU-only machine every
    move is a no-op, so the bug stays hidden until the GPU run.

    Example::

        model.to(torch.device("cpu"))
        predicted = model(x_train).detach().numpy()        # before
        predicted = model(x_train.cpu()).detach().numpy()  # after
    """

    code = "CG108"
    name = "device-mismatch-after-move"
    message = "`{arg}` is on the {arg_place} but `{module}` was moved to the {module_place}"
    VALID = [
        "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\nx = torch.ones(1, device=device)\n"
        "model.cpu()\nmodel(x.cpu())\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\nx = torch.ones(1, device=device)\n"
            "model(x)\nmodel.to(torch.device('cpu'))\nprint(model(x))\n",
            "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\nx = torch.ones(1, device=device)\n"
            "model(x)\nmodel.to(torch.device('cpu'))\nprint(model(x.cpu()))\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for use in facts.uses:
            if use.kind != "call":
                continue
            moves = [m for m in use.module.moves if m.time <= use.time]
            if moves:
                move_place, move_target = moves[-1].place, moves[-1].target
            elif use.module.stateful and facts.module_place(use.module, use.time) is Place.DEVICE:
                # Moved by the migration itself: only inputs pinned to the CPU (a data set's) can clash.
                move_place, move_target = Place.DEVICE, None
            else:
                continue
            for value, arg_node in zip(use.values, use.arg_nodes):
                place = facts.place(value)
                if place is Place.UNKNOWN or place is move_place:
                    continue
                if not moves and facts.roots(value):
                    continue  # CG102/CG103 move it where it is made
                if move_place is Place.CPU:
                    build = lambda node: method_call(node, "cpu")  # noqa: E731
                else:
                    target = move_target if move_target is not None else cst.parse_expression(
                        ctx.device_for(use.module.scope, use.time)[0]
                    )
                    build = lambda node, t=target: method_call(node, "to", t)  # noqa: E731
                arg = cst.Module([]).code_for_node(arg_node)
                message = self.message.format(
                    arg=arg, arg_place=_word(place), module=use.module.name or "module", module_place=_word(move_place)
                )
                yield self.hit(arg_node, Fix([Replace(arg_node, build)]), message)


def _word(place: Place) -> str:
    return "CPU" if place is Place.CPU else "device"
