"""Resolve the names a file uses to the qualified torch names they stand for."""

from __future__ import annotations

from typing import Optional, cast

import libcst as cst


def dotted(node: cst.BaseExpression) -> Optional[str]:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts: list[str] = []
    while type(node) is cst.Attribute:  # exact types: isinstance on libcst's classes is slow
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


class ImportTable:
    """Local name -> qualified name, from ``import`` and ``from ... import`` statements."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        # How ``torch`` itself is spelled (``torch``, or ``T`` after ``import torch as T``).
        self.torch_alias: Optional[str] = None
        self.imports_torch_module = False

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name)
                if full is None:
                    continue
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                    self.names[local] = full
                else:
                    local = full.split(".", 1)[0]
                    self.names[local] = local
                if self.names[local] == "torch" and self.torch_alias is None:
                    self.torch_alias = local
                    self.imports_torch_module = True
            return
        if isinstance(node.names, cst.ImportStar):
            return  # the project layer knows what a star import of a project file brings in
        # ``from .model import Net`` -> ".model.Net": never a torch name, kept for project files
        named = dotted(node.module) if node.module is not None else ""
        if named is None:
            return
        module = "." * len(node.relative) + named
        if not module:
            return
        for alias in node.names:
            if not isinstance(alias.name, cst.Name):
                continue
            name = alias.name.value
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.names[local] = f"{module}{name}" if module.endswith(".") else f"{module}.{name}"

    def add_dynamic(self, assign: cst.Assign) -> bool:
        """``x = import_module("models." + name)``: ``x`` is one of the modules of ``models`` (``models.*``);
        with a literal name, that module. Whether the assignment was such an import."""
        call = assign.value
        if not (type(call) is cst.Call and call.args and call.args[0].keyword is None and len(assign.targets) == 1
                and type(assign.targets[0].target) is cst.Name
                and self.resolve(call.func) == "importlib.import_module"):
            return False
        pattern = _module_pattern(call.args[0].value)
        if pattern is None:
            return False
        self.names[cast(cst.Name, assign.targets[0].target).value] = pattern
        return True

    def resolve(self, node: cst.BaseExpression) -> Optional[str]:
        """The qualified name of ``node`` if it starts with an imported name."""
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        full = self.names.get(head)
        if full is None:
            if head != "torch" or self.torch_alias is not None or not self.mentions_torch:
                return None
            # ``from torch import nn`` then ``torch.ones(1)``: the rewrite adds ``import torch`` for
            # the device line, so read ``torch`` as bound already; a second rewrite then finds nothing.
            full = "torch"
        return f"{full}.{rest}" if rest else full

    @property
    def mentions_torch(self) -> bool:
        return any(q == "torch" or q.startswith("torch.") for q in self.names.values())


def _module_pattern(arg: cst.BaseExpression) -> Optional[str]:
    """``"models.cnn"`` -> ``models.cnn``; ``"models." + name`` / ``f"models.{name}"`` -> ``models.*``."""
    if type(arg) is cst.SimpleString:
        text = arg.evaluated_value
        return text if isinstance(text, str) and _is_dotted(text) else None
    prefix = None
    if type(arg) is cst.BinaryOperation and type(arg.operator) is cst.Add and type(arg.left) is cst.SimpleString:
        prefix = arg.left.evaluated_value
    elif type(arg) is cst.FormattedString and arg.parts and type(arg.parts[0]) is cst.FormattedStringText:
        prefix = arg.parts[0].value
    if isinstance(prefix, str) and prefix.endswith(".") and _is_dotted(prefix[:-1]):
        return prefix + "*"
    return None


def _is_dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))
