"""CG205 hardcoded-cpu-device."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext, parsed
from .runtimeside import RuntimeSide


class HardcodedCpuDevice(Rule):
    """The script's device variable is the CPU, always.

    What it finds: ``device = torch.device("cpu")`` (or ``device = "cpu"``), bound
    once, in a script that places its model and tensors with ``.to(device)``.

    Why it breaks on the GPU: nothing fails, and nothing runs on the GPU either.
    Adding a second device variable would move half the tensors and leave the
    script's own moves on the CPU: the device itself is what must change.

    Example::

        device = torch.device("cpu")                                              # before
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")   # after
    """

    code = "CG205"
    name = "hardcoded-cpu-device"
    message = "device `{name}` is always the CPU; pick the GPU when there is one"
    runtime = RuntimeSide(
        unseen="nothing fails: the script runs on the CPU, which verify tells from its records (no module ran on "
               "the device) without a line to blame",
        unrepaired="no run names the line; round 0's rewrite makes the device variable pick the GPU",
    )
    VALID = [
        "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n",
        # a CPU device kept beside the GPU one, to copy results back
        "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "cpu = torch.device('cpu')\nx = torch.ones(2, device=device).to(cpu)\n",
        "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "host_device = torch.device('cpu')\nx = torch.ones(2, device=device).to(host_device)\n",
        # chosen later from a check: the cpu value is only the fallback
        "import torch\ndevice = torch.device('cpu')\nif torch.cuda.is_available():\n    device = torch.device('cuda')\n",
    ]
    INVALID = [
        Invalid(
            "import torch\ndevice = torch.device('cpu')\nmodel = torch.nn.Linear(3, 1).to(device)\n"
            "x = torch.randn(4, 3).to(device)\nprint(model(x))\n",
            "import torch\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            "model = torch.nn.Linear(3, 1).to(device)\nx = torch.randn(4, 3).to(device)\nprint(model(x))\n",
        ),
        Invalid(
            "import torch\nDEVICE = 'cpu'\nmodel = torch.nn.Linear(3, 1).to(DEVICE)\ny = model(torch.ones(1, 3))\n",
            "import torch\nDEVICE = \"cuda\" if torch.cuda.is_available() else \"cpu\"\n"
            "model = torch.nn.Linear(3, 1).to(DEVICE)\ny = model(torch.ones(1, 3, device=DEVICE))\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        torch_name = facts.torch_alias or "torch"
        choice = f'"cuda" if {torch_name}.cuda.is_available() else "cpu"'
        for name, literal, _ in facts.cpu_device_literals:
            if facts.device_name_bindings.get(name, 0) != 1:
                continue  # rebound elsewhere (if torch.cuda.is_available(): device = ...): already chosen
            if type(literal) is cst.Call:
                new = ctx.setup.expression or f"{torch_name}.device({choice})"
            else:
                new = choice  # a string stays a string: the script may compare it with "cpu"
            fix = Fix([Replace(literal, parsed(new))])
            yield self.hit(literal, fix, self.message.format(name=name))
