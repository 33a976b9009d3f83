"""The contract between the parts of the analysis.

The walk is one object made of five parts, each in its own module: ``StatementWalker`` (statements
and blocks, loops, functions), ``ExpressionEvaluator`` (the value of an expression), ``TorchCalls``
(what torch's calls and methods do to a value), ``ModuleClasses`` (``nn.Module`` classes and their
``self.x`` state), ``ProjectCalls`` (calls into and out of the other files of a project).

They share three things, declared here with their types: the facts being collected, the scopes of
names, and where the walk is (its clock and the context of the statement being read). Everything a
part asks of another part goes through the methods declared below; the type checker holds each part
to them, and each is implemented by the part named beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence

import libcst as cst

from .facts import Facts, Hardcoded, Kind, Place, Scope, Value
from .imports import ImportTable
from .seeds import Exported, Seeds

from .core import Deferred


class AnalysisParts:
    # -- what the walk collects, and what it is given --
    facts: Facts
    seeds: Seeds  # what the other files of the project say (NO_SEEDS for a file alone)
    pinned: frozenset[int]  # ids of nodes a rewrite already fixed: read as on the device
    imports: ImportTable
    global_scope: Scope

    # -- where the walk is --
    time: int  # the clock: every value and use is stamped with it, in source order
    guard_depth: int  # inside an `if` on a GPU check
    host_depth: int  # inside the branch of a GPU check that runs without a GPU
    step_depth: Optional[int]  # None outside loops over a loader; inside one, how many `if`s deep
    method_context: Optional[tuple[cst.FunctionDef, Optional[str]]]  # a module's method, its input
    function_input: Optional[tuple[cst.FunctionDef, str, Value]]  # a plain function given a tensor
    current_stmt: Optional[cst.CSTNode]
    top_stmt: Optional[cst.CSTNode]  # the module-level statement being walked
    current_scope: Scope
    current_loop: Optional[cst.For]
    stmt_path: list[cst.CSTNode]  # the statements being walked, outermost first
    lambda_frames: list[Any]  # the lambdas being read at their call, innermost last
    walking_deferred: bool  # in a function no code of the file calls
    deferred: Deferred  # functions and methods not called yet
    returns: list[list[Optional[Value]]]  # the values each function being walked returns

    # -- module classes, this file's and those other files export --
    module_classes: set[str]
    module_class_values: dict[str, Value]
    seeded_classes: dict[str, Value]  # module classes of other project files, by qualified name
    seeded_class_quals: dict[int, str]  # and back: id of the class value -> qualified name
    pending_outgoing: list[Any]  # (qualified name, call, argument values)
    _params_seen: list[Value]

    if TYPE_CHECKING:  # the parts' methods that other parts call (seen by the type checker only)

        # ExpressionEvaluator
        def tick(self) -> int: ...
        def new(self, kind: Kind, node: cst.CSTNode, scope: Optional[Scope] = None, **fields: Any) -> Value: ...
        def expr(self, node: Optional[cst.BaseExpression], scope: Scope) -> Optional[Value]: ...
        def args(self, node: cst.Call, scope: Scope) -> list[Optional[Value]]: ...
        def derived(self, node: cst.CSTNode, sources: Iterable[Optional[Value]]) -> Optional[Value]: ...
        def op(self, node: cst.CSTNode, values: Iterable[Optional[Value]],
               operands: Optional[Sequence[cst.CSTNode]] = None, scope: Optional[Scope] = None) -> None: ...
        def device_arg_place(self, node: cst.BaseExpression,
                             scope: Scope) -> tuple[Optional[Place], Optional[Value]]: ...
        def value_call(self, node: cst.Call, callee: Value, scope: Scope, owner: Optional[Value] = None,
                       receiver: Optional[Value] = None) -> Optional[Value]: ...
        def module_call(self, node: cst.Call, module: Value, scope: Scope) -> Optional[Value]: ...

        # StatementWalker
        def statement(self, stmt: cst.CSTNode, scope: Scope) -> None: ...
        def generic(self, node: cst.CSTNode, scope: Scope) -> None: ...
        def function(self, function: Value, owner: Optional[Value], args: list[Any], kwargs: dict[str, Any],
                     deferred: bool = False) -> Optional[Value]: ...
        def batch_from(self, node: cst.CSTNode, loader: Optional[Value], scope: Scope) -> Value: ...
        def note_structure_change(self, module: Value) -> None: ...

        # TorchCalls
        def qualified_call(self, node: cst.Call, qual: str, scope: Scope) -> Optional[Value]: ...
        def method_call(self, node: cst.Call, func: cst.Attribute, scope: Scope) -> Optional[Value]: ...
        def note_hardcoded(self, found: Hardcoded) -> None: ...
        def note_sync(self, node: cst.CSTNode, value: Optional[Value]) -> None: ...

        # ModuleClasses
        def class_def(self, stmt: cst.ClassDef, scope: Scope) -> None: ...
        def bind_module_attribute(self, owner: Value, target: cst.Attribute, value: Optional[Value],
                                  stmt: Any, value_node: Any = None) -> None: ...
        def register_buffer(self, node: cst.Call, owner: Value, scope: Scope) -> None: ...

        # ProjectCalls
        def project_call(self, node: cst.Call, qual: str, exported: Exported, scope: Scope) -> Optional[Value]: ...
        def note_outgoing(self, qual: str, node: cst.Call, values: list[Any]) -> None: ...
        def walk_incoming(self) -> None: ...
