"""CG108 device-mismatch-after-move."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis.core import CONTAINER_DISPLAYS
from ..analysis.facts import Place
from ..rewrite.fixes import Fix, Replace
from .base import Build, Hit, Invalid, Rule, RuleContext, method_called
from .runtimeside import DEVICE_MISMATCH, RULE_FIX, RuntimeRepair, RuntimeSide, Symptom


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
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "moved-back", "a device mismatch where a module on the failing lines has its weights on the CPU while a "
            "device tensor is on its line, and the run had called it on the device before (it was moved back)",
            "{name} ({type}) was moved back to the CPU and then called with device tensors ({tensor} is on cuda:0) "
            "at {at}; move the inputs too (e.g. {tensor}.cpu())", DEVICE_MISMATCH),),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\nx = torch.ones(1, device=device)\n"
        "model.cpu()\nmodel(x.cpu())\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
            "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "x = torch.randn(8, 2)\ny = torch.randint(0, 2, (8,))\nds = TensorDataset(x, y)\n"
            "model = torch.nn.Linear(2, 2).to(device)\nacc = (model(x.to(device)).argmax(1) == y).float().mean()\n",
            "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
            "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "x = torch.randn(8, 2)\ny = torch.randint(0, 2, (8,))\nds = TensorDataset(x, y)\n"
            "model = torch.nn.Linear(2, 2).to(device)\nacc = (model(x.to(device)).argmax(1) == y.to(device)).float().mean()\n",
        ),
        Invalid(
            "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\nx = torch.ones(1, device=device)\n"
            "model(x)\nmodel.to(torch.device('cpu'))\nprint(model(x))\n",
            "import torch\nmodel = torch.nn.Linear(1, 1).to(device)\nx = torch.ones(1, device=device)\n"
            "model(x)\nmodel.to(torch.device('cpu'))\nprint(model(x.cpu()))\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        yield from self._calls(ctx)
        yield from self._ops(ctx)

    def _ops(self, ctx: RuleContext) -> Iterator[Hit]:
        """A data set's tensor (kept on the CPU for the loader) meets a device tensor in an op."""
        facts = ctx.facts
        seen: set[int] = set()
        for use in facts.uses:
            if use.kind != "op" or not use.arg_nodes:
                continue
            places = [facts.place(v) for v in use.values]
            if Place.DEVICE not in places:
                continue
            for value, place, arg_node in zip(use.values, places, use.arg_nodes):
                if place is not Place.CPU or id(arg_node) in seen or not _pinned_by_dataset(facts, value) \
                        or isinstance(arg_node, CONTAINER_DISPLAYS):
                    continue  # (a list of tensors has no .to())
                seen.add(id(arg_node))
                device, needs_setup = ctx.device_for(use.scope, use.time)
                target = cst.parse_expression(device)
                arg = cst.Module([]).code_for_node(arg_node)
                message = f"`{arg}` is a data set's tensor on the CPU but meets a tensor on the device"
                fix = Fix([Replace(arg_node, method_called("to", target))], needs_device_setup=needs_setup)
                yield self.hit(arg_node, fix, message)

    def _calls(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for use in facts.uses:
            module = use.module  # (set for every call)
            if use.kind != "call" or module is None or not module.stateful:
                continue  # a module without parameters or buffers computes wherever its input is
            moves = [m for m in module.moves if m.time <= use.time]
            if moves:
                move_place, move_target = moves[-1].place, moves[-1].target
            elif module.stateful and facts.module_place(module, use.time) is Place.DEVICE:
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
                if isinstance(arg_node, CONTAINER_DISPLAYS):
                    continue  # model([a, b]): a list of tensors has no .to() (or .cpu())
                if move_place is Place.CPU:
                    build: Build = method_called("cpu")
                else:
                    target = move_target if move_target is not None else cst.parse_expression(
                        ctx.device_for(module.scope, use.time)[0]
                    )
                    build = method_called("to", target)
                arg = cst.Module([]).code_for_node(arg_node)
                message = self.message.format(
                    arg=arg, arg_place=_word(place), module=module.name or "module", module_place=_word(move_place)
                )
                yield self.hit(arg_node, Fix([Replace(arg_node, build)]), message)


def _pinned_by_dataset(facts, value) -> bool:
    """Whether every tensor this value comes from was given to a TensorDataset."""
    if value.is_root:
        return value.dataset_pinned
    if value.explicit is not None or value.output_of is not None or not value.sources:
        return False
    return all(_pinned_by_dataset(facts, source) for source in value.sources)


def _word(place: Place) -> str:
    return "CPU" if place is Place.CPU else "device"
