"""CG302 create-then-move."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..rewrite.fixes import Fix, Replace, add_keyword
from .base import Hit, Invalid, Rule, RuleContext, draws_with_generator
from .runtimeside import RuntimeSide


class CreateThenMove(Rule):
    """A tensor built on the CPU only to be copied to the device.

    What it finds: ``torch.zeros(n).to(device)`` and other factories followed
    directly by ``.to(device)``.

    Why it is slower on the GPU: the tensor is filled in host memory and then
    copied; with ``device=`` it is made on the device at once. On a leaf with
    ``requires_grad=True`` the ``.to`` also makes a non-leaf copy.

    Example::

        noise = torch.randn(64, 100).to(device)        # before
        noise = torch.randn(64, 100, device=device)    # after
    """

    code = "CG302"
    only_for_cpu_scripts_unless_selected = True
    name = "create-then-move"
    message = "`{code}` is made on the CPU and then copied; pass `device=` to the factory"
    runtime = RuntimeSide(
        unseen="a performance rule: nothing fails, the tensor is only made twice",
        unrepaired="nothing fails; round 0's rewrite makes the tensor on the device",
    )
    VALID = [
        "import torch\ng = torch.Generator()\nnoise = torch.randn(4, 100, generator=g).to(device)\n",
        "import torch\nnoise = torch.randn(4, device=device)\n",
        "import torch\nnoise = torch.randn(4).to(torch.float16)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nnoise = torch.randn(4, 100).to(device)\n",
            "import torch\nnoise = torch.randn(4, 100, device=device)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        for move, factory in ctx.facts.create_then_move:
            if draws_with_generator(factory):
                continue  # a CPU generator draws on the CPU only (CG113): the move is needed
            target = move.args[0].value

            def build(node: cst.CSTNode, target=target) -> cst.CSTNode:
                assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                inner = node.func.value
                assert isinstance(inner, cst.Call)
                return add_keyword(inner, "device", target).with_changes(lpar=node.lpar, rpar=node.rpar)

            code = cst.Module([]).code_for_node(move)
            yield self.hit(move, Fix([Replace(move, build)]), self.message.format(code=code if len(code) < 50 else code[:47] + "..."))
