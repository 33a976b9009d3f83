"""CG404 sampler-with-shuffle."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis.ddpcode import reading
from ..analysis.devicecode import keyword_value
from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RuntimeSide

_HEAD = ("import torch\nfrom torch.utils.data import DataLoader\n"
         "from torch.utils.data.distributed import DistributedSampler\n")


class SamplerWithShuffle(Rule):
    """``DataLoader(..., sampler=DistributedSampler(...), shuffle=True)``: the loader refuses it.

    What it finds: a ``DataLoader`` given both ``shuffle=True`` and a ``DistributedSampler`` as its
    ``sampler=`` (built in the call, or bound to a name).

    Why it breaks: a ``DataLoader`` shuffles through its sampler, so it takes either a sampler or
    ``shuffle``, not both: it raises "ValueError: sampler option is mutually exclusive with
    shuffle" when it is built, on every rank. (A script that only ever ran on one process, with
    ``shuffle=True`` and no sampler, meets it the day the sampler is added.)

    The fix drops ``shuffle=True`` from the ``DataLoader``. It is safe: the ``DistributedSampler``
    shuffles by default (``shuffle=True`` is its default), so the batches are still shuffled, each
    rank its own shard. Where the sampler is built with ``shuffle=False`` the two arguments say
    opposite things, and the finding is reported only: which one is meant is the author's call.

    Example::

        loader = DataLoader(ds, batch_size=32, sampler=DistributedSampler(ds), shuffle=True)  # before
        loader = DataLoader(ds, batch_size=32, sampler=DistributedSampler(ds))                # after
    """

    code = "CG404"
    name = "sampler-with-shuffle"
    message = ("`shuffle=True` with a DistributedSampler: DataLoader raises \"sampler option is mutually exclusive "
               "with shuffle\"; drop it (the DistributedSampler shuffles by default)")
    runtime = RuntimeSide(
        unseen="the DataLoader's ValueError names no device, and the diagnosis leaves it to the script's traceback",
        unrepaired="the diagnosis names no rule for it; round 0's rewrite drops shuffle=True",
    )
    VALID = [
        _HEAD + "loader = DataLoader(ds, sampler=DistributedSampler(ds), shuffle=False)\n",
        _HEAD + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler, shuffle=(sampler is None))\n",
        _HEAD + "loader = DataLoader(ds, batch_size=4, shuffle=True)\n",
    ]
    INVALID = [
        Invalid(
            _HEAD + "loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds), shuffle=True)\n",
            _HEAD + "loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds))\n",
        ),
        Invalid(
            _HEAD + "sampler = DistributedSampler(ds, seed=1)\n"
            "loader = DataLoader(\n    ds,\n    shuffle=True,\n    sampler=sampler,\n)\n",
            _HEAD + "sampler = DistributedSampler(ds, seed=1)\n"
            "loader = DataLoader(\n    ds,\n    sampler=sampler,\n)\n",
        ),
        Invalid(
            _HEAD + "loader = DataLoader(ds, sampler=DistributedSampler(ds, shuffle=False), shuffle=True)\n",
            None, fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        ddp = reading(ctx)
        if not ddp.distributed:
            return
        for loader, _, sampler in ddp.loaders_with_distributed_sampler():
            shuffle = keyword_value(loader, "shuffle")
            if not (type(shuffle) is cst.Name and shuffle.value == "True"):
                continue
            own = keyword_value(sampler, "shuffle")
            fix = None
            if own is None or (type(own) is cst.Name and own.value == "True"):
                fix = Fix([Replace(loader, _drop_shuffle)], description="drop `shuffle=True`")
            arg = next(a for a in loader.args if a.keyword is not None and a.keyword.value == "shuffle")
            yield self.hit(arg, fix)


def _drop_shuffle(call: cst.CSTNode) -> cst.CSTNode:
    """The call without its ``shuffle=`` argument, the layout of the others kept."""
    assert isinstance(call, cst.Call)
    args = list(call.args)
    index = next(i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "shuffle")
    removed = args.pop(index)
    if index == len(args) and args:
        # the last argument goes: the one before takes its comma (or lack of one) and its spacing
        args[-1] = args[-1].with_changes(comma=removed.comma, whitespace_after_arg=removed.whitespace_after_arg)
    return call.with_changes(args=args)
