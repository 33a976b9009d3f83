"""CG105 plain-tensor-attribute."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis.facts import Kind
from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import BINDING, DEVICE_MISMATCH, RuntimeRepair, RuntimeSide, Symptom


class PlainTensorAttribute(Rule):
    """A tensor kept on a module as a plain attribute.

    What it finds: ``self.name = torch.<factory>(...)`` in a module's ``__init__``
    that is neither an ``nn.Parameter`` nor a registered buffer, and is used with
    the module's inputs.

    Why it breaks on the GPU: ``model.to(device)`` moves parameters and buffers
    only; the attribute stays on the CPU and the first forward pass fails with
    "Expected all tensors to be on the same device". It is also missing from
    ``state_dict()``.

    Example::

        self.scale = torch.ones(4)                                        # before
        self.register_buffer("scale", torch.ones(4), persistent=False)    # after

    The fix is unsafe: ``persistent=False`` keeps the state dict as it was, but code
    that reassigns the attribute to a non-tensor now fails.
    """

    code = "CG105"
    name = "plain-tensor-attribute"
    message = "`self.{attr}` is a plain tensor attribute: `.to(device)` leaves it on the CPU"
    fix_safety = "unsafe"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "attribute", "a device mismatch where a CPU tensor on the failing line is a plain attribute of a module "
            "(neither a parameter nor a buffer)",
            "{name} is a plain tensor attribute of {owner}, so .to(device) did not move it; it stayed on the CPU at "
            "{at} (register it with self.register_buffer)", DEVICE_MISMATCH),),
        repair=RuntimeRepair(BINDING),
    )
    VALID = [
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.register_buffer('scale', torch.ones(4))\n    def forward(self, x):\n        return x * self.scale\n",
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.w = nn.Parameter(torch.ones(4))\n    def forward(self, x):\n        return x * self.w\n",
    ]
    INVALID = [
        Invalid(  # made by a method that __init__ calls before any layer exists: kept on self, it is a buffer
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.table = self.one_hot(n)\n        self.fc = nn.Linear(n, 1)\n"
            "    def one_hot(self, n):\n        return torch.eye(n)\n"
            "    def forward(self, i):\n        return self.fc(self.table[i])\n",
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.register_buffer(\"table\", self.one_hot(n), persistent=False)\n        self.fc = nn.Linear(n, 1)\n"
            "    def one_hot(self, n):\n        return torch.eye(n)\n"
            "    def forward(self, i):\n        return self.fc(self.table[i])\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.scale = torch.ones(4)\n    def forward(self, x):\n        return x * self.scale\n",
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.register_buffer(\"scale\", torch.ones(4), persistent=False)\n    def forward(self, x):\n"
            "        return x * self.scale\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for value in facts.values:
            if value.kind is not Kind.TENSOR or value.context != "module-attribute" or value.explicit is not None:
                continue
            if not facts.is_bound(value) or value.attribute_binding is None:
                continue
            attr, stmt = value.attribute_binding
            fix = self._fix(stmt, attr)
            node = value.node
            if value.method is not None and value.method.name.value != "__init__":
                # self.table = self.one_hot_table(): pointed at where __init__ keeps it, not inside the helper
                assign = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
                node = assign.value if isinstance(assign, cst.Assign) else node
            yield self.hit(node, fix, self.message.format(attr=attr))

    @staticmethod
    def _fix(stmt, attr: str):
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return None
        assign = stmt.body[0]
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return None
        target = assign.targets[0].target
        if not isinstance(target, cst.Attribute):
            return None
        owner = target.value

        def build(node: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(node, cst.Assign)
            call = cst.Call(
                func=cst.Attribute(value=owner, attr=cst.Name("register_buffer")),
                args=[
                    cst.Arg(cst.SimpleString(f'"{attr}"')),
                    cst.Arg(node.value),
                    cst.Arg(cst.Name("False"), keyword=cst.Name("persistent"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))),
                ],
            )
            return cst.Expr(call, semicolon=node.semicolon)

        return Fix([Replace(assign, build)])
