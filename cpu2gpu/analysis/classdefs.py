"""Reading the file's ``nn.Module`` classes as code: their methods, what ``self.x`` holds.

The rules about what lives inside a module (layers in lists, layers built in
``forward``, parameters moved at creation, lists of buffers) read the class body
directly: they are about how the class is written, not about values in flight.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

import libcst as cst

from . import torchapi as api
from .facts import Facts
from .imports import dotted


def method(classdef: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
    for stmt in classdef.body.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return stmt
    return None


def methods(classdef: cst.ClassDef) -> Iterator[cst.FunctionDef]:
    for stmt in classdef.body.body:
        if isinstance(stmt, cst.FunctionDef):
            yield stmt


def self_name(function: cst.FunctionDef) -> Optional[str]:
    """The name of a method's first parameter (``self``), if it has one."""
    params = function.params.posonly_params or function.params.params
    return params[0].name.value if params else None


def self_attribute(node: cst.CSTNode, self_var: Optional[str]) -> Optional[str]:
    """``x`` for ``self.x``, else None."""
    if self_var is not None and isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) \
            and node.value.value == self_var:
        return node.attr.value
    return None


def simple_statements(body: cst.CSTNode) -> Iterator[tuple[cst.SimpleStatementLine, cst.BaseSmallStatement]]:
    """Every small statement in a function body, nested blocks included, not nested functions."""
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                yield node, small
            continue
        children = [c for c in child_nodes(node) if not isinstance(c, (cst.FunctionDef, cst.ClassDef, cst.Lambda))]
        stack.extend(reversed(children))


def qualified(facts: Facts, node: cst.BaseExpression) -> Optional[str]:
    return facts.imports.resolve(node) if facts.imports is not None else None


def module_built(facts: Facts, node: cst.CSTNode, stateful_only: bool = False) -> Optional[str]:
    """The class name if ``node`` constructs an ``nn.Module`` (a torch.nn layer or a module class
    of the file), else None. ``stateful_only``: only modules with parameters or buffers."""
    if not isinstance(node, cst.Call):
        return None
    name = dotted(node.func)
    if name is not None and name in facts.module_class_defs:
        return name
    qual = qualified(facts, node.func)
    if qual is None or not qual.startswith("torch.nn.") or not api.is_module_class(qual):
        return None
    if stateful_only and api.is_stateless_module(qual):
        return None
    return qual.rsplit(".", 1)[1]


def nn_prefix(facts: Facts) -> Optional[str]:
    """How ``torch.nn`` is spelled in this file (``nn`` after ``from torch import nn``), if it can be."""
    if facts.imports is not None:
        for local, qual in facts.imports.names.items():
            if qual == "torch.nn":
                return local
    return f"{facts.torch_alias}.nn" if facts.torch_alias else None


# What a search never looks for: whitespace, comments, brackets, commas and operator tokens. They
# make up about half of a tree's nodes; skipping them halves the cost of every walk.
_PUNCTUATION = (
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline, cst.Comment,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
    cst.RightCurlyBrace, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.BaseBinaryOp,
    cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp, cst.ImportStar,
)
# Fields that only ever hold punctuation, not read at all.
_PUNCTUATION_FIELDS = frozenset({"lpar", "rpar", "leading_lines", "lines_after_decorators", "header", "footer",
                                 "comma", "semicolon", "trailing_whitespace", "newline", "equal", "colon", "dot",
                                 "relative", "lbracket", "rbracket", "lbrace", "rbrace", "first_colon",
                                 "second_colon", "operator"})
_FIELDS: dict[type, tuple[str, ...]] = {}
# node type -> is it yielded (a dict lookup: isinstance on libcst's ABCs is slow); syntaxindex reads it too
SEARCHED_BY_TYPE: dict[type, bool] = {}


def is_searched_type(kind: type) -> bool:
    answer = SEARCHED_BY_TYPE[kind] = issubclass(kind, cst.CSTNode) and not issubclass(kind, _PUNCTUATION)
    return answer


def searched_fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind)
                                  if not f.name.startswith("whitespace") and f.name not in _PUNCTUATION_FIELDS)
    return names


def child_nodes(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """A node's children that a search may look for (no whitespace, brackets or operator tokens), in
    field order rather than source order. Many times cheaper than libcst's ``children``, which runs a
    visitor."""
    searched = SEARCHED_BY_TYPE
    names = _FIELDS.get(type(node))
    if names is None:
        names = searched_fields(type(node))
    for name in names:
        value = getattr(node, name)
        kind = type(value)
        if kind is list or kind is tuple:
            for item in value:
                wanted = searched.get(type(item))
                if wanted or wanted is None and is_searched_type(type(item)):
                    yield item
        else:
            wanted = searched.get(kind)
            if wanted or wanted is None and is_searched_type(kind):
                yield value


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node below ``node`` (itself included), in no particular order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(child_nodes(current))
