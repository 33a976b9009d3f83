"""CG402 save-on-every-rank."""

from __future__ import annotations

from typing import Iterator

from ..analysis.ddpcode import mentions_rank, reading
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RuntimeSide

_HEAD = ("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
         "dist.init_process_group('nccl')\nmodel = DDP(net)\n")


class SaveOnEveryRank(Rule):
    """``torch.save`` that every rank of a distributed run executes.

    What it finds: in a distributed script, a ``torch.save(...)`` that no rank-0 test guards. A
    guard is read on the side of silence: an ``if`` (or its ``else``) whose test mentions a rank
    (``rank == 0``, ``dist.get_rank() == 0``, ``local_rank in (-1, 0)``, ``not rank``,
    ``int(os.environ["RANK"]) == 0``), the main or master process (``is_main_process()``,
    ``args.is_master``) or whether the run is distributed; an early ``return`` under such a test; a
    decorator such as ``@rank_zero_only``; a function whose every call (or hand-off, as in
    ``mp.spawn(worker, ...)``) in the file is guarded, or that the file never calls. A save whose
    arguments mention the rank (``f"ckpt_rank{rank}.pt"``) writes a file per rank and is left alone.

    Why it breaks: every process runs the script, so every rank writes the same checkpoint at the
    same time. The writes race: the file can come out truncated or mixed, or fail on a network
    file system, and N ranks do N times the I/O for one checkpoint.

    There is no automatic fix: the right guard is the script's own rank variable, the process group
    may not exist when the script also runs undistributed (``dist.get_rank()`` raises then), and a
    rank that reads the file afterwards needs a ``dist.barrier()`` after the save, which the rule
    cannot place for you.

    Example::

        torch.save(model.module.state_dict(), "ckpt.pt")        # before: every rank writes
        if dist.get_rank() == 0:                                 # after
            torch.save(model.module.state_dict(), "ckpt.pt")
        dist.barrier()
    """

    code = "CG402"
    name = "save-on-every-rank"
    message = ("`torch.save` runs on every rank: all processes write the same file at once; "
               "save on rank 0 only (`if dist.get_rank() == 0:`)")
    fix_safety = None
    runtime = RuntimeSide(
        unseen="the ranks' writes race only now and then, and no run's diagnosis names them",
        unrepaired="the rule has no fix (the guard is the script's own rank variable)",
    )
    VALID = [
        _HEAD + "if dist.get_rank() == 0:\n    torch.save(model.module.state_dict(), 'm.pt')\n",
        _HEAD + "def save(path):\n    if not is_main_process():\n        return\n"
        "    torch.save(model.module.state_dict(), path)\nsave('m.pt')\n",
        _HEAD + "def save_checkpoint(state):\n    torch.save(state, 'm.pt')\n"
        "if args.local_rank in (-1, 0):\n    save_checkpoint(model.module.state_dict())\n",
        # a file per rank
        _HEAD + "torch.save(optimizer.state_dict(), f'optim_rank{dist.get_rank()}.pt')\n",
        # not a distributed script
        "import torch\ntorch.save(model.state_dict(), 'm.pt')\n",
    ]
    INVALID = [
        Invalid(_HEAD + "torch.save(model.module.state_dict(), 'm.pt')\n"),
        Invalid(_HEAD + "def save_checkpoint(state):\n    torch.save(state, 'm.pt')\n"
                "for epoch in range(3):\n    save_checkpoint(model.module.state_dict())\n"),
        Invalid("import torch\nimport torch.multiprocessing as mp\n"
                "from torch.nn.parallel import DistributedDataParallel\n"
                "def worker(rank, world_size):\n    torch.distributed.init_process_group('nccl', rank=rank, world_size=world_size)\n"
                "    model = DistributedDataParallel(Net().to(rank), device_ids=[rank])\n"
                "    torch.save(model.module.state_dict(), 'm.pt')\n"
                "mp.spawn(worker, args=(2,), nprocs=2)\n"),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        ddp = reading(ctx)
        if not ddp.distributed:
            return
        for call in ddp.calls:
            if ddp.resolve(call.func) != "torch.save":
                continue
            if any(mentions_rank(arg.value) for arg in call.args[1:]) or ddp.guarded(call):
                continue
            yield self.hit(call)
