"""Resolve the names a file uses to the qualified torch names they stand for."""

from __future__ import annotations

from typing import Optional

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
