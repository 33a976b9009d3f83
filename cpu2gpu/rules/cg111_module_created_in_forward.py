"""CG111 module-created-in-forward."""

from __future__ import annotations

import re
from typing import Iterator, Optional

import libcst as cst

from ..analysis import classdefs
from ..analysis.facts import Facts, Kind
from ..rewrite.fixes import Fix, InsertAfter, Replace
from .base import Hit, Invalid, Rule, RuleContext, parsed
from .runtimeside import DEVICE_MISMATCH, RULE_FIX, RuntimeRepair, RuntimeSide, Symptom

_CONSTANTS = (cst.Integer, cst.Float, cst.SimpleString)


class ModuleCreatedInForward(Rule):
    """A layer built inside ``forward`` (or a method ``forward`` calls).

    What it finds: ``nn.BatchNorm2d(c)(x)`` or ``layer = nn.Linear(4, 2)`` in a method
    that runs on every step, for layers that hold weights.

    Why it breaks on the GPU: the layer is made anew on every call, with fresh
    weights on the CPU: on the GPU the call fails ("Input type
    (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the
    same"); on the CPU it runs but its weights are random each step and never
    trained, since the optimizer never saw them. The fix (unsafe: it adds trained
    weights) builds the layer once in ``__init__`` and calls that.

    Example::

        def forward(self, x):
            return nn.BatchNorm1d(16)(x)      # before

        def __init__(self):
            ...
            self.batchnorm1d = nn.BatchNorm1d(16)
        def forward(self, x):
            return self.batchnorm1d(x)       # after
    """

    code = "CG111"
    name = "module-created-in-forward"
    fix_safety = "unsafe"
    message = "`{layer}` is built on every call of `{method}()`: fresh CPU weights each step, never trained; " \
              "build it once in `__init__`"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "built-in-method", "a device mismatch where a layer with CPU weights (on the failing line while a device "
            "tensor is there, or the layer whose forward raised) is no submodule of the module whose method runs",
            "{layer} is built inside {owner}.{func}() at {at}, with new CPU weights on every call; build it once in "
            "__init__", DEVICE_MISMATCH),),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(4, 2)\n    def forward(self, x):\n        return nn.ReLU()(self.fc(x))\n",
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.blocks = self._make(3)\n    def _make(self, n):\n        return nn.Sequential(*[nn.Linear(4, 4) for _ in range(n)])\n"
        "    def forward(self, x):\n        return self.blocks(x)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = nn.Linear(4, 16)\n    def forward(self, x):\n        return nn.BatchNorm1d(16)(self.fc(x))\n",
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = nn.Linear(4, 16)\n        self.batchnorm1d = nn.BatchNorm1d(16)\n"
            "    def forward(self, x):\n        return self.batchnorm1d(self.fc(x))\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.width = 8\n    def forward(self, x):\n        head = nn.Linear(self.width, 2)\n        return head(x)\n",
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.width = 8\n        self.head = nn.Linear(self.width, 2)\n    def forward(self, x):\n"
            "        head = self.head\n        return head(x)\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "    def forward(self, x):\n        return nn.Linear(x.size(-1), 2)(x)\n",
            fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        # The analysis marks modules built in a module's methods; only their classes are read here.
        built: dict[int, list] = {}
        for value in facts.values:
            if value.kind is Kind.MODULE and value.context == "module-method" and value.method is not None \
                    and value.stateful:  # GramMatrix()(x): a module with only a forward() holds nothing
                built.setdefault(id(value.method), []).append(value.node)
        if not built:
            return
        for classdef in facts.module_class_defs.values():
            if any(id(s) in built for s in classdef.body.body):
                yield from self._class(facts, classdef, built)

    def _class(self, facts: Facts, classdef: cst.ClassDef, built: dict) -> Iterator[Hit]:
        init = classdefs.method(classdef, "__init__")
        init_self = classdefs.self_name(init) if init is not None else None
        taken: Optional[set[str]] = None
        for function in _per_step_methods(classdef):
            nodes = built.get(id(function))
            if not nodes:
                continue
            me = classdefs.self_name(function)
            lazy = set()  # if self.fc is None: self.fc = nn.Linear(...): built once, on purpose
            named: dict[int, str] = {}
            for _, small in classdefs.simple_statements(function.body):
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target = small.targets[0].target
                    if classdefs.self_attribute(target, me) is not None:
                        lazy.add(id(small.value))
                    elif isinstance(target, cst.Name):
                        named[id(small.value)] = target.value
            for node in nodes:
                layer = classdefs.module_built(facts, node, stateful_only=True)
                if layer is None or id(node) in lazy:
                    continue
                message = self.message.format(layer=_short(node), method=function.name.value)
                fix = None
                if init is not None and init_self == me and _hoistable(node, me):
                    taken = taken if taken is not None else _attributes(classdef)
                    attribute = _free_name(named.get(id(node)) or layer.lower(), taken)
                    taken.add(attribute)
                    code = cst.Module([]).code_for_node(node)
                    fix = Fix([
                        Replace(node, parsed(f"{me}.{attribute}")),
                        InsertAfter(init.body.body[-1], f"{me}.{attribute} = {code}"),
                    ])
                else:
                    message += " (its arguments are computed in the call, so it cannot be moved as is)"
                yield self.hit(node, fix, message)


def _per_step_methods(classdef: cst.ClassDef) -> list[cst.FunctionDef]:
    """``forward`` and the methods it calls through ``self``, not those ``__init__`` calls."""
    by_name = {f.name.value: f for f in classdefs.methods(classdef)}
    at_init = _self_calls(by_name["__init__"]) if "__init__" in by_name else set()
    todo, seen = ["forward"], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name or name == "__init__" or name in at_init:
            continue
        seen.add(name)
        todo.extend(_self_calls(by_name[name]))
    return [by_name[n] for n in by_name if n in seen]


def _self_calls(function: cst.FunctionDef) -> set[str]:
    me = classdefs.self_name(function)
    return {name for node in _calls(function.body) if (name := classdefs.self_attribute(node.func, me))}


def _calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call):
            yield current
        if not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) or current is node:
            stack.extend(reversed(list(classdefs.child_nodes(current))))


def _hoistable(call: cst.Call, me: Optional[str]) -> bool:
    """Arguments that mean the same in ``__init__``: constants and ``self.x``."""
    return all(_constant(arg.value, me) for arg in call.args if not arg.star)


def _constant(node: cst.BaseExpression, me: Optional[str]) -> bool:
    if isinstance(node, _CONSTANTS) or (isinstance(node, cst.Name) and node.value in ("True", "False", "None")):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _constant(node.expression, me)
    if isinstance(node, cst.Tuple):
        return all(_constant(e.value, me) for e in node.elements)
    return classdefs.self_attribute(node, me) is not None


def _attributes(classdef: cst.ClassDef) -> set[str]:
    names = {f.name.value for f in classdefs.methods(classdef)}
    for function in classdefs.methods(classdef):
        me = classdefs.self_name(function)
        names.update(n for node in classdefs.walk(function.body) if (n := classdefs.self_attribute(node, me)))
    return names


def _free_name(base: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", base) or "layer"
    name, index = base, 1
    while name in taken:
        name, index = f"{base}_{index}", index + 1
    return name


def _short(node: cst.CSTNode) -> str:
    code = cst.Module([]).code_for_node(node)
    return code if len(code) <= 40 else code[:37] + "..."
