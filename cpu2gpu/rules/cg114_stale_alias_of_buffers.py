"""CG114 stale-alias-of-buffers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional

import libcst as cst

from ..analysis import classdefs
from ..analysis import torchapi as api
from ..analysis.facts import Facts
from ..rewrite.fixes import Fix, replaced_by
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import DEVICE_MISMATCH, REGISTERED_NAMES, RULE_FIX, RuntimeRepair, RuntimeSide, Symptom

_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "sort",
                       "reverse"})


@dataclass(eq=False)
class _Alias:
    attribute: str
    value: cst.BaseExpression  # the list / tuple / dict of self.<buffer> in __init__
    members: dict  # index or key -> the element expression
    registered: list[str]
    uses: list[cst.CSTNode] = field(default_factory=list)  # where it is read outside __init__
    replacements: list[tuple[cst.CSTNode, cst.BaseExpression]] = field(default_factory=list)
    mutated: bool = False


class StaleAliasOfBuffers(Rule):
    """A Python list or dict on ``self`` that holds the module's own buffers or parameters.

    What it finds: ``self.scales = [self.scale_0, self.scale_1]`` in ``__init__``,
    where those are registered buffers or parameters, read in another method.

    Why it breaks on the GPU: ``model.to(device)`` replaces each buffer (and the
    data of each parameter) by a copy on the device; the attributes are updated,
    the list is not, and keeps the old CPU tensors: "Expected all tensors to be on
    the same device" in ``forward``, or a stale value after ``load_state_dict``.
    The fix reads the buffers through their attributes at the use, where the
    container is never changed.

    Example::

        return x * self.scales[0]      # before
        return x * self.scale_0        # after
    """

    code = "CG114"
    name = "stale-alias-of-buffers"
    message = "`self.{attribute}` keeps the module's {what} {names} in a plain {kind}: `.to(device)` replaces them " \
              "and it keeps the old CPU tensors"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "stale-copy", "a device mismatch where a CPU tensor on the failing line is held in a plain list, tuple "
            "or dict attribute of the module and is none of its buffers now (.to() replaced them)",
            "{name} is an old CPU copy of a buffer or parameter kept in the plain {container_type} self.{container}: "
            ".to(device) replaced the buffer, not the copy, at {at}; read the buffer through its attribute",
            DEVICE_MISMATCH),),
        repair=RuntimeRepair(RULE_FIX, prepare=REGISTERED_NAMES),
    )
    VALID = [
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.register_buffer('a', torch.ones(1))\n        self.names = ['a']\n"
        "    def forward(self, x):\n        return x * getattr(self, self.names[0])\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.register_buffer('s0', torch.ones(1))\n        self.register_buffer('s1', torch.ones(1))\n"
            "        self.scales = [self.s0, self.s1]\n    def forward(self, x):\n"
            "        return x * self.scales[0] + sum(s.sum() for s in self.scales)\n",
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.register_buffer('s0', torch.ones(1))\n        self.register_buffer('s1', torch.ones(1))\n"
            "        self.scales = [self.s0, self.s1]\n    def forward(self, x):\n"
            "        return x * self.s0 + sum(s.sum() for s in [self.s0, self.s1])\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.w = nn.Parameter(torch.ones(2))\n        self.group = {'w': self.w}\n"
            "    def forward(self, x):\n        self.group['extra'] = x\n        return x * self.group['w']\n",
            fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        for classdef in ctx.facts.module_class_defs.values():
            for alias in _aliases(ctx.facts, classdef):
                if not alias.uses:
                    continue
                names = ", ".join(f"`self.{n}`" for n in alias.registered)
                kind = "dict" if isinstance(alias.value, cst.Dict) else "list"
                message = self.message.format(attribute=alias.attribute, what="tensors", names=names, kind=kind)
                fix = None
                if alias.mutated:
                    message += " (it is changed after `__init__`, so the fix is yours: look the tensors up by name)"
                else:
                    fix = Fix([replaced_by(node, new) for node, new in alias.replacements])
                yield self.hit(alias.value, fix, message)


def _registered(facts: Facts, init: cst.FunctionDef, me: Optional[str]) -> set[str]:
    """Names of the buffers and parameters ``__init__`` registers."""
    names: set[str] = set()
    for _, small in classdefs.simple_statements(init.body):
        value = getattr(small, "value", None)
        if isinstance(small, cst.Expr) and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                and value.func.attr.value in ("register_buffer", "register_parameter") \
                and classdefs.self_attribute(value.func, me) is not None and value.args \
                and isinstance(value.args[0].value, cst.SimpleString):
            name = value.args[0].value.evaluated_value
            if isinstance(name, str):  # (a b"..." name is no attribute's: torch takes only a str)
                names.add(name)
        elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(value, cst.Call):
            attribute = classdefs.self_attribute(small.targets[0].target, me)
            qual = classdefs.qualified(facts, value.func)
            if attribute is not None and qual in api.PARAMETER_CLASSES:
                names.add(attribute)
    return names


def _aliases(facts: Facts, classdef: cst.ClassDef) -> list[_Alias]:
    init = classdefs.method(classdef, "__init__")
    if init is None:
        return []
    me = classdefs.self_name(init)
    registered = _registered(facts, init, me)
    aliases: dict[str, _Alias] = {}
    for _, small in classdefs.simple_statements(init.body):
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            continue
        attribute = classdefs.self_attribute(small.targets[0].target, me)
        members = _members(small.value, me)
        if attribute is None or members is None:
            continue
        held = [classdefs.self_attribute(e, me) for e in members.values()]
        if any(h in registered for h in held):
            aliases[attribute] = _Alias(attribute, small.value, members, [h for h in held if h in registered])
    if not aliases:
        return []
    for function in classdefs.methods(classdef):
        if function is init:
            continue
        _find_uses(function, aliases)
    return list(aliases.values())


def _members(value: cst.BaseExpression, me: Optional[str]) -> Optional[dict]:
    """index/key -> element for a literal list, tuple or dict of ``self.x`` attributes."""
    if isinstance(value, (cst.List, cst.Tuple)):
        elements = [e.value for e in value.elements]
        if elements and all(classdefs.self_attribute(e, me) for e in elements):
            return dict(enumerate(elements))
    if isinstance(value, cst.Dict):
        members = {}
        for element in value.elements:
            if not (isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)
                    and classdefs.self_attribute(element.value, me)):
                return None
            members[element.key.evaluated_value] = element.value
        return members or None
    return None


def _find_uses(function: cst.FunctionDef, aliases: dict[str, _Alias]) -> None:
    me = classdefs.self_name(function)
    handled: set[int] = set()
    stack: list[tuple[cst.CSTNode, Optional[cst.CSTNode]]] = [(function.body, None)]
    nodes: list[tuple[cst.CSTNode, Optional[cst.CSTNode]]] = []
    while stack:
        node, parent = stack.pop()
        nodes.append((node, parent))
        stack.extend((child, node) for child in classdefs.child_nodes(node))
    parents = {id(n): p for n, p in nodes}
    for node, parent in nodes:
        name = classdefs.self_attribute(node, me)
        alias = aliases.get(name) if name is not None else None
        if alias is None or id(node) in handled:
            continue
        alias.uses.append(node)
        grand = parents.get(id(parent)) if parent is not None else None
        if isinstance(parent, cst.Attribute) and parent.attr.value in _MUTATORS:
            alias.mutated = True
        elif isinstance(parent, cst.Subscript) and parent.value is node:
            if isinstance(grand, (cst.AssignTarget, cst.Del)) or (isinstance(grand, cst.AugAssign) and grand.target is parent):
                alias.mutated = True
                continue
            key = _literal_key(parent)
            if key in alias.members:
                alias.replacements.append((parent, alias.members[key]))
                continue
            alias.replacements.append((node, _literal(alias.value)))
        elif isinstance(parent, cst.AssignTarget) or (isinstance(parent, cst.AugAssign) and parent.target is node):
            alias.mutated = True
        else:
            alias.replacements.append((node, _literal(alias.value)))


def _literal_key(subscript: cst.Subscript) -> object:
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    index = subscript.slice[0].slice.value
    if isinstance(index, cst.Integer):
        return int(index.value)
    if isinstance(index, cst.SimpleString):
        return index.evaluated_value
    return None


def _literal(value: cst.BaseExpression) -> cst.BaseExpression:
    """The container written out again at the use: built from the current attributes each time."""
    if isinstance(value, cst.Tuple) and not value.lpar:
        return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return value
