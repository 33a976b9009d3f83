"""CG303 sync-in-loop."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis.facts import Place
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RuntimeSide


class SyncInLoop(Rule):
    """A copy to the host on every training step.

    What it finds: ``.item()``, ``.cpu()``, ``.numpy()``, ``.tolist()`` or
    ``print(tensor)`` of a device tensor in the body of a loop over a DataLoader,
    outside any ``if`` (so on every step).

    Why it is slower on the GPU: each one waits for every queued kernel to finish
    before the host can read the value, so the CPU cannot run ahead and queue the
    next step. Log every N steps, or accumulate on the device.

    Example::

        for x, y in loader:                           # before
            ...
            total += loss.item()

        for i, (x, y) in enumerate(loader):           # after
            ...
            running += loss.detach()
            if i % 100 == 0:
                print(running.item() / 100)

    A hint with no fix, off unless selected (``--select CG303``).
    """

    code = "CG303"
    only_for_cpu_scripts_unless_selected = True
    name = "sync-in-loop"
    message = "`{code}` waits for the GPU on every step"
    fix_safety = None
    default_enabled = False
    runtime = RuntimeSide(
        unseen="a performance hint: nothing fails, each step only waits for the device",
        unrepaired="the rule has no fix",
    )
    VALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nmodel = torch.nn.Linear(1, 1).to(device)\n"
        "for i, (x, y) in enumerate(DataLoader(ds)):\n    loss = model(x.to(device))\n    if i % 10 == 0:\n"
        "        print(loss.item())\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\nmodel = torch.nn.Linear(1, 1).to(device)\n"
            "for x, y in DataLoader(ds):\n    loss = model(x.to(device)).sum()\n    total = loss.item()\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        for use in ctx.facts.uses:
            if use.kind == "sync" and ctx.facts.place(use.values[0]) is Place.DEVICE:
                code = cst.Module([]).code_for_node(use.node)
                yield self.hit(use.node, None, self.message.format(code=code if len(code) < 50 else code[:47] + "..."))
