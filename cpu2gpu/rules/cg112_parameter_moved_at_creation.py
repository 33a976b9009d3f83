"""CG112 parameter-moved-at-creation."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import torchapi as api
from ..rewrite.fixes import Fix, Replace, add_keyword, chain_to
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RULE_FIX, RuntimeRepair, RuntimeSide, Symptom


class ParameterMovedAtCreation(Rule):
    """``nn.Parameter(t).to(device)`` or ``.cuda()``: the result is no longer a parameter.

    What it finds: a move chained on ``nn.Parameter(...)`` where it is made, in a
    module's ``__init__`` or anywhere else.

    Why it breaks on the GPU: ``.to()`` of a parameter to another device returns a
    plain tensor computed from it, not a leaf and not a ``Parameter``: the module
    does not register it, the optimizer raises "can't optimize a non-leaf Tensor"
    or never trains it, and it is missing from ``state_dict()``. On the CPU the
    move is a no-op that returns the parameter itself, so CPU runs hide the bug.

    Example::

        self.scale = nn.Parameter(torch.ones(1)).to(device)   # before
        self.scale = nn.Parameter(torch.ones(1))              # after: model.to(device) moves it

        w = nn.Parameter(torch.randn(3)).to(device)           # before, outside a module
        w = nn.Parameter(torch.randn(3).to(device))           # after: the data moves, then becomes the parameter
                                                              # (and CG302 makes it torch.randn(3, device=device))
    """

    code = "CG112"
    name = "parameter-moved-at-creation"
    message = "`{call}` is a plain tensor on the GPU, not a parameter: {advice}"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "non-leaf", "the optimizer refuses a tensor that is not a leaf",
            "the optimizer got a tensor that is not a leaf at {at}: nn.Parameter(...).to(device) returns a copy on "
            "the GPU, not the parameter; move the data first", ("can't optimize a non-leaf Tensor",)),),
        records=("event non-leaf-parameter: in a device run, a module holds a tensor computed from a parameter",),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.scale = nn.Parameter(torch.ones(1))\n",
        "import torch\nfrom torch import nn\nw = nn.Parameter(torch.randn(3, device=device))\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch import nn\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.scale = nn.Parameter(torch.ones(1)).to(device)\n    def forward(self, x):\n"
            "        return x * self.scale\nmodel = M().to(device)\n",
            "import torch\nfrom torch import nn\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.scale = nn.Parameter(torch.ones(1))\n    def forward(self, x):\n"
            "        return x * self.scale\nmodel = M().to(device)\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "w = nn.Parameter(torch.randn(3)).to(device)\nopt = torch.optim.SGD([w], lr=0.1)\n",
            "import torch\nfrom torch import nn\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "w = nn.Parameter(torch.randn(3, device=device))\nopt = torch.optim.SGD([w], lr=0.1)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for call, in_module in facts.parameter_moves:
            if in_module:
                fix, advice = Fix([Replace(call, _drop_move)]), "drop the move, the module's `.to(device)` carries it"
            else:
                device, needs_setup = ctx.device_for()
                explicit = [a.value for a in call.args if a.keyword is None or a.keyword.value == "device"]
                target = explicit[0] if call.func.attr.value == "to" and explicit else cst.parse_expression(device)
                parameter = call.func.value
                data = parameter.args[0].value if parameter.args else None
                factory = isinstance(data, cst.Call) and facts.imports is not None \
                    and facts.imports.resolve(data.func) in api.FACTORIES \
                    and not any(a.keyword is not None and a.keyword.value == "device" for a in data.args)
                build = lambda n, t=target, f=factory: _move_data(n, t, f)  # noqa: E731
                fix = Fix([Replace(call, build)], needs_device_setup=needs_setup and not (call.func.attr.value == "to" and explicit))
                advice = "move the data, then make the parameter"
            code = cst.Module([]).code_for_node(call)
            if len(code) > 50:
                code = code[:47] + "..."
            yield self.hit(call, fix, self.message.format(call=code, advice=advice))


def _drop_move(call: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    return call.func.value.with_changes(lpar=call.lpar, rpar=call.rpar)


def _move_data(call: cst.CSTNode, target: cst.BaseExpression, factory: bool) -> cst.CSTNode:
    """``nn.Parameter(t).to(d)`` -> ``nn.Parameter(t.to(d))``; a factory gets ``device=d``."""
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    parameter = call.func.value
    assert isinstance(parameter, cst.Call)
    if not parameter.args:
        return _drop_move(call)
    first = parameter.args[0]
    data = first.value
    moved = add_keyword(data, "device", target) if factory and isinstance(data, cst.Call) else chain_to(data, _code(target))
    return parameter.with_changes(args=[first.with_changes(value=moved), *parameter.args[1:]],
                                  lpar=call.lpar, rpar=call.rpar)


def _code(node: cst.BaseExpression) -> str:
    return cst.Module([]).code_for_node(node)
