"""Where things are bound in one file: scopes, assignments, call sites, returns.

The DDP migration follows a value back to where it is made (the model a training loop calls, the
loader it iterates) through the ways scripts hand things around: a name assigned in the same
function or at module level, a parameter filled at the function's call sites, ``self.x`` set in
``__init__``, a same-file function that returns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import libcst as cst
import libcst.metadata  # noqa: F401  (cst.metadata)

from ..analysis.imports import ImportTable, dotted

Scope = Union[cst.Module, cst.FunctionDef]


@dataclass
class Binding:
    """``target = value`` in ``scope``: ``stmt`` is the statement line (where code goes after it)."""

    scope: Scope
    stmt: cst.SimpleStatementLine
    value: cst.BaseExpression


def code_of(node: cst.CSTNode) -> str:
    """The source of a node on its own."""
    return cst.Module([]).code_for_node(node)


class TreeLinks:
    """Where a node stands in ``module``: its parent and ancestors (over ``parents``, a map from
    id(node) to its parent node) and whether it comes before another in the file."""

    module: cst.Module
    parents: dict

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def before(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether ``first`` comes before ``second`` in the file (both nodes of this module)."""
        order = self.__dict__.get("_order")
        if order is None:
            order = {id(node): number for number, node in enumerate(preorder(self.module))}
            self.__dict__["_order"] = order
        return order.get(id(first), -1) < order.get(id(second), -1)


@dataclass
class FileIndex(TreeLinks):
    module: cst.Module
    imports: ImportTable = field(default_factory=ImportTable)
    parents: dict = field(default_factory=dict)  # id(node) -> parent node
    functions: dict = field(default_factory=dict)  # module-level def name -> FunctionDef
    classes: dict = field(default_factory=dict)  # class name -> ClassDef
    names_bound: set = field(default_factory=set)  # every name the file binds or imports

    # -- building -----------------------------------------------------------------------------

    @classmethod
    def of(cls, module: cst.Module) -> "FileIndex":
        index = cls(module)
        index._walk(module, None)
        for stmt in module.body:
            if isinstance(stmt, cst.FunctionDef):
                index.functions[stmt.name.value] = stmt
            elif isinstance(stmt, cst.ClassDef):
                index.classes[stmt.name.value] = stmt
        return index

    def _walk(self, node: cst.CSTNode, parent: Optional[cst.CSTNode]) -> None:
        stack = [(node, parent)]
        while stack:
            current, up = stack.pop()
            if up is not None:
                self.parents[id(current)] = up
            if isinstance(current, (cst.Import, cst.ImportFrom)):
                self.imports.add(current)
                names = current.names if not isinstance(current.names, cst.ImportStar) else ()
                for alias in names:
                    asname = alias.asname.name if alias.asname is not None else None
                    local = asname.value if isinstance(asname, cst.Name) else (dotted(alias.name) or "").split(".")[0]
                    self.names_bound.add(local)
            elif isinstance(current, cst.Name):
                self.names_bound.add(current.value)  # read or bound: a new name must be neither
            stack.extend((child, current) for child in current.children)

    # -- navigation ---------------------------------------------------------------------------

    def scope_of(self, node: cst.CSTNode) -> Scope:
        for up in self.ancestors(node):
            if isinstance(up, (cst.FunctionDef, cst.Module)):
                return up
        return self.module

    def statement_of(self, node: cst.CSTNode) -> Optional[cst.BaseStatement]:
        """The statement (a line, or a compound one) the node is in, nearest first."""
        if isinstance(node, cst.BaseStatement):
            return node
        for up in self.ancestors(node):
            if isinstance(up, cst.BaseStatement):
                return up
        return None

    def class_of(self, function: cst.FunctionDef) -> Optional[cst.ClassDef]:
        up = self.parent(function)
        while up is not None and not isinstance(up, (cst.ClassDef, cst.FunctionDef, cst.Module)):
            up = self.parent(up)
        return up if isinstance(up, cst.ClassDef) else None

    def follows(self, stmt: cst.CSTNode, node: cst.CSTNode) -> bool:
        """``node`` comes after the whole of ``stmt`` (not inside it)."""
        return self.before(stmt, node) and not any(up is stmt for up in self.ancestors(node))

    def line_of(self, node: cst.CSTNode) -> int:
        lines = self.__dict__.get("_lines")
        if lines is None:
            wrapper = cst.metadata.MetadataWrapper(self.module, unsafe_skip_copy=True)
            lines = wrapper.resolve(cst.metadata.PositionProvider)
            self.__dict__["_lines"] = lines
        where = lines.get(node)
        return where.start.line if where is not None else 0

    # -- bindings -----------------------------------------------------------------------------

    def bindings(self, name: str, scope: Scope) -> list[Binding]:
        """``name = value`` statements in ``scope`` (not in functions nested in it), in order."""
        return list(_assignments(scope, lambda target: _is_name(target, name)))

    def self_bindings(self, cls: cst.ClassDef, attr: str) -> list[Binding]:
        """``self.attr = value`` in the methods of ``cls``."""
        return [b for method in _methods(cls) for b in _assignments(method, lambda target: _is_self_attr(target, attr))]

    def is_parameter(self, name: str, scope: Scope) -> bool:
        return isinstance(scope, cst.FunctionDef) and name in _parameter_names(scope)

    def reads_global(self, name: str, scope: Scope) -> bool:
        """A function that reads ``name`` without binding it: the module's ``name``."""
        return isinstance(scope, cst.FunctionDef) and not self.is_parameter(name, scope) \
            and not self.bindings(name, scope) \
            and any(isinstance(n, cst.Name) and n.value == name for n in own_nodes(scope))

    def call_sites(self, function: cst.FunctionDef, loose: bool = False) -> list[cst.Call]:
        """Calls of a same-file function (``f(...)``), method (``self.f(...)``) or class (its ``__init__``);
        ``loose``: a method also through any object (``Trainer(...).fit()``), where a stray match costs little."""
        cls = self.class_of(function)
        name = function.name.value
        sites = []
        for node in preorder(self.module):
            if not isinstance(node, cst.Call):
                continue
            callee = node.func
            if cls is None and isinstance(callee, cst.Name) and callee.value == name:
                sites.append(node)
            elif cls is not None and name == "__init__" and isinstance(callee, cst.Name) \
                    and callee.value == cls.name.value:
                sites.append(node)
            elif cls is not None and (_is_self_attr(callee, name) or (
                    loose and isinstance(callee, cst.Attribute) and callee.attr.value == name)):
                sites.append(node)
        return sites

    def argument_for(self, call: cst.Call, function: cst.FunctionDef, parameter: str) -> Optional[cst.BaseExpression]:
        """The expression a call passes for ``parameter`` (by position or keyword), else None."""
        names = _parameter_names(function)
        if names and names[0] == "self" and self.class_of(function) is not None:
            names = names[1:]
        for position, arg in enumerate(call.args):
            if arg.star:
                return None
            if arg.keyword is not None:
                if arg.keyword.value == parameter:
                    return arg.value
            elif position < len(names) and names[position] == parameter:
                return arg.value
        return None

    def returns(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        return [node.value for node in own_nodes(function) if isinstance(node, cst.Return) and node.value is not None]


def _assignments(scope: Scope, matches) -> Iterator[Binding]:
    """``target = value`` and ``target: T = value`` lines of a scope whose one target ``matches``."""
    for node in own_nodes(scope):
        if not isinstance(node, cst.SimpleStatementLine):
            continue
        for small in node.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and matches(small.targets[0].target):
                yield Binding(scope, node, small.value)
            elif isinstance(small, cst.AnnAssign) and small.value is not None and matches(small.target):
                yield Binding(scope, node, small.value)


def preorder(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def own_nodes(scope: Scope) -> Iterator[cst.CSTNode]:
    """The nodes of a scope's body, not those of functions or classes nested in it."""
    stack = list(reversed(scope.body.body if isinstance(scope, cst.FunctionDef) else scope.body))
    while stack:
        current = stack.pop()
        yield current
        if isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        stack.extend(reversed(current.children))


def _methods(cls: cst.ClassDef) -> Iterator[cst.FunctionDef]:
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef):
            yield stmt


def _parameter_names(function: cst.FunctionDef) -> list[str]:
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]


def _is_name(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _is_self_attr(node: cst.BaseExpression, attr: str) -> bool:
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self" \
        and node.attr.value == attr
