"""Scripts that are already distributed (DistributedDataParallel), read as plain syntax.

Shared by the CG4xx rules: whether a file is a distributed script at all, its DistributedSamplers
and the DataLoaders that use them, the names bound to a DDP wrapper, and the reading of a rank-0
guard (``if rank == 0:``, ``if dist.get_rank() == 0:``, ``if is_main_process():``...).

The guard is read conservatively, on the side of silence: any ``if`` whose test mentions a rank,
the main or master process, or whether the run is distributed at all counts as a guard, for its
body and its ``else`` alike; so does an early ``return`` under such a test, a decorator such as
``@rank_zero_only``, and a function whose every call in the file is guarded. Nothing here imports
torch.
"""

from __future__ import annotations

import re
from typing import Iterator, Optional, Union, cast

import libcst as cst

from . import torchapi as api
from .devicecode import keyword_value
from .imports import dotted
from .syntaxindex import SyntaxIndex, preorder as walk, syntax_index

DDP_CLASSES = frozenset({"torch.nn.parallel.DistributedDataParallel",
                         "torch.nn.parallel.distributed.DistributedDataParallel"})
INIT_FUNCTIONS = frozenset({"torch.distributed.init_process_group",
                            "torch.distributed.distributed_c10d.init_process_group"})
DISTRIBUTED_SAMPLERS = frozenset({"torch.utils.data.distributed.DistributedSampler",
                                  "torch.utils.data.DistributedSampler"})
_MARKERS = DDP_CLASSES | INIT_FUNCTIONS | DISTRIBUTED_SAMPLERS
_MARKER_WORDS = frozenset(q.rsplit(".", 1)[1] for q in _MARKERS)

# Words in a test that make it a guard on the rank (or on whether the run is distributed at all).
_GUARD = re.compile(r"rank|(?<![a-z])(?:is_?)?(?:main|master)|distributed|ddp|world_size|local_process",
                    re.IGNORECASE)
_RANK = re.compile(r"rank", re.IGNORECASE)
_ENDS_BRANCH = (cst.Return, cst.Continue, cst.Break, cst.Raise)


def is_distributed(module: cst.Module, imports, syntax: Optional[SyntaxIndex] = None) -> bool:
    """Whether the file imports or uses ``DistributedDataParallel``, ``init_process_group`` or
    ``DistributedSampler`` (through any import alias)."""
    if imports is None:
        return False
    if any(qualified in _MARKERS for qualified in imports.names.values()):
        return True
    syntax = syntax if syntax is not None else syntax_index(module)
    if not syntax.mentions(*_MARKER_WORDS):
        return False
    return any(node.attr.value in _MARKER_WORDS and imports.resolve(node) in _MARKERS
               for node in syntax.of_type(cst.Attribute))


def words(node: cst.CSTNode) -> Iterator[str]:
    """The names, attribute names and string contents in an expression."""
    for current in walk(node):
        if type(current) is cst.Name:
            yield current.value
        elif type(current) is cst.Attribute:
            yield current.attr.value
        elif type(current) is cst.SimpleString:
            yield current.value
        elif type(current) is cst.FormattedStringText:
            yield current.value


def mentions_rank(node: cst.CSTNode) -> bool:
    """``local_rank``, ``args.rank``, ``dist.get_rank()``, ``os.environ["RANK"]``..."""
    return any(_RANK.search(word) for word in words(node))


def is_rank_guard(test: cst.BaseExpression) -> bool:
    """Whether an ``if`` test may keep its body to one process (read on the side of silence)."""
    return any(_GUARD.search(word) for word in words(test) if "__main__" not in word)


class DdpReading:
    """What the CG4xx rules read of one distributed file, computed once (``reading(ctx)``): queries
    over the file's syntax index (its calls, assignments, loops, and where each node stands)."""

    def __init__(self, module: cst.Module, imports, syntax: Optional[SyntaxIndex] = None) -> None:
        self.module = module
        self.imports = imports
        self.syntax = syntax if syntax is not None else syntax_index(module)
        self.distributed = is_distributed(module, imports, self.syntax)
        self.calls: list[cst.Call] = []
        # name (``sampler``, ``self.sampler``) -> [(DistributedSampler(...) call, the statement binding it)]
        self.samplers: dict[str, list[tuple[cst.Call, cst.CSTNode]]] = {}
        # name -> [(the value bound, the statement)], for every simple assignment to a name or self.attr
        self.bindings: dict[str, list[tuple[cst.BaseExpression, cst.CSTNode]]] = {}
        if not self.distributed:
            return
        self.calls = self.syntax.calls
        for node in self.syntax.of_type(cst.Assign, cst.AnnAssign):
            if type(node) is cst.Assign:
                for target in node.targets:
                    name = dotted(target.target)
                    if name is not None:
                        self.bindings.setdefault(name, []).append((node.value, node))
            elif type(node) is cst.AnnAssign and node.value is not None:
                name = dotted(node.target)
                if name is not None:
                    self.bindings.setdefault(name, []).append((node.value, node))
        for name, bound in self.bindings.items():
            for value, stmt in bound:
                if type(value) is cst.Call and self.resolve(value.func) in DISTRIBUTED_SAMPLERS:
                    self.samplers.setdefault(name, []).append((value, stmt))

    # -- names ------------------------------------------------------------------------

    def resolve(self, node: cst.BaseExpression) -> Optional[str]:
        return self.imports.resolve(node) if self.imports is not None else None

    def is_call_of(self, node: cst.CSTNode, names: frozenset) -> bool:
        return type(node) is cst.Call and self.resolve(node.func) in names

    def distributed_sampler(self, expr: Optional[cst.BaseExpression]) -> Optional[tuple[Optional[str], cst.Call]]:
        """``sampler=`` of a DataLoader: (its name or None when built inline, the DistributedSampler call)."""
        if expr is None:
            return None
        if self.is_call_of(expr, DISTRIBUTED_SAMPLERS):
            return None, expr  # type: ignore[return-value]
        name = dotted(expr)
        if name is not None and name in self.samplers:
            return name, self.samplers[name][-1][0]
        return None

    def loaders_with_distributed_sampler(self) -> Iterator[tuple[cst.Call, Optional[str], cst.Call]]:
        """(DataLoader call, the sampler's name or None, the DistributedSampler call)."""
        for call in self.calls:
            if self.resolve(call.func) not in api.DATALOADERS:
                continue
            found = self.distributed_sampler(keyword_value(call, "sampler"))
            if found is not None:
                yield call, found[0], found[1]

    # -- where a node is ----------------------------------------------------------------

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.syntax.parent(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        return self.syntax.ancestors(node)

    def before(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether ``first`` comes before ``second`` in the file."""
        return self.syntax.before(first, second)

    @property
    def loops(self) -> list:
        """Every ``for`` and ``while`` of the file, in source order."""
        return self.syntax.of_type(cst.For, cst.While)

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The statement (a line, or a compound statement's header) that holds ``node``."""
        current: Optional[cst.CSTNode] = node
        while current is not None and not isinstance(current, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            current = self.parent(current)
        return current if current is not None else node

    def function_of(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        """The innermost function that holds ``node`` (None: module level)."""
        return next((a for a in self.ancestors(node) if type(a) is cst.FunctionDef), None)

    def inside(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        return node is outer or any(a is outer for a in self.ancestors(node))

    def last_binding(self, name: str, at: cst.CSTNode) -> Optional[tuple[cst.BaseExpression, cst.CSTNode]]:
        """The last assignment to ``name`` before ``at`` in the function that holds ``at``, else the
        module's (before ``at`` when ``at`` is at module level); None when there is none."""
        function = self.function_of(at)
        local = [(v, s) for v, s in self.bindings.get(name, ()) if self.function_of(s) is function
                 and self.before(s, at)]
        if local:
            return local[-1]
        if function is None:
            return None
        module_level = [(v, s) for v, s in self.bindings.get(name, ()) if self.function_of(s) is None]
        return module_level[-1] if module_level else None

    def conditional_between(self, stmt: cst.CSTNode, at: cst.CSTNode) -> bool:
        """Whether ``stmt`` sits in an ``if``/``try``/loop/``with`` that does not also hold ``at``:
        it may not have run when ``at`` runs."""
        for ancestor in self.ancestors(stmt):
            if type(ancestor) in (cst.FunctionDef, cst.Module) or self.inside(at, ancestor):
                return False
            if isinstance(ancestor, (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.For, cst.While,
                                     cst.Finally)):
                return True
        return False

    # -- rank-0 guards -----------------------------------------------------------------

    def guarded(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Whether ``node`` may run on one rank only (read on the side of silence)."""
        child = node
        for ancestor in self.ancestors(node):
            kind = type(ancestor)
            if kind is cst.If or kind is cst.IfExp:
                test = cast(Union[cst.If, cst.IfExp], ancestor).test
                if is_rank_guard(test) and child is not test:
                    return True
            if kind is cst.IndentedBlock and self._early_exit_before(cast(cst.IndentedBlock, ancestor), child):
                return True
            if kind is cst.FunctionDef:
                return self._function_guarded(cast(cst.FunctionDef, ancestor), depth)
            if kind is cst.Lambda:
                return True  # called who knows where
            child = ancestor
        return False

    def _early_exit_before(self, block: cst.IndentedBlock, child: cst.CSTNode) -> bool:
        """``if rank != 0: return`` before ``child`` in ``block``."""
        for stmt in block.body:
            if stmt is child:
                return False
            if type(stmt) is cst.If and is_rank_guard(stmt.test) and _ends_branch(stmt.body):
                return True
        return False

    def _function_guarded(self, function: cst.FunctionDef, depth: int) -> bool:
        if any(is_rank_guard(d.decorator) for d in function.decorators):
            return True  # @rank_zero_only, @master_only
        if depth >= 3:
            return True
        name = function.name.value
        parent = self.parent(function)
        method = type(parent) is cst.IndentedBlock and type(self.parent(parent)) is cst.ClassDef
        callers: list[cst.CSTNode] = [call for call in self.calls if _calls_name(call, name, method)]
        # mp.spawn(main_worker, ...), Process(target=worker): handed on, run by every process
        callers += [arg for call in self.calls for arg in call.args
                    if (type(arg.value) is cst.Name and not method and arg.value.value == name)
                    or (type(arg.value) is cst.Attribute and method and arg.value.attr.value == name)]
        # Not called in this file (another file calls it, or nobody): not judged.
        return not callers or all(self.guarded(caller, depth + 1) for caller in callers)


def _calls_name(call: cst.Call, name: str, method: bool) -> bool:
    func = call.func
    if method:
        return type(func) is cst.Attribute and func.attr.value == name
    return type(func) is cst.Name and func.value == name


def _ends_branch(body: cst.BaseSuite) -> bool:
    statements = body.body
    if not statements:
        return False
    last = statements[-1]
    small: Optional[cst.CSTNode]
    if isinstance(last, cst.SimpleStatementLine):
        small = last.body[-1] if last.body else None
    else:
        small = last
    if isinstance(small, _ENDS_BRANCH):
        return True
    # sys.exit() / exit() / quit()
    return isinstance(small, cst.Expr) and type(small.value) is cst.Call \
        and (dotted(small.value.func) or "").rsplit(".", 1)[-1] in ("exit", "quit", "_exit")


def reading(ctx) -> DdpReading:
    """The file's reading, made once per file and shared by the rules (kept on the rule context)."""
    cached = getattr(ctx, "_ddp_reading", None)
    if cached is None:
        cached = DdpReading(ctx.facts.module, ctx.facts.imports, ctx.syntax)
        ctx._ddp_reading = cached
    return cached
