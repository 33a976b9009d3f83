"""CG109 module-in-plain-container."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import libcst as cst

from ..analysis import classdefs
from ..analysis.facts import Facts
from ..rewrite.fixes import Fix, Replace
from .base import Build, Hit, Invalid, Rule, RuleContext
from .runtimeside import DEVICE_MISMATCH, RULE_FIX, RuntimeRepair, RuntimeSide, Symptom


@dataclass(eq=False)
class _Container:
    attribute: str
    value: cst.BaseExpression  # the list / dict expression assigned to self.<attribute>
    kind: str  # "list" or "dict"
    holds_modules: bool
    fixable: bool = True


class ModuleInPlainContainer(Rule):
    """Layers kept in a plain list, tuple or dict on ``self``.

    What it finds: in an ``nn.Module`` subclass, ``self.layers = [...]`` (a literal, a
    comprehension, or an empty list filled with ``.append(nn.Linear(...))``) or
    ``self.heads = {name: nn.Linear(...)}`` holding modules.

    Why it breaks on the GPU: a module registers the submodules it holds as
    attributes, ``nn.ModuleList`` and ``nn.ModuleDict``, not those inside Python
    containers. ``model.to(device)`` leaves them on the CPU ("Input type
    (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the
    same"), ``model.parameters()`` does not give them to the optimizer, and
    ``state_dict()`` does not save them. The fix is unsafe because it changes what
    trains and what is saved: the optimizer then trains those layers.

    Example::

        self.blocks = [nn.Linear(8, 8) for _ in range(3)]                 # before
        self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])  # after
    """

    code = "CG109"
    name = "module-in-plain-container"
    fix_safety = "unsafe"
    message = "`self.{attribute}` keeps layers in a plain {kind}: `.to(device)`, `parameters()` and " \
              "`state_dict()` never see them; use `nn.{container}`"
    runtime = RuntimeSide(
        symptoms=(
            Symptom("on-line", "a device mismatch where a module with CPU weights on the failing line is held in "
                      "a plain list, tuple or dict attribute of the module whose method runs there",
                      "{name} ({type}) is kept in the plain {container_type} self.{container}, so .to(device) did "
                      "not move it; it stayed on the CPU at {at} (use nn.ModuleList / nn.ModuleDict)",
                      DEVICE_MISMATCH),
            Symptom("failing-layer", "a device mismatch raised in the forward of a layer with CPU weights, held in "
                      "a plain list, tuple or dict attribute of the module that called it",
                      "{type} is kept in the plain {container_type} self.{container} of {owner}, so .to(device) did "
                      "not move it; it stayed on the CPU at {at} (use nn.ModuleList / nn.ModuleDict)",
                      DEVICE_MISMATCH),
        ),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        # each layer of the list is also registered under a name of its own
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.layers = []\n        for i in range(3):\n            layer = nn.Linear(2, 2)\n"
        "            setattr(self, f'fc{i}', layer)\n            self.layers.append(layer)\n",
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])\n        self.sizes = [2, 2, 2]\n",
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        layers = [nn.Linear(2, 2), nn.ReLU()]\n        self.net = nn.Sequential(*layers)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.blocks = [nn.Linear(2, 2) for _ in range(3)]\n    def forward(self, x):\n"
            "        for block in self.blocks:\n            x = block(x)\n        return x\n",
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])\n    def forward(self, x):\n"
            "        for block in self.blocks:\n            x = block(x)\n        return x\n",
        ),
        Invalid(
            "import torch\nimport torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.convs = []\n        for i in range(n):\n            self.convs.append(nn.Conv1d(4, 4, 3))\n",
            "import torch\nimport torch.nn as nn\nclass M(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
            "        self.convs = nn.ModuleList()\n        for i in range(n):\n            self.convs.append(nn.Conv1d(4, 4, 3))\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.heads = {'a': nn.Linear(4, 1), 'b': nn.Linear(4, 2)}\n",
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.heads = nn.ModuleDict({'a': nn.Linear(4, 1), 'b': nn.Linear(4, 2)})\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.heads = {i: nn.Linear(4, 1) for i in range(3)}\n",
            fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        prefix = classdefs.nn_prefix(facts)
        for classdef in facts.module_class_defs.values():
            for container in _containers(facts, classdef):
                if not container.holds_modules:
                    continue
                wrapper = "ModuleList" if container.kind == "list" else "ModuleDict"
                message = self.message.format(attribute=container.attribute, kind=container.kind, container=wrapper)
                fix = None
                if container.fixable and prefix is not None:
                    fix = Fix([Replace(container.value, _wrapped_in(f"{prefix}.{wrapper}"))])
                elif container.fixable is False:
                    message += " (its keys are numbers; ModuleDict needs strings)"
                yield self.hit(container.value, fix, message)


def _containers(facts: Facts, classdef: cst.ClassDef) -> list[_Container]:
    """Python containers assigned to ``self.x`` in the class, and whether they hold modules."""
    found: dict[str, _Container] = {}
    starred: set[str] = set()  # nn.Sequential(*self.layers): registered there, the list is only an alias
    for function in classdefs.methods(classdef):
        me = classdefs.self_name(function)
        local_modules: set[str] = set()
        local_lists: dict[str, bool] = {}  # layers = [] ... layers.append(nn.Linear(...))
        for _, small in classdefs.simple_statements(function.body):
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target, value = small.targets[0].target, small.value
                holds = _holds_modules(facts, value, local_modules)
                attribute = classdefs.self_attribute(target, me)
                if attribute is not None:
                    if isinstance(value, cst.Name) and value.value in local_lists:
                        if local_lists[value.value]:
                            found[attribute] = _Container(attribute, value, "list", True)
                        continue
                    kind = _kind(value)
                    if kind is not None:
                        fixable = not (kind == "dict" and not _string_keys(value))
                        found[attribute] = _Container(attribute, value, kind, holds, fixable)
                    elif attribute in found:
                        del found[attribute]  # rebound to something else
                elif isinstance(target, cst.Name):
                    if classdefs.module_built(facts, value, stateful_only=True) is not None:
                        local_modules.add(target.value)
                    if _kind(value) == "list":
                        local_lists[target.value] = holds
                elif isinstance(target, cst.Subscript):
                    attribute = classdefs.self_attribute(target.value, me)
                    if attribute in found and _is_module(facts, value, local_modules):
                        found[attribute].holds_modules = True
            elif isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
                attribute = classdefs.self_attribute(small.target, me)
                if attribute in found and _holds_modules(facts, small.value, local_modules):
                    found[attribute].holds_modules = True
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                call = small.value
                if isinstance(call.func, cst.Attribute) and call.func.attr.value in ("append", "extend", "insert"):
                    args = [a.value for a in call.args]
                    added = args[-1:] if call.func.attr.value != "extend" else args[:1]
                    holds = any(_is_module(facts, a, local_modules) if call.func.attr.value != "extend"
                                else _holds_modules(facts, a, local_modules) for a in added)
                    attribute = classdefs.self_attribute(call.func.value, me)
                    if attribute in found and holds:
                        found[attribute].holds_modules = True
                    elif isinstance(call.func.value, cst.Name) and call.func.value.value in local_lists and holds:
                        local_lists[call.func.value.value] = True
    if not any(c.holds_modules for c in found.values()):
        return []
    # Read the whole class only now (rarely): nn.Sequential(*self.layers) registers them there, and
    # setattr(self, name, layer) / self.add_module(name, layer) registers each layer the list keeps.
    for function in classdefs.methods(classdef):
        me = classdefs.self_name(function)
        for node in classdefs.walk(function.body):
            if (isinstance(node, cst.Arg) and node.star == "*") or isinstance(node, cst.StarredElement):
                name = classdefs.self_attribute(node.value, me)
                if name is not None:
                    starred.add(name)
            elif isinstance(node, cst.Call) and _registers_on(node, me):
                return []
    return [c for name, c in found.items() if name not in starred]


def _registers_on(call: cst.Call, me: Optional[str]) -> bool:
    """``setattr(self, name, layer)`` or ``self.add_module(name, layer)`` with a computed name."""
    func = call.func
    if isinstance(func, cst.Name) and func.value == "setattr" and len(call.args) == 3:
        target = call.args[0].value
        return isinstance(target, cst.Name) and target.value == me and not isinstance(call.args[1].value, cst.SimpleString)
    if isinstance(func, cst.Attribute) and func.attr.value in ("add_module", "register_module") \
            and isinstance(func.value, cst.Name) and func.value.value == me and call.args:
        return not isinstance(call.args[0].value, cst.SimpleString)
    return False


def _kind(value: cst.BaseExpression) -> Optional[str]:
    if isinstance(value, (cst.List, cst.Tuple, cst.ListComp)):
        return "list"
    if isinstance(value, (cst.Dict, cst.DictComp)):
        return "dict"
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and not value.args:
        return {"list": "list", "dict": "dict"}.get(value.func.value)
    return None


def _is_module(facts: Facts, node: cst.BaseExpression, local_modules: set[str]) -> bool:
    if isinstance(node, cst.Name):
        return node.value in local_modules
    return classdefs.module_built(facts, node, stateful_only=True) is not None  # nn.ReLU() in a list is harmless


def _holds_modules(facts: Facts, value: cst.BaseExpression, local_modules: set[str]) -> bool:
    if isinstance(value, (cst.List, cst.Tuple)):
        return any(_is_module(facts, e.value, local_modules) for e in value.elements)
    if isinstance(value, (cst.ListComp, cst.GeneratorExp)):
        return _is_module(facts, value.elt, local_modules)
    if isinstance(value, cst.Dict):
        return any(isinstance(e, cst.DictElement) and _is_module(facts, e.value, local_modules) for e in value.elements)
    if isinstance(value, cst.DictComp):
        return _is_module(facts, value.value, local_modules)
    return False


def _string_keys(value: cst.BaseExpression) -> bool:
    """ModuleDict takes string keys only: fix a dict only where its keys are known strings."""
    if isinstance(value, cst.Dict):
        return all(isinstance(e, cst.DictElement) and isinstance(e.key, (cst.SimpleString, cst.FormattedString,
                                                                        cst.ConcatenatedString))
                   for e in value.elements)
    if isinstance(value, cst.DictComp):
        key = value.key
        if isinstance(key, (cst.SimpleString, cst.FormattedString)) or (
                isinstance(key, cst.Call) and isinstance(key.func, cst.Name) and key.func.value == "str"):
            return True
        # {name: nn.Linear(...) for name, n in tasks.items()}: names are strings, except the
        # counters of range() and enumerate().
        return isinstance(key, cst.Name) and key.value not in _counters(value.for_in)
    return True  # dict(): filled later with self.x[key] = ...; keys unknown, as with any ModuleDict


def _counters(clause: Optional[cst.CompFor]) -> set[str]:
    names: set[str] = set()
    while clause is not None:
        source = clause.iter
        if isinstance(source, cst.Call) and isinstance(source.func, cst.Name):
            target = clause.target
            if source.func.value == "range" and isinstance(target, cst.Name):
                names.add(target.value)
            elif source.func.value == "enumerate" and isinstance(target, cst.Tuple) and target.elements \
                    and isinstance(target.elements[0].value, cst.Name):
                names.add(target.elements[0].value.value)
        clause = clause.inner_for_in
    return names



def _wrapped_in(wrapper: str) -> Build:
    return lambda node: _wrap(node, wrapper)


def _wrap(node: cst.CSTNode, wrapper: str) -> cst.CSTNode:
    """``[a, b]`` -> ``nn.ModuleList([a, b])``; ``[]`` / ``list()`` -> ``nn.ModuleList()``."""
    assert isinstance(node, cst.BaseExpression)
    empty = (isinstance(node, (cst.List, cst.Dict)) and not node.elements) or isinstance(node, cst.Call)
    if isinstance(node, cst.Tuple) and not node.lpar:
        node = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    args = [] if empty else [cst.Arg(node.with_changes(lpar=[], rpar=[]) if not isinstance(node, cst.Tuple) else node)]
    return cst.Call(func=cst.parse_expression(wrapper), args=args, lpar=[] if isinstance(node, cst.Tuple) else node.lpar,
                    rpar=[] if isinstance(node, cst.Tuple) else node.rpar)
