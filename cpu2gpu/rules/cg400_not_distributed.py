"""CG400 not-distributed."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RuntimeSide

_SCRIPT = (
    "import torch\nfrom torch.utils.data import DataLoader\n"
    "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "loader = DataLoader(data, batch_size=8, shuffle=True)\n"
    "for epoch in range(3):\n    for x, y in loader:\n        opt.zero_grad()\n"
    "        torch.nn.functional.mse_loss(model(x), y).backward()\n        opt.step()\n"
    "torch.save(model.state_dict(), 'model.pt')\n"
)


class NotDistributed(Rule):
    """What a migration to DistributedDataParallel needs (with ``check --distributed ddp``).

    What it finds: in a script that trains in one process, each place the DDP migration
    changes: the model the training step calls (to be wrapped in DistributedDataParallel),
    each training DataLoader (a DistributedSampler, and ``set_epoch`` each epoch), the
    lines that would run on every rank (``print``, logging, ``torch.save``); or, at the top
    of the file, why the script cannot be migrated safely (an IterableDataset, a loop over
    tensors instead of a DataLoader, no optimizer, several models...). Off unless asked for:
    ``check --distributed ddp`` or ``distributed = "ddp"`` in ``[tool.cpu2gpu]``.

    Why it breaks on the GPU: run as it is under ``torchrun`` on N GPUs, the script trains N
    independent models on the same data (no gradient is shared), and every rank prints and
    writes the same checkpoint file at once. ``cpu2gpu rewrite --distributed ddp`` makes all
    of these changes together (one of them alone is not a working DDP script), so no finding
    has a fix of its own.

    Example::

        model = Net().to(device)                     # before
        model = DDP(Net().to(device), device_ids=...)  # after (with the process group,
                                                        # the sampler, rank-0 saving: rewrite --distributed ddp)
    """

    code = "CG400"
    name = "not-distributed"
    message = "{what}"
    fix_safety = None
    default_enabled = False
    runtime = RuntimeSide(
        unseen="a script that trains in one process runs as it is: nothing fails",
        unrepaired="the rule has no fix (rewrite --distributed ddp makes the whole DDP migration)",
    )
    VALID = [
        # no training step: nothing to distribute
        "import torch\nmodel = torch.nn.Linear(4, 1)\nprint(model(torch.randn(2, 4)))\n",
    ]
    INVALID = [Invalid(_SCRIPT, fixable=False)]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        module = ctx.facts.module
        if not _has_backward(ctx):  # cheap, before the plan: no training step, nothing to distribute
            return
        # (the DDP migration is imported only where a plan is made: check does not need it otherwise)
        from ..distributed.index import code_of
        from ..distributed.plan import Refusal, make_plan, single_process_lines

        try:
            plan = make_plan(module)
        except Refusal as refusal:
            if "already distributed" in str(refusal):
                return  # the CG40x rules judge a distributed script
            first = module.body[0] if module.body else module
            yield self.hit(first, message=f"cannot be migrated to DistributedDataParallel safely: {refusal}")
            return
        yield self.hit(plan.wrap_after, message=(
            f"`{plan.wrap_target}` trains in one process: under torchrun each rank would train its own copy; "
            "wrap it in DistributedDataParallel (`cpu2gpu rewrite --distributed ddp`)"))
        for call in plan.train_loaders:
            yield self.hit(call, message="training DataLoader without a DistributedSampler: every rank would see "
                                         "the whole data set, in the same order")
        for stmt in single_process_lines(plan):
            saves = "torch.save" in code_of(stmt)
            yield self.hit(stmt, message="every rank would write this file at once under torchrun: save on rank 0 only"
                           if saves else "every rank would print this under torchrun: print on rank 0 only")


def _has_backward(ctx: RuleContext) -> bool:
    syntax = ctx.syntax
    return syntax.mentions("backward") and any(node.attr.value == "backward" for node in syntax.of_type(cst.Attribute))
