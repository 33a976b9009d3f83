"""CG204 unguarded-cuda-call."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext
from .cg206_cuda_call_in_accelerator_script import accelerator_active
from .runtimeside import RuntimeSide


class UnguardedCudaCall(Rule):
    """A ``torch.cuda`` call that needs a GPU, with no check that there is one.

    What it finds: ``torch.cuda.synchronize()``, ``set_device``, ``current_device``,
    ``get_device_name``, the memory statistics, ``manual_seed_all``, events and
    streams, outside an ``if torch.cuda.is_available():`` (or a ``use_cuda`` flag).

    Why it breaks: on the CPU fallback they raise ("Torch not compiled with CUDA
    enabled", "No CUDA GPUs are available"), or, for the seeding calls, silently do
    nothing, so the CPU run is not seeded the way the author thinks.

    Example::

        torch.cuda.synchronize()                 # before
        if torch.cuda.is_available():            # after
            torch.cuda.synchronize()
    """

    code = "CG204"
    name = "unguarded-cuda-call"
    message = "`{call}` needs a GPU; guard it with `torch.cuda.is_available()`"
    runtime = RuntimeSide(
        unseen="the call fails only where there is no GPU, where the diagnosis says the script requires CUDA (CG201)",
        unrepaired="it fails only on the CPU fallback, and migrate repairs what the device run locates; round 0's "
                   "rewrite guards the call",
    )
    VALID = [
        "import torch\nif torch.cuda.is_available():\n    torch.cuda.synchronize()\n",
        "import torch\nif args.cuda:\n    torch.cuda.manual_seed_all(0)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfor step in range(3):\n    # wait for the kernels\n    torch.cuda.synchronize()\n",
            "import torch\nfor step in range(3):\n    # wait for the kernels\n"
            "    if torch.cuda.is_available():\n        torch.cuda.synchronize()\n",
        ),
        Invalid("import torch\nprint(torch.cuda.get_device_name(0))\n", None, fixable=False),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        torch_name = ctx.facts.torch_alias or "torch"
        if not ctx.facts.unguarded_cuda_calls:
            return
        # The accelerator device style (CG206 makes the calls torch.accelerator's): guarded by its check
        accelerator = accelerator_active(ctx)
        for call, stmt in ctx.facts.unguarded_cuda_calls:
            code = cst.Module([]).code_for_node(call.func)
            if accelerator and code.rsplit(".", 1)[-1] in ("manual_seed", "manual_seed_all"):
                continue  # CG206: torch.manual_seed, which needs no GPU
            yield self.hit(call, self._fix(call, stmt, torch_name, accelerator), self._message(code, accelerator))

    def _message(self, code: str, accelerator: bool) -> str:
        message = self.message.format(call=code)
        # the guard the fix writes: the accelerator style's own check
        return message.replace("torch.cuda.is_available()", "torch.accelerator.is_available()") if accelerator else message

    @staticmethod
    def _fix(call: cst.Call, stmt, torch_name: str, accelerator: bool = False):
        # Only a call that is a statement of its own can be wrapped in the check.
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            return None
        small = stmt.body[0]
        if not (isinstance(small, cst.Expr) and small.value is call):
            return None

        def build(node: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(node, cst.SimpleStatementLine)
            test = cst.parse_expression(f"{torch_name}.{'accelerator' if accelerator else 'cuda'}.is_available()")
            inner = node.with_changes(leading_lines=[])
            return cst.If(test=test, body=cst.IndentedBlock(body=[inner]), leading_lines=node.leading_lines)

        return Fix([Replace(stmt, build)])
