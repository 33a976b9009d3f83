"""CG301 loader-without-pin-memory."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis.facts import Kind, Origin
from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext, keyword_added
from .runtimeside import RuntimeSide


class LoaderWithoutPinMemory(Rule):
    """A DataLoader whose batches go to the GPU is built without ``pin_memory``.

    What it finds: ``DataLoader(...)`` with no ``pin_memory=`` whose batches the
    script moves to the device (or will, once migrated).

    Why it is slower on the GPU: copies from pageable memory are staged through a
    pinned buffer and block; with pinned batches the copy is faster and can overlap
    with compute (with ``non_blocking=True``). On the CPU fallback pinning is
    useless, hence ``torch.cuda.is_available()`` rather than ``True``.

    Example::

        loader = DataLoader(ds, batch_size=64)                                          # before
        loader = DataLoader(ds, batch_size=64, pin_memory=torch.cuda.is_available())   # after
    """

    code = "CG301"
    only_for_cpu_scripts_unless_selected = True
    name = "loader-without-pin-memory"
    message = "DataLoader batches go to the GPU: build it with `pin_memory=torch.cuda.is_available()`"
    runtime = RuntimeSide(
        unseen="a performance rule: nothing fails, the copies are only slower",
        unrepaired="nothing fails; round 0's rewrite pins the loader's memory",
    )
    VALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, pin_memory=True)\n"
        "for x in loader:\n    x = x.to(device)\n",
        "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds)\nfor x in loader:\n    print(x)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=8)\n"
            "for x in loader:\n    x = x.to(device)\n",
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "loader = DataLoader(ds, batch_size=8, pin_memory=torch.cuda.is_available())\n"
            "for x in loader:\n    x = x.to(device)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        to_device = {id(v.loader) for v in facts.values
                     if v.kind is Kind.BATCH and v.origin in (Origin.LOOP, Origin.UNPACK, Origin.COMPREHENSION) and facts.is_bound(v) and v.loader}
        torch_name = facts.torch_alias or "torch"
        for loader in facts.loaders:
            if not (loader.moved_batches or id(loader) in to_device):
                continue
            call = loader.node
            if not isinstance(call, cst.Call) or any(
                (a.keyword is not None and a.keyword.value == "pin_memory") or a.star == "**" for a in call.args
            ):
                continue
            value = cst.parse_expression(f"{torch_name}.cuda.is_available()")
            fix = Fix([Replace(call, keyword_added("pin_memory", value))])
            yield self.hit(call.func, fix)
