"""One walk over a file's tree for the rules that read its code rather than the facts.

Some rules ask about the syntax itself: CG116 the calls that make float64 and the method chains on
them, CG117 a Dataset's ``__getitem__`` and the ``collate_fn`` of a loader with workers, CG204/CG206
whether the file reads ``torch.accelerator`` and its ``torch.cuda`` calls, CG401-CG405 the
DistributedSamplers, the bindings, the loops and the rank guards of a distributed script. Each of
them used to walk the whole tree on its own (libcst visitors, ``matchers.findall``), which made
``check`` several times the parse. Here the tree is walked once per file, and only when a rule
needs it: ``nodes`` (every node a query can ask about, in source order), the parent of each, and
lists by node type made from ``nodes`` on demand. A rule is a query over these, after a pre-filter
on the file's text (``mentions``) that proves where it cannot fire.

Whitespace, comments, brackets, commas and operator tokens are left out (``classdefs.child_nodes``
decides what is searched): no rule asks about them, and they make up half of a tree. The order of
``nodes`` is libcst's own visiting order (the source order), so a rule that reads them finds its
nodes in the order a visitor would, and reports them in that order.
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from .classdefs import SEARCHED_BY_TYPE, is_searched_type, searched_fields

# The node types whose fields libcst visits in another order than it declares them (decorators before
# the name, a keyword before its value, ``a if test else b``...): their searched fields in source
# order. tests/test_syntax_index.py checks the walk against libcst's visitor.
_SOURCE_ORDER: dict[type, tuple[str, ...]] = {
    cst.Arg: ("keyword", "value"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.CompFor: ("asynchronous", "target", "iter", "ifs", "inner_for_in"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.For: ("asynchronous", "target", "iter", "body", "orelse"),
    cst.FunctionDef: ("decorators", "asynchronous", "name", "type_parameters", "params", "returns", "body"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.MatchCase: ("pattern", "guard", "body"),
    cst.Parameters: ("posonly_params", "posonly_ind", "params", "star_arg", "kwonly_params", "star_kwarg"),
    cst.With: ("asynchronous", "items", "body"),
}
for _name, _order in (("ExceptStarHandler", ("type", "name", "body")),
                      ("TypeAlias", ("name", "type_parameters", "value"))):
    if hasattr(cst, _name):
        _SOURCE_ORDER[getattr(cst, _name)] = _order
_ORDERED: dict[type, tuple[str, ...]] = {}


def _ordered_fields(kind: type) -> tuple[str, ...]:
    """The searched fields of a node type (``classdefs.searched_fields``), in the order libcst visits them."""
    declared = searched_fields(kind)
    order = _SOURCE_ORDER.get(kind)
    if order is not None:
        declared = tuple(name for name in order if name in declared) + \
            tuple(name for name in declared if name not in order)
    _ORDERED[kind] = declared
    return declared


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """A node's searched children, in source order."""
    searched = SEARCHED_BY_TYPE
    names = _ORDERED.get(type(node))
    if names is None:
        names = _ordered_fields(type(node))
    children = []
    for name in names:
        value = getattr(node, name)
        kind = type(value)
        if kind is list or kind is tuple:
            for item in value:
                wanted = searched.get(type(item))
                if wanted or wanted is None and is_searched_type(type(item)):
                    children.append(item)
        else:
            wanted = searched.get(kind)
            if wanted or wanted is None and is_searched_type(kind):
                children.append(value)
    return children


def preorder(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The searched nodes of a subtree (``node`` first), in source order: a visitor's order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        children = _children(current)
        children.reverse()
        stack.extend(children)


class SyntaxIndex:
    """The searched nodes of one module in source order, and their parents, from one walk made the
    first time a query needs it. ``text``: the file's source, when it is at hand (for ``mentions``)."""

    def __init__(self, module: cst.Module, text: Optional[str] = None) -> None:
        self.module = module
        self.text = text
        self._nodes: Optional[list[cst.CSTNode]] = None
        self._parents: dict[int, cst.CSTNode] = {}
        self._order: Optional[dict[int, int]] = None
        self._by_type: dict[tuple, list] = {}

    def mentions(self, *words: str) -> bool:
        """Whether the file's text holds one of ``words`` (True when the text is not at hand): a rule
        whose every finding needs one of them spelled out does nothing where this is False."""
        text = self.text
        return text is None or any(word in text for word in words)

    # -- the walk ---------------------------------------------------------------------

    @property
    def nodes(self) -> list[cst.CSTNode]:
        if self._nodes is None:
            self._build()
        return self._nodes  # type: ignore[return-value]

    @property
    def parents(self) -> dict[int, cst.CSTNode]:
        """id(node) -> its parent node."""
        if self._nodes is None:
            self._build()
        return self._parents

    def _build(self) -> None:
        nodes: list[cst.CSTNode] = []
        parents = self._parents
        by_type: dict[tuple, list] = {}
        stack: list[cst.CSTNode] = [self.module]
        pop, push, add = stack.pop, stack.extend, nodes.append
        while stack:
            node = pop()
            add(node)
            kind = (type(node),)
            bucket = by_type.get(kind)
            if bucket is None:
                bucket = by_type[kind] = []
            bucket.append(node)
            children = _children(node)
            for child in children:
                parents[id(child)] = node
            children.reverse()
            push(children)
        self._nodes = nodes
        self._by_type = by_type

    # -- queries ----------------------------------------------------------------------

    def of_type(self, *kinds: type) -> list:
        """The nodes of these exact types, in source order."""
        nodes = self.nodes  # (the walk fills the lists of single types)
        found = self._by_type.get(kinds)
        if found is None:
            found = [node for node in nodes if type(node) in kinds] if len(kinds) > 1 else []
            self._by_type[kinds] = found
        return found

    @property
    def calls(self) -> list[cst.Call]:
        return self.of_type(cst.Call)

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parents = self.parents
        current = parents.get(id(node))
        while current is not None:
            yield current
            current = parents.get(id(current))

    def before(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether ``first`` comes before ``second`` in the file (a node that is not searched, or not of
        this module, comes first)."""
        order = self._order
        if order is None:
            order = self._order = {id(node): number for number, node in enumerate(self.nodes)}
        return order.get(id(first), -1) < order.get(id(second), -1)


_LAST: Optional[SyntaxIndex] = None


def syntax_index(module: cst.Module, text: Optional[str] = None) -> SyntaxIndex:
    """The index of ``module``, shared by the rules and by a second analysis of the same module (the
    one ``# noqa`` pins ask for); only the last module's is kept."""
    global _LAST
    index = _LAST
    if index is None or index.module is not module:
        index = _LAST = SyntaxIndex(module, text)
    elif index.text is None and text is not None:
        index.text = text
    return index


def forget_index(module: cst.Module) -> None:
    """Drop the index of ``module`` once its file is done (it holds the tree)."""
    global _LAST
    if _LAST is not None and _LAST.module is module:
        _LAST = None
