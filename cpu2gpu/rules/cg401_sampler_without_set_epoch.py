"""CG401 sampler-without-set-epoch."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ..analysis.ddpcode import DdpReading, reading, walk
from ..analysis.devicecode import keyword_value
from ..rewrite.fixes import Fix, InsertAtLoopStart
from ..analysis.imports import dotted
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RuntimeSide

_HEAD = ("import torch\nimport torch.distributed as dist\n"
         "from torch.utils.data import DataLoader\nfrom torch.utils.data.distributed import DistributedSampler\n"
         "dist.init_process_group('gloo')\n")


class SamplerWithoutSetEpoch(Rule):
    """A DistributedSampler that is never told the epoch: every epoch sees the same order.

    What it finds: in a distributed script, a ``DataLoader`` whose ``sampler=`` is a
    ``DistributedSampler`` (built in the call, or bound to a name) used inside an epoch loop (a
    ``for`` or ``while`` loop that iterates the loader, or hands it to a function, in its body)
    with no ``.set_epoch(...)`` call in that loop. A sampler built with ``shuffle=False`` is left
    alone, and so is a file that calls ``set_epoch`` in another function (it may be called every
    epoch).

    Why it breaks: a ``DistributedSampler`` shuffles with the seed plus the epoch it was last
    given by ``set_epoch``; never given one, it deals every rank the same shard in the same order
    in every epoch, as if ``shuffle`` were off after the first epoch. Nothing fails: the model
    trains on a fixed order and generalises worse.

    The fix inserts ``<sampler>.set_epoch(<epoch>)`` (or ``<loader>.sampler.set_epoch(<epoch>)``
    for a sampler built inside the ``DataLoader`` call) as the first statement of the epoch loop,
    where the loop's variable is a plain name and the sampler (or the loader) is bound before the
    loop; otherwise (``while`` loops, ``for _ in ...``, a loader built inside the loop) it is
    reported only. The fix is safe: it changes the order of the batches from the second epoch on,
    which is what ``shuffle`` asked for.

    Example::

        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        for epoch in range(10):
            sampler.set_epoch(epoch)                # added
            for x, y in loader:
                ...
    """

    code = "CG401"
    name = "sampler-without-set-epoch"
    message = ("the DistributedSampler of `{loader}` is never given the epoch in this loop "
               "(`{call}`): every epoch sees the same order")
    runtime = RuntimeSide(
        unseen="nothing fails: each epoch sees the same order, which no run's diagnosis names",
        unrepaired="nothing fails; round 0's rewrite calls set_epoch",
    )
    VALID = [
        _HEAD + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\n"
        "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x in loader:\n        step(x)\n",
        _HEAD + "loader = DataLoader(ds, sampler=DistributedSampler(ds))\n"
        "for epoch in range(3):\n    loader.sampler.set_epoch(epoch)\n    train(loader)\n",
        # no shuffling: the order does not depend on the epoch
        _HEAD + "loader = DataLoader(ds, sampler=DistributedSampler(ds, shuffle=False))\n"
        "for epoch in range(3):\n    for x in loader:\n        step(x)\n",
        # one pass, no epoch loop
        _HEAD + "sampler = DistributedSampler(ds)\nfor x in DataLoader(ds, sampler=sampler):\n    step(x)\n",
        # not a distributed script: a sampler of another kind
        "import torch\nfrom torch.utils.data import DataLoader, RandomSampler\n"
        "loader = DataLoader(ds, sampler=RandomSampler(ds))\nfor epoch in range(3):\n    for x in loader:\n"
        "        step(x)\n",
    ]
    INVALID = [
        Invalid(
            _HEAD + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, batch_size=4, sampler=sampler)\n"
            "for epoch in range(3):\n    for x in loader:\n        step(x)\n",
            _HEAD + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, batch_size=4, sampler=sampler)\n"
            "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x in loader:\n        step(x)\n",
        ),
        Invalid(
            _HEAD + "loader = DataLoader(ds, sampler=DistributedSampler(ds))\n"
            "def main():\n    for ep in range(3):\n        train(model, loader)\n",
            _HEAD + "loader = DataLoader(ds, sampler=DistributedSampler(ds))\n"
            "def main():\n    for ep in range(3):\n        loader.sampler.set_epoch(ep)\n        train(model, loader)\n",
        ),
        # a while loop: no epoch variable to give
        Invalid(
            _HEAD + "sampler = DistributedSampler(ds)\nloader = DataLoader(ds, sampler=sampler)\nepoch = 0\n"
            "while epoch < 3:\n    for x in loader:\n        step(x)\n    epoch += 1\n",
            None, fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        ddp = reading(ctx)
        if not ddp.distributed:
            return
        set_epoch_calls = [call for call in ddp.calls
                           if type(call.func) is cst.Attribute and call.func.attr.value == "set_epoch"]
        reported: set[int] = set()
        for loader_call, sampler_name, sampler_call in ddp.loaders_with_distributed_sampler():
            shuffle = keyword_value(sampler_call, "shuffle")
            if type(shuffle) is cst.Name and shuffle.value == "False":
                continue
            loader_name = _bound_name(ddp, loader_call)
            loop = _epoch_loop(ddp, loader_call, loader_name)
            if loop is None or id(loop) in reported:
                continue
            loop_function = ddp.function_of(loop)
            if any(ddp.inside(call, loop) or (ddp.function_of(call) not in (loop_function, None)
                                              and not _tells_another(ddp, call, sampler_name, loader_name))
                   for call in set_epoch_calls):
                continue  # told in the loop, or maybe by a function the loop calls
            reported.add(id(loop))
            epoch = _loop_variable(loop)
            receiver = None
            if sampler_name is not None and _bound_before(ddp, sampler_name, loop):
                receiver = sampler_name
            elif sampler_name is None and loader_name is not None and _bound_before(ddp, loader_name, loop):
                receiver = f"{loader_name}.sampler"
            statement = f"{receiver or '<sampler>'}.set_epoch({epoch or 'epoch'})"
            fix = None
            if receiver is not None and epoch is not None and type(loop) is cst.For:
                fix = Fix([InsertAtLoopStart(loop, statement)], description=f"insert `{statement}`")
            where = loop.iter if type(loop) is cst.For else loop.test
            message = self.message.format(loader=loader_name or "DataLoader(...)", call=statement)
            yield self.hit(where, fix, message)


def _tells_another(ddp: DdpReading, call: cst.Call, sampler: Optional[str], loader: Optional[str]) -> bool:
    """``other_sampler.set_epoch(...)``: a call that names another sampler of the file (one whose
    receiver is a parameter, or unknown, may be this sampler's)."""
    receiver = dotted(call.func.value)  # type: ignore[attr-defined]
    if receiver is None or receiver in (sampler, f"{loader}.sampler"):
        return False
    return receiver in ddp.samplers


def _bound_name(ddp: DdpReading, call: cst.Call) -> Optional[str]:
    """``loader`` in ``loader = DataLoader(...)``."""
    parent = ddp.parent(call)
    if type(parent) is cst.Assign and len(parent.targets) == 1:
        return dotted(parent.targets[0].target)
    if type(parent) is cst.AnnAssign:
        return dotted(parent.target)
    return None


def _mentions(node: cst.CSTNode, name: Optional[str], call: cst.Call) -> bool:
    for current in walk(node):
        if current is call:
            return True
        if name is not None and isinstance(current, (cst.Name, cst.Attribute)) and dotted(current) == name:
            return True
    return False


def _epoch_loop(ddp: DdpReading, loader_call: cst.Call, loader_name: Optional[str]):
    """The loop over epochs that uses the loader: the outermost ``for``/``while`` of the loader's
    function (or the module) whose body mentions it and that is not itself inside a loop over the
    loader; the innermost such loop whose variable names an epoch, if there is one."""
    candidates = []
    for node in ddp.loops:
        head = node.iter if type(node) is cst.For else node.test
        if _mentions(head, loader_name, loader_call):
            continue  # the loop over the batches
        if not _mentions(node.body, loader_name, loader_call):
            continue
        if any(type(a) is cst.For and _mentions(a.iter, loader_name, loader_call) for a in ddp.ancestors(node)):
            continue
        if loader_name is not None and not _bound_before(ddp, loader_name, node) \
                and not _mentions(node.body, None, loader_call):
            continue  # another loader of the same name
        candidates.append(node)
    if not candidates:
        return None
    outer = candidates[0]
    epochs = [c for c in candidates if ddp.inside(c, outer) and "epoch" in (_loop_variable(c) or "").lower()]
    if epochs:
        return epochs[-1]
    return outer


def _loop_variable(loop) -> Optional[str]:
    if type(loop) is cst.For and type(loop.target) is cst.Name and loop.target.value != "_":
        return loop.target.value
    return None


def _bound_before(ddp: DdpReading, name: str, loop: cst.CSTNode) -> bool:
    """``name`` is bound before ``loop`` (in its function, or at module level) and not inside it."""
    found = ddp.last_binding(name, loop)
    if found is None:
        return "." in name and name.startswith("self.")  # an attribute set in __init__
    return not ddp.inside(found[1], loop)

