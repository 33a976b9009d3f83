"""CG405 load-without-rank-map-location."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ..analysis.ddpcode import DdpReading, mentions_rank, reading, walk
from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext, keyword_added
from .runtimeside import RuntimeSide

_HEAD = ("import os\nimport torch\nimport torch.distributed as dist\n"
         "from torch.nn.parallel import DistributedDataParallel as DDP\n")


class LoadWithoutRankMapLocation(Rule):
    """``torch.load`` without ``map_location`` in a distributed script.

    What it finds: in a distributed script, a ``torch.load(...)`` that does not say where the loaded
    tensors go. In such a script this rule takes over from CG202 (load-without-map-location), which
    then leaves the call alone: one finding per call.

    Why it breaks: a checkpoint loads its tensors back onto the device they were saved from, which
    is ``cuda:0`` for a checkpoint saved by rank 0. Every rank loads its copy onto GPU 0: GPU 0
    runs out of memory, or the ranks' models end up on one GPU while their inputs are on their own.

    The fix adds ``map_location=<the rank's device>`` where the script makes that device evident: a
    name bound, before the call in the same function or at module level, to a device built from a
    rank (``torch.device(f"cuda:{local_rank}")``, ``f"cuda:{rank}"``, ``"cuda:%d" % args.local_rank``).
    A checkpoint read on the host (``torch.load(f).numpy()``) gets ``map_location="cpu"``. Otherwise
    it is reported only: the device of a rank is the script's own choice (``map_location="cpu"``
    and a move after loading is always right).

    Example::

        device = torch.device(f"cuda:{local_rank}")
        state = torch.load("ckpt.pt")                          # before: every rank onto GPU 0
        state = torch.load("ckpt.pt", map_location=device)     # after
    """

    code = "CG405"
    name = "load-without-rank-map-location"
    message = ("`torch.load` without `map_location` in a distributed script: every rank loads the checkpoint "
               "onto the GPU it was saved from (GPU 0); give it the rank's device")
    runtime = RuntimeSide(
        unseen="in a distributed run every rank loads onto GPU 0, which fails only for lack of memory or later, "
               "with no rule the diagnosis names",
        unrepaired="no run names it; round 0's rewrite passes the rank's device as map_location",
    )
    VALID = [
        _HEAD + "local_rank = int(os.environ['LOCAL_RANK'])\ndist.init_process_group('nccl')\n"
        "state = torch.load('m.pt', map_location=f'cuda:{local_rank}')\n",
        # not distributed: CG202's
        "import torch\nstate = torch.load('m.pt')\n",
    ]
    INVALID = [
        Invalid(
            _HEAD + "def main():\n    local_rank = int(os.environ['LOCAL_RANK'])\n    dist.init_process_group('nccl')\n"
            "    device = torch.device(f'cuda:{local_rank}')\n    state = torch.load('m.pt')\n",
            _HEAD + "def main():\n    local_rank = int(os.environ['LOCAL_RANK'])\n    dist.init_process_group('nccl')\n"
            "    device = torch.device(f'cuda:{local_rank}')\n    state = torch.load('m.pt', map_location=device)\n",
        ),
        Invalid(
            _HEAD + "dist.init_process_group('nccl')\nstate = torch.load('m.pt')\n",
            None, fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        ddp = reading(ctx)
        if not ddp.distributed:
            return
        for call, _, _ in ctx.facts.loads_without_map_location:
            if id(call) in ctx.facts.host_loads:
                yield self.hit(call, Fix([Replace(call, keyword_added("map_location", '"cpu"'))]))
                continue
            device = rank_device(ddp, call)
            fix = None
            if device is not None:
                fix = Fix([Replace(call, keyword_added("map_location", cst.Name(device)))],
                          description=f"add `map_location={device}`")
            yield self.hit(call, fix)


def rank_device(ddp: DdpReading, at: cst.CSTNode) -> Optional[str]:
    """A name bound to the rank's device, that ``at`` sees: the last such binding before it in its
    function, else at module level."""
    function = ddp.function_of(at)
    found: Optional[tuple[bool, str, cst.CSTNode]] = None
    for name, bound in ddp.bindings.items():
        if "." in name:
            continue
        for value, stmt in bound:
            where = ddp.function_of(stmt)
            if where is not function and where is not None:
                continue
            if where is function and not ddp.before(stmt, at):
                continue
            if not _is_rank_device(ddp, value):
                continue
            # the name must still hold it at the call: its last binding seen from there
            last = ddp.last_binding(name, at)
            if last is None or last[1] is not stmt or ddp.conditional_between(stmt, at):
                continue
            key = (where is function, ddp.before(found[2], stmt) if found is not None else True)
            if found is None or key[0] > found[0] or (key[0] == found[0] and key[1]):
                found = (where is function, name, stmt)
    return found[1] if found is not None else None


def _is_rank_device(ddp: DdpReading, value: cst.BaseExpression) -> bool:
    """``torch.device(f"cuda:{local_rank}")``, ``torch.device("cuda", rank)``, ``f"cuda:{rank}"``,
    ``"cuda:%d" % rank``, ``"cuda:{}".format(rank)``, or one of them ``if torch.cuda.is_available() else``
    the CPU."""
    if not mentions_rank(value):
        return False
    if type(value) is cst.IfExp:  # torch.device("cuda", local_rank) if torch.cuda.is_available() else ...
        return _is_rank_device(ddp, value.body) or _is_rank_device(ddp, value.orelse)
    if type(value) is cst.Call and ddp.resolve(value.func) == "torch.device":
        return True
    texts = [node.value for node in walk(value) if isinstance(node, (cst.SimpleString, cst.FormattedStringText))]
    return any("cuda" in text for text in texts) and type(value) in (cst.FormattedString, cst.BinaryOperation, cst.Call)
