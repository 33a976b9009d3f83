"""One pass over a file that records its device facts (see ``facts.py``).

The walk reads the file as straight-line code in source order: module level first,
then the bodies of functions and methods (which run later, when called). It is an
abstract interpretation with a tiny domain: for every expression, the ``Value`` it
may hold, or None when it cannot tell. None is never reported: uncertain is not
wrong.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Union

import libcst as cst

from . import classdefs
from . import torchapi as api
from .classdefs import child_nodes, walk
from .facts import Facts, Hardcoded, Kind, Move, Origin, Place, Use, Value
from .imports import ImportTable, dotted
from .seeds import CROSSING_KINDS, NO_SEEDS, CallShape, Exported, Seeds

_TENSORISH = (Kind.TENSOR, Kind.BATCH)
_GUARD_WORDS = ("cuda", "gpu", "is_available", "accelerator", "device")
_DEVICE_PARAMETER_NAMES = frozenset({"device", "dev", "torch_device"})

Block = Union[cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite, cst.BaseSuite]


class Scope:
    def __init__(self, parent: Optional["Scope"], function: Optional[cst.FunctionDef] = None,
                 owner: Optional[Value] = None) -> None:
        self.parent = parent
        self.function = function
        self.owner = owner  # a method's self: its class may keep the device (self.device)
        self.params: list[str] = []
        self.names: dict[str, Optional[Value]] = {}
        self.device_names: list[str] = []
        # name -> (time it was first bound, the top-level statement that binds it)
        self.device_bindings: dict[str, tuple[int, Optional[cst.CSTNode]]] = {}

    def has(self, name: str) -> bool:
        scope: Optional[Scope] = self
        while scope is not None:
            if name in scope.names:
                return True
            scope = scope.parent
        return False

    def lookup(self, name: str) -> Optional[Value]:
        scope: Optional[Scope] = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def device_binding(self) -> Optional[tuple[str, int, Optional[cst.CSTNode], bool]]:
        """The device variable in reach: (name, time bound, statement, bound at module level)."""
        scope: Optional[Scope] = self
        while scope is not None:
            if scope.device_names:
                name = scope.device_names[0]
                time, stmt = scope.device_bindings.get(name, (0, None))
                return name, time, stmt, scope.parent is None
            cls = scope.owner.class_value if scope.owner is not None else None
            if cls is not None and cls.device_attr is not None:
                return f"{scope.params[0]}.{cls.device_attr}", 0, None, False
            scope = scope.parent
        return None

    def module_parameter(self) -> Optional[str]:
        """A parameter of this function that holds a module (or, in a method, a module the object
        keeps: ``self.model``), to read the device from."""
        for name in self.params:
            value = self.names.get(name)
            if value is not None and value.kind is Kind.MODULE and value.stateful and value.name != "self":
                return name
        if self.owner is not None and self.owner.kind is Kind.INSTANCE and self.params:
            for attr, value in self.owner.attrs.items():
                # a model the object was given (on the device already), never one it builds itself:
                # self.net = Net().to(next(self.net.parameters()).device) would read self.net too early
                if value is not None and value.kind is Kind.MODULE and value.stateful \
                        and value.explicit is Place.DEVICE and not value.moves:
                    return f"{self.params[0]}.{attr}"
        return None


_EXPRESSION, _STATEMENT, _SMALL, _OTHER = "expression", "statement", "small statement", "other"
_ROLES: dict[type, str] = {}


def _role(kind: type) -> str:
    """What a node type is to the analysis, remembered per type (isinstance on libcst's ABCs is slow)."""
    role = _ROLES.get(kind)
    if role is None:
        role = _ROLES[kind] = (_EXPRESSION if issubclass(kind, cst.BaseExpression) else
                               _STATEMENT if issubclass(kind, cst.BaseStatement) else
                               _SMALL if issubclass(kind, cst.BaseSmallStatement) else _OTHER)
    return role


def _is_tensorish(value: Optional[Value]) -> bool:
    return value is not None and value.kind in _TENSORISH


def _tensors_of(value: Optional[Value]) -> list[Value]:
    """The tensors a value stands for: itself, or the tensors of a returned tuple (h, c)."""
    if value is None:
        return []
    if value.kind is Kind.TUPLE:
        return [e for e in value.elements if _is_tensorish(e)]
    return [value] if _is_tensorish(value) else []


_PACK_PADDED = "torch.nn.utils.rnn.pack_padded_sequence"


def _plain_args(node: cst.Call) -> Optional[list[cst.CSTNode]]:
    """The argument expressions of a call, or None when one is unpacked (*args)."""
    if any(arg.star for arg in node.args):
        return None
    return [arg.value for arg in node.args]


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


def _string_value(node: cst.CSTNode) -> Optional[str]:
    if type(node) is cst.SimpleString:
        try:
            evaluated = node.evaluated_value
        except Exception:  # odd prefixes: not a device string
            return None
        return evaluated if isinstance(evaluated, str) else None
    return None


def _device_string_place(text: str) -> Optional[Place]:
    text = text.strip().lower()
    if text == "cpu":
        return Place.CPU
    if text.split(":", 1)[0] in ("cuda", "mps", "xpu", "hip"):
        return Place.DEVICE
    return None


def _is_cuda_literal(node: cst.CSTNode) -> bool:
    text = _string_value(node)
    return text is not None and text.strip().lower().split(":", 1)[0] == "cuda"


def _mentions_guard(node: cst.CSTNode) -> bool:
    """Whether an ``if`` test looks at the GPU (``torch.cuda.is_available()``, ``use_cuda``...)."""
    for current in walk(node):
        kind = type(current)
        if kind is cst.Name:
            lowered = current.value.lower()
            if any(word in lowered for word in _GUARD_WORDS):
                return True
        elif kind is cst.SimpleString:
            if "cuda" in current.value.lower():
                return True
    return False


def _leaves_block(suite: cst.BaseSuite) -> bool:
    last = suite.body[-1] if suite.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    return isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break))


def _call_kwarg(call: cst.Call, name: str) -> Optional[cst.Arg]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


class Analyzer:
    def __init__(self, module: cst.Module, pinned: frozenset[int] = frozenset(), seeds: Seeds = NO_SEEDS) -> None:
        self.facts = Facts(module=module)
        self.pinned = pinned
        self.seeds = seeds
        self.imports = ImportTable()
        self.imports.names.update(seeds.star_names)
        self.seeded_classes: dict[str, Value] = {}  # module classes of other project files, by qualified name
        self.pending_outgoing: list = []  # (qualified name, call, argument values)
        self.seeded_class_quals: dict[int, str] = {}  # and back: id of the class value -> qualified name
        self.module_classes: set[str] = set()
        self.module_class_values: dict[str, Value] = {}
        self.time = 0
        self.guard_depth = 0
        self.global_scope = Scope(None)
        # Functions and methods not called yet: walked at the end, with unknown arguments.
        self.deferred: list[tuple[Value, Optional[Value]]] = []
        self.returns: list[list[Optional[Value]]] = []
        # None outside loops over a loader; inside one, how many `if`s deep (0: every step).
        self.step_depth: Optional[int] = None
        # Inside a module's method: (the method, its input tensor parameter).
        self.method_context: Optional[tuple[cst.FunctionDef, Optional[str]]] = None
        # Inside a plain function given a tensor: (the function, the parameter, its value).
        self.function_input: Optional[tuple[cst.FunctionDef, str, Value]] = None
        self.current_stmt: Optional[cst.CSTNode] = None
        self.top_stmt: Optional[cst.CSTNode] = None  # the module-level statement being walked
        self.current_scope: Scope = self.global_scope
        self.walking_deferred = False  # in a function no code of the file calls
        self.current_loop: Optional[cst.For] = None
        self._params_seen: list[Value] = []

    # -- entry ---------------------------------------------------------------------

    def run(self) -> Facts:
        for stmt in self.facts.module.body:
            self.top_stmt = stmt
            self.statement(stmt, self.global_scope)
        self.walk_incoming()
        while self.deferred:
            # Methods first: the helper functions forward() calls are then walked with its tensors.
            index = next((i for i, (_, o) in enumerate(self.deferred) if o is not None), 0)
            function, owner = self.deferred.pop(index)
            if not function.walked:
                self.function(function, owner, [], {}, deferred=owner is None)
        self.facts.torch_alias = self.imports.torch_alias
        self.facts.imports = self.imports
        self.facts.device_names = list(self.global_scope.device_names)
        self.facts.global_scope = self.global_scope
        # Names a new module-level variable would clash with (locals elsewhere may shadow it safely).
        self.facts.names_in_use = {n.split(".", 1)[0] for n in self.global_scope.names} | set(self.imports.names)
        self.propagate()
        self.facts.outgoing_calls = [(qual, call_shape(node, values, self.facts))
                                     for qual, node, values in self.pending_outgoing]
        return self.facts

    # -- statements ----------------------------------------------------------------

    def block(self, body: Iterable[cst.CSTNode], scope: Scope) -> None:
        guards = 0
        try:
            for stmt in body:
                self.statement(stmt, scope)
                if isinstance(stmt, cst.If) and stmt.orelse is None and _leaves_block(stmt.body) \
                        and _mentions_guard(stmt.test):
                    # if not torch.cuda.is_available(): return ... -> what follows runs with a GPU
                    guards += 1
                    self.guard_depth += 1
        finally:
            self.guard_depth -= guards

    def body_of(self, node: cst.BaseSuite) -> Iterable[cst.CSTNode]:
        return node.body

    def statement(self, stmt: cst.CSTNode, scope: Scope) -> None:
        self.current_scope = scope
        kind = type(stmt)
        if kind is cst.SimpleStatementLine:
            for small in stmt.body:
                self.current_stmt = stmt
                self.small(small, stmt, scope)
        elif _role(kind) is _SMALL:  # the body of `if x: a = 1` on one line
            self.small(stmt, stmt, scope)
        elif kind is cst.If:
            self.if_statement(stmt, scope)
        elif kind is cst.For:
            self.for_statement(stmt, scope)
        elif kind is cst.While:
            self.expr(stmt.test, scope)
            self.guarded_block(stmt.body, scope, _mentions_guard(stmt.test))
            if stmt.orelse is not None:
                self.block(self.body_of(stmt.orelse.body), scope)
        elif kind is cst.With:
            for item in stmt.items:
                value = self.expr(item.item, scope)
                if item.asname is not None:
                    self.bind(item.asname.name, value if _is_tensorish(value) else None, stmt, None, scope)
            self.block(self.body_of(stmt.body), scope)
        elif isinstance(stmt, cst.Try) or isinstance(stmt, getattr(cst, "TryStar", cst.Try)):
            self.block(self.body_of(stmt.body), scope)
            for handler in stmt.handlers:
                self.block(self.body_of(handler.body), scope)
            if stmt.orelse is not None:
                self.block(self.body_of(stmt.orelse.body), scope)
            if stmt.finalbody is not None:
                self.block(self.body_of(stmt.finalbody.body), scope)
        elif kind is cst.FunctionDef:
            function = Value(Kind.FUNCTION, stmt, name=stmt.name.value, definition=stmt, def_scope=scope)
            scope.names[stmt.name.value] = function
            self.deferred.append((function, None))
        elif kind is cst.ClassDef:
            self.class_def(stmt, scope)
        else:
            self.generic(stmt, scope)

    def guarded_block(self, suite: cst.BaseSuite, scope: Scope, guarded: bool) -> None:
        self.guard_depth += guarded
        if self.step_depth is not None:
            self.step_depth += 1
        try:
            self.block(self.body_of(suite), scope)
        finally:
            self.guard_depth -= guarded
            if self.step_depth is not None:
                self.step_depth -= 1

    def if_statement(self, stmt: cst.If, scope: Scope) -> None:
        self.expr(stmt.test, scope)
        guarded = _mentions_guard(stmt.test)
        # self.x set in both branches of a method's `if` joins like a name does.
        owner = scope.owner if scope.owner is not None and scope.owner.kind in (Kind.MODULE, Kind.INSTANCE) else None
        before = dict(scope.names)
        attrs_before = dict(owner.attrs) if owner is not None else {}
        self.guarded_block(stmt.body, scope, guarded)
        after_body = scope.names
        attrs_after_body = dict(owner.attrs) if owner is not None else {}
        if stmt.orelse is None:
            scope.names = self.merge(before, after_body, before)
            if owner is not None:
                owner.attrs = self.merge(attrs_before, attrs_after_body, attrs_before)
            return
        scope.names = dict(before)
        if owner is not None:
            owner.attrs = dict(attrs_before)
        if isinstance(stmt.orelse, cst.If):
            self.guard_depth += guarded
            try:
                self.if_statement(stmt.orelse, scope)
            finally:
                self.guard_depth -= guarded
        else:
            self.guarded_block(stmt.orelse.body, scope, guarded)
        scope.names = self.merge(before, after_body, scope.names)
        if owner is not None:
            owner.attrs = self.merge(attrs_before, attrs_after_body, owner.attrs)

    def merge(self, before: dict, left: dict, right: dict) -> dict:
        """Join the names two branches bound: the same value stays, two devices join."""
        merged = dict(before)
        for name in set(left) | set(right):
            a, b = left.get(name), right.get(name)
            if a is b:
                merged[name] = a
            elif a is not None and b is not None and a.kind is b.kind is Kind.DEVICE:
                # if cuda: device = cuda else: device = cpu -> a device that can be the GPU
                can_be_gpu = Place.DEVICE in (self.facts.place(a), self.facts.place(b))
                merged[name] = Value(Kind.DEVICE, a.node, name=name,
                                     explicit=Place.DEVICE if can_be_gpu else Place.CPU)
            elif a is not None and b is not None and a.kind is b.kind is Kind.MODULE:
                merged[name] = a
            else:
                merged[name] = None
        return merged

    def for_statement(self, stmt: cst.For, scope: Scope) -> None:
        pairs = self.loop_targets(stmt.target, stmt.iter, scope)
        is_training_loop = False
        for target, source in pairs:
            if source is not None and source.kind is Kind.LOADER:
                is_training_loop = True
                self.bind_loop_variables(target, stmt, scope, source)
            elif _tensors_of(source):
                # for xb in torch.split(x, 10): the pieces of tensors are tensors from the same sources.
                for name in _target_names(target):
                    self.bind(cst.Name(name), self.derived(stmt.iter, _tensors_of(source)), stmt, None, scope)
            else:
                self.bind(target, None, stmt, None, scope)
        saved = (self.current_loop, self.step_depth)
        self.current_loop = stmt
        # Inside a loop over a loader, code outside any `if` runs on every step.
        self.step_depth = 0 if is_training_loop else (self.step_depth if self.step_depth is not None else None)
        try:
            self.block(self.body_of(stmt.body), scope)
        finally:
            self.current_loop, self.step_depth = saved
        if stmt.orelse is not None:
            self.block(self.body_of(stmt.orelse.body), scope)

    def loop_targets(self, target: cst.BaseExpression, iterable: cst.BaseExpression,
                     scope: Scope) -> list[tuple[cst.BaseExpression, Optional[Value]]]:
        """Pair the loop's targets with what they iterate: ``enumerate`` and ``zip`` unwrapped."""
        if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.args \
                and not scope.has(iterable.func.value) and not any(a.star for a in iterable.args):
            elements = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else None
            if iterable.func.value == "enumerate" and elements is not None and len(elements) == 2:
                # for i, (x, y) in enumerate(loader): the batch is the second element.
                for arg in iterable.args[1:]:
                    self.expr(arg.value, scope)
                return [(elements[0], None), *self.loop_targets(elements[1], iterable.args[0].value, scope)]
            positional = [a for a in iterable.args if a.keyword is None]
            if iterable.func.value == "zip" and elements is not None and len(elements) == len(positional):
                # for (x, y), (u, v) in zip(train_loader, extra_loader): one batch per loader.
                for arg in iterable.args:
                    if arg.keyword is not None:
                        self.expr(arg.value, scope)
                pairs: list[tuple[cst.BaseExpression, Optional[Value]]] = []
                for element, arg in zip(elements, positional):
                    pairs.extend(self.loop_targets(element, arg.value, scope))
                return pairs
        return [(target, self.expr(iterable, scope))]

    def bind_loop_variables(self, target: cst.BaseExpression, loop: cst.For, scope: Scope, loader: Value) -> None:
        names: list[cst.Name] = []
        if isinstance(target, cst.Name):
            names = [target]
        elif isinstance(target, (cst.Tuple, cst.List)) and all(
            isinstance(e.value, cst.Name) for e in target.elements
        ):
            names = [e.value for e in target.elements]  # type: ignore[misc]
        else:
            self.bind(target, None, loop, None, scope)
            return
        for name in names:
            value = Value(Kind.BATCH, name, name=name.value, origin=Origin.LOOP, loop=loop, scope=scope,
                          time=self.tick(), loader=loader)
            self.facts.values.append(value)
            self.bind(name, value, loop, None, scope)

    def cpu_inputs(self, classdef: cst.ClassDef) -> frozenset:
        """The inputs of ``forward`` that must stay on the CPU: the lengths given to
        ``pack_padded_sequence`` ("lengths ... must be a 1D CPU int64 tensor"). By name and position."""
        forward = classdefs.method(classdef, "forward")
        if forward is None:
            return frozenset()
        params = [p.name.value for p in (*forward.params.posonly_params, *forward.params.params)][1:]
        found: set = set()
        for node in walk(forward.body):
            if not isinstance(node, cst.Call) or self.imports.resolve(node.func) != _PACK_PADDED:
                continue
            lengths = _call_kwarg(node, "lengths") or next(
                (a for i, a in enumerate(a for a in node.args if a.keyword is None) if i == 1), None)
            if lengths is not None and isinstance(lengths.value, cst.Name) and lengths.value.value in params:
                found.update({lengths.value.value, params.index(lengths.value.value)})
        return frozenset(found)

    def class_def(self, stmt: cst.ClassDef, scope: Scope) -> None:
        name = stmt.name.value
        is_module = False
        has_forward = any(
            isinstance(s, cst.FunctionDef) and s.name.value == "forward" for s in stmt.body.body
        )
        holds_state = False  # known to hold parameters or buffers whatever its __init__ does
        local_bases = []
        for base in stmt.bases:
            qual = self.imports.resolve(base.value)
            base_name = dotted(base.value)
            if qual is not None and (qual in api.MODULE_BASES or api.is_module_class(qual)):
                is_module = True
                holds_state = holds_state or qual not in ("torch.nn.Module",)
            elif base_name in self.module_classes:
                is_module = True
                local_bases.append(self.module_class_values[base_name])
            elif qual is not None and qual in self.seeds.imported \
                    and self.seeds.imported[qual].kind == "module_class":
                is_module = True  # a module class of another project file
                holds_state = holds_state or self.seeds.imported[qual].holds_state
            elif qual is None and base_name not in (None, "object") and has_forward:
                # An unknown base with a forward(): a module from elsewhere in the project.
                is_module = True
                holds_state = True
        if is_module:
            self.module_classes.add(name)
            self.facts.module_class_defs[name] = stmt
        class_value = Value(Kind.CLASS, stmt, name=name, definition=stmt, def_scope=scope,
                            holds_state=holds_state, stateful_bases=tuple(local_bases))
        if is_module:
            self.module_class_values[name] = class_value
            class_value.cpu_inputs = self.cpu_inputs(stmt)
        scope.names[name] = None if is_module else class_value
        # A module's methods see ``self`` as the module, on the device with its submodules.
        owner = Value(Kind.MODULE, stmt, name="self", explicit=Place.DEVICE, class_value=class_value) if is_module else None
        class_scope = Scope(scope)
        methods = []
        for item in stmt.body.body:
            if isinstance(item, cst.FunctionDef):
                # Methods see the enclosing scope, not the class body.
                method = Value(Kind.FUNCTION, item, name=item.name.value, definition=item, def_scope=scope)
                class_value.methods[item.name.value] = method
                methods.append(method)
            else:
                self.statement(item, class_scope)
        # __init__ first (it makes the attributes), then forward (it calls the helpers with tensors).
        order = {"__init__": 0, "forward": 1}
        for method in sorted(methods, key=lambda m: order.get(m.name, 2)):
            self.deferred.append((method, owner))

    def function(self, function: Value, owner: Optional[Value], args: list, kwargs: dict,
                 deferred: bool = False) -> Optional[Value]:
        """Walk a function's body with what its caller passes; its return value, if known.

        ``owner`` is the object a method is called on (``self``). A function is walked
        once, at its first call (or at the end of the file if it is never called).
        """
        node = function.definition
        assert isinstance(node, cst.FunctionDef)
        function.walked = True
        scope = Scope(function.def_scope, node, owner)  # type: ignore[arg-type]
        params = node.params
        positional = [*params.posonly_params, *params.params]
        scope.params = [p.name.value for p in (*positional, *params.kwonly_params)]
        bound_args: list[Optional[Value]] = ([owner] if owner is not None else []) + list(args)
        for index, param in enumerate((*positional, *params.kwonly_params)):
            name = param.name.value
            self.facts.names_in_use.add(name)
            value = bound_args[index] if index < len(bound_args) and index < len(positional) else kwargs.get(name)
            if value is None and owner is not None and owner.class_value is not None and node.name.value == "__init__":
                value = owner.class_value.constructor_args.get(name)  # FocalLoss(alpha=torch.tensor(...))
            if value is None and param.default is not None:
                value = self.expr(param.default, function.def_scope)  # type: ignore[arg-type]
            scope.names[name] = value
            if (name in _DEVICE_PARAMETER_NAMES and value is None) or (value is not None and value.kind is Kind.DEVICE):
                scope.device_names.append(name)  # train(model, device, loader): the caller's device
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                scope.names[star.name.value] = None
                self.facts.names_in_use.add(star.name.value)
        context = None
        if owner is not None and owner.kind is Kind.MODULE:
            context = (node, None)
            if node.name.value == "forward" and len(positional) > 1 and not args:
                # The data a module is called with is on the device once migrated: the first
                # input, and the other inputs without a default (flags and options have one).
                first = positional[1].name.value
                cpu_inputs = owner.class_value.cpu_inputs if owner.class_value is not None else frozenset()
                for param in positional[1:]:
                    name = param.name.value
                    if name in cpu_inputs:
                        continue  # pack_padded_sequence's lengths: on the CPU
                    if scope.names.get(name) is None and (param is positional[1] or param.default is None):
                        scope.names[name] = Value(Kind.TENSOR, param, name=name, explicit=Place.DEVICE)
                context = (node, first)
        function_input = None
        if context is None:
            # A plain function handed tensors (a custom loss, a mask helper): what it makes
            # follows its input's device, so it stays right wherever it is called from.
            function_input = next(((n, v) for n, v in scope.names.items() if n in scope.params and _is_tensorish(v)), None)
        saved = (self.current_stmt, self.current_loop, self.guard_depth, self.method_context, self.current_scope,
                 self.walking_deferred, self.step_depth, self.function_input)
        self.current_loop, self.guard_depth, self.method_context = None, 0, context
        self.function_input = (node, *function_input) if function_input is not None else None
        self.walking_deferred, self.step_depth = deferred, None
        self.returns.append([])
        try:
            self.block(node.body.body, scope)
        finally:
            returned = self.returns.pop()
            (self.current_stmt, self.current_loop, self.guard_depth, self.method_context, self.current_scope,
             self.walking_deferred, self.step_depth, self.function_input) = saved
        known = [r for r in returned if r is not None]
        function.returns = known[0] if known else None
        function.walked_until = self.time
        self.tick()  # what the caller does with the result comes after
        return function.returns

    def small(self, node: cst.BaseSmallStatement, stmt: cst.CSTNode, scope: Scope) -> None:
        kind = type(node)
        if kind is cst.Assign:
            if (
                len(node.targets) == 1
                and isinstance(node.targets[0].target, (cst.Tuple, cst.List))
                and isinstance(node.value, (cst.Tuple, cst.List))
                and len(node.targets[0].target.elements) == len(node.value.elements)
                and not any(isinstance(e, cst.StarredElement) for e in node.value.elements)
            ):
                # a, b = a.to(device), b.to(device): bind pairwise.
                for target_el, value_el in zip(node.targets[0].target.elements, node.value.elements):
                    value = self.expr(value_el.value, scope)
                    self.bind(target_el.value, value, stmt, value_el.value, scope)
                return
            value = self.expr(node.value, scope)
            if value is not None and value.kind is Kind.BATCH and self.unpack_batch(node, value, stmt, scope):
                return
            if value is not None and value.kind is Kind.TUPLE and len(node.targets) == 1:
                target = node.targets[0].target
                if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == len(value.elements):
                    # model, optimizer = build(): what the function returned, element by element
                    for element, returned in zip(target.elements, value.elements):
                        self.bind(element.value, returned, stmt, None, scope)
                    return
            if value is not None and value.output_of is not None and len(node.targets) == 1 \
                    and isinstance(node.targets[0].target, (cst.Tuple, cst.List)):
                # features, logits = net(x): every output of a module is where the module is.
                for element in node.targets[0].target.elements:
                    part = Value(Kind.TENSOR, element.value, output_of=value.output_of, sources=value.sources,
                                 time=value.time)
                    self.bind(element.value, part, stmt, None, scope)
                return
            for target in node.targets:
                self.bind(target.target, value, stmt, node.value, scope)
            self.note_device_string(node, stmt)
        elif kind is cst.AnnAssign:
            value = self.expr(node.value, scope) if node.value is not None else None
            if node.value is not None:
                self.bind(node.target, value, stmt, node.value, scope)
        elif kind is cst.AugAssign:
            left = self.expr(node.target, scope)
            right = self.expr(node.value, scope)
            self.op(node, [left, right])
        elif kind is cst.Expr:
            value = self.expr(node.value, scope)
            self.discarded_move(node, value, stmt, scope)
        elif kind is cst.Return:
            if isinstance(node.value, cst.Tuple) and not any(isinstance(e, cst.StarredElement) for e in node.value.elements):
                elements = tuple(self.expr(e.value, scope) for e in node.value.elements)
                value = Value(Kind.TUPLE, node.value, elements=elements, time=self.time)
            else:
                value = self.expr(node.value, scope) if node.value is not None else None
            if self.walking_deferred:
                # Returned to a caller outside this file: where it goes from here is not known.
                for returned in (value.elements if value is not None and value.kind is Kind.TUPLE else (value,)):
                    if returned is not None and returned.kind is Kind.MODULE:
                        returned.escaped = True
            if value is not None and value.is_root and value.fix_node is None and value.node is node.value:
                # def build(): return Net() -> moved where it is made, so every caller gets it moved.
                value.fix_node = node.value
            if self.returns:
                self.returns[-1].append(value)
        elif kind is cst.Import or kind is cst.ImportFrom:
            self.imports.add(node)
            for alias in node.names if not isinstance(node.names, cst.ImportStar) else ():
                local = alias.evaluated_alias or alias.evaluated_name
                self.facts.names_in_use.add(local.split(".", 1)[0])
        else:
            self.generic(node, scope)

    def unpack_batch(self, node: cst.Assign, batch: Value, stmt: cst.CSTNode, scope: Scope) -> bool:
        """``inputs, labels = data``: each name is a batch tensor of its own, moved after this line."""
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, (cst.Tuple, cst.List)):
            return False
        elements = node.targets[0].target.elements
        if not all(isinstance(e.value, cst.Name) for e in elements):
            return False
        for element in elements:
            name = element.value
            assert isinstance(name, cst.Name)
            value = self.new(Kind.BATCH, name, scope, name=name.value, origin=Origin.UNPACK,
                             loader=batch.loader, binding_stmt=stmt)
            self.bind(name, value, stmt, None, scope)
        return True

    def batch_from(self, node: cst.CSTNode, loader: Optional[Value], scope: Scope) -> Value:
        """A batch read out of a loader or a batch: ``next(iter(loader))``, ``data[0]``."""
        return self.new(Kind.BATCH, node, scope, origin=Origin.UNPACK, loader=loader)

    def note_device_string(self, node: cst.Assign, stmt: cst.CSTNode) -> None:
        """``device = "cuda"`` with no fallback."""
        if self.guard_depth or not _is_cuda_literal(node.value):
            return
        for target in node.targets:
            if isinstance(target.target, cst.Name) and "device" in target.target.value.lower():
                self.note_hardcoded(Hardcoded(node.value, "device-string", target.target.value))

    def discarded_move(self, node: cst.Expr, value: Optional[Value], stmt: cst.CSTNode, scope: Scope) -> None:
        """``x.to(device)`` as a statement: tensors are not moved in place (CG110).

        The analysis reads it as what it meant, ``x = x.to(device)``, so that the
        rest of the file is judged as it will be once fixed.
        """
        call = node.value
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                and call.func.attr.value in api.MOVE_METHODS and isinstance(call.func.value, (cst.Name, cst.Attribute))
                and dotted(call.func.value) is not None):
            return
        receiver = self.expr(call.func.value, scope)  # a name or self.x: a lookup, nothing is recorded
        if not _is_tensorish(receiver) or value is None:
            return
        self.facts.discarded_moves.append(node)
        self.bind(call.func.value, value, stmt, call, scope)

    def generic(self, node: cst.CSTNode, scope: Scope) -> None:
        """Walk the children of a node the analysis has no special reading for (in field order,
        which for these nodes is their order in the source)."""
        for child in child_nodes(node):
            role = _role(type(child))
            if role is _EXPRESSION:
                self.expr(child, scope)
            elif role is _STATEMENT:
                self.statement(child, scope)
            elif role is _SMALL:
                self.small(child, self.current_stmt or child, scope)
            else:
                self.generic(child, scope)

    # -- bindings ------------------------------------------------------------------

    def bind(
        self,
        target: cst.BaseExpression,
        value: Optional[Value],
        stmt: cst.CSTNode,
        value_node: Optional[cst.BaseExpression],
        scope: Scope,
    ) -> None:
        if isinstance(target, cst.Name):
            key = target.value
            self.facts.names_in_use.add(key)
        elif isinstance(target, cst.Attribute):
            base = self.expr(target.value, scope)
            if base is not None and base.kind is Kind.MODULE and base.class_value is not None:
                self.bind_module_attribute(base, target, value, stmt, value_node)
                return
            if base is not None and base.kind is Kind.INSTANCE:
                base.attrs[target.attr.value] = value  # self.model = model, kept across methods
                if value is not None and value.kind is Kind.DEVICE and base.class_value is not None:
                    base.class_value.device_attr = target.attr.value  # self.device = ...
                if value is not None and value.name is None:
                    value.name = dotted(target)
                    value.binding_stmt = stmt
                    if value.is_root and value.fix_node is None and value.node is value_node:
                        value.fix_node = value_node
                return
            key = dotted(target)
            if key is None:
                return
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.bind(element.value, None, stmt, None, scope)
            return
        elif isinstance(target, cst.StarredElement):
            self.bind(target.value, None, stmt, None, scope)
            return
        else:
            self.expr(target, scope)
            return
        scope.names[key] = value
        if value is None:
            return
        if value.name is None:
            value.name = key
            value.binding_stmt = stmt
        if value.chain_root is not None and value.chain_root.origin is Origin.CONVERSION:
            if value.chain_root.fix_node is None or value.chain_root.fix_node is value.chain_root.node:
                value.chain_root.fix_node = value_node
        if value.is_root and value.fix_node is None and value.node is value_node:
            value.fix_node = value_node
        if value.kind is Kind.DEVICE and self.facts.place(value) is Place.DEVICE:
            if scope is not self.global_scope:
                self.facts.has_local_device = True
            if key not in scope.device_names:
                scope.device_names.append(key)
                scope.device_bindings[key] = (self.time, self.top_stmt if scope is self.global_scope else stmt)

    def note_state(self, owner: Value, value: Optional[Value], value_node) -> None:
        """What a module's methods assign to ``self``: evidence that it holds state or places itself."""
        cls = owner.class_value
        if cls is None:
            return
        if value is None:
            # self.encoder = build(...): may well be a layer; self.dim = dim is not.
            if isinstance(value_node, (cst.Call, cst.Subscript, cst.ListComp, cst.List, cst.Dict)):
                cls.holds_state = True
            return
        if value.kind is Kind.MODULE or value.is_parameter:
            cls.holds_state = cls.holds_state or value.stateful or value.is_parameter
            if value.kind is Kind.MODULE and value.moves:
                cls.places_itself = True  # self.fc = nn.Linear(...).cuda(rank)

    def bind_module_attribute(self, owner: Value, target: cst.Attribute, value: Optional[Value], stmt,
                              value_node=None) -> None:
        """``self.x = ...`` in a module's method: what ``model.to(device)`` carries and what it leaves."""
        owner.attrs[target.attr.value] = value
        self.note_state(owner, value, value_node)
        if value is None:
            return
        if value.name is None:
            value.name = dotted(target)
            value.binding_stmt = stmt
        if value.kind is Kind.MODULE or value.is_parameter:
            # Submodules and parameters move with the module.
            value.explicit = Place.DEVICE
            for root in self.facts.roots(value):
                root.explicit = Place.DEVICE
        elif value.is_root and value.kind is Kind.TENSOR and value.method is not None \
                and value.method.name.value == "__init__":
            value.context = "module-attribute"
            value.attribute_binding = (target.attr.value, stmt)
            if owner.class_value is not None:
                owner.class_value.holds_state = True  # a buffer once migrated (CG105): its inputs go to the device
        elif value.kind is Kind.TENSOR and not value.is_root and value.explicit is None and value.output_of is None \
                and value.node is value_node and self.method_context is not None \
                and self.method_context[0].name.value == "__init__":
            roots = self.facts.roots(value)
            if roots and all(r.method is self.method_context[0] for r in roots):
                # self.mask = torch.tril(torch.ones(n, n)) / n: the whole expression is the attribute.
                value.origin, value.context, value.method = Origin.CONVERSION, "module-attribute", self.method_context[0]
                value.attribute_binding = (target.attr.value, stmt)
                self.facts.values.append(value)

    def register_buffer(self, node: cst.Call, owner: Value, scope: Scope) -> None:
        values = self.args(node, scope)
        name = _string_value(node.args[0].value) if node.args else None
        for value in values[1:2]:
            if value is not None:
                for root in self.facts.roots(value):
                    root.explicit = Place.DEVICE  # buffers move with the module
        if name is not None:
            owner.attrs[name] = Value(Kind.TENSOR, node, name=f"self.{name}", explicit=Place.DEVICE)
        return None

    # -- expressions ---------------------------------------------------------------

    def tick(self) -> int:
        self.time += 1
        return self.time

    def new(self, kind: Kind, node: cst.CSTNode, scope: Optional[Scope] = None, **fields) -> Value:
        value = Value(kind, node, time=self.time, scope=scope, **fields)
        if id(node) in self.pinned:
            value.explicit = Place.CPU  # `# noqa`: it stays where the script puts it
        if value.is_root:
            self.facts.values.append(value)
            if self.method_context is not None and kind is Kind.MODULE \
                    and self.method_context[0].name.value != "__init__":
                value.context = "module-method"  # a layer built on every call: CG111
                value.method = self.method_context[0]
            if self.method_context is not None and kind is Kind.TENSOR:
                method, method_input = self.method_context
                if method.name.value != "__init__":
                    value.context = "module-method"
                value.method, value.method_input = method, method_input
            elif self.function_input is not None and kind is Kind.TENSOR:
                value.method, value.method_input, value.input_value = self.function_input
                value.context = "function"
        return value

    def derived(self, node: cst.CSTNode, sources: Iterable[Optional[Value]]) -> Optional[Value]:
        found = tuple(s for s in sources if s is not None and s.kind in (*_TENSORISH, Kind.DEVICE))
        if not found:
            return None
        return Value(Kind.TENSOR, node, sources=found, time=self.time)

    def op(self, node: cst.CSTNode, values: Iterable[Optional[Value]],
           operands: Optional[Sequence[cst.CSTNode]] = None, scope: Optional[Scope] = None) -> None:
        """Tensors meet in ``node``. ``operands`` are their expressions, where each is one tensor."""
        values = list(values)
        tensors = tuple(t for v in values for t in _tensors_of(v))
        if len(tensors) < 2:
            return
        arg_nodes: tuple[cst.CSTNode, ...] = ()
        if operands is not None and len(operands) == len(values) and all(_is_tensorish(v) or v is None for v in values):
            pairs = [(v, n) for v, n in zip(values, operands) if v is not None]
            tensors = tuple(v for v, _ in pairs)
            arg_nodes = tuple(n for _, n in pairs)
        self.facts.uses.append(Use("op", node, self.time, tensors, arg_nodes=arg_nodes, scope=scope))

    def expr(self, node: Optional[cst.BaseExpression], scope: Scope) -> Optional[Value]:
        if node is None:
            return None
        kind = type(node)  # exact types: isinstance on libcst's classes goes through ABCMeta, and is slow here
        if kind is cst.Name:
            self.facts.names_in_use.add(node.value)
            value = scope.lookup(node.value)
            if value is not None and value.origin is Origin.COMPREHENSION:
                value.use_nodes.append(node)
            return value
        if kind is cst.Attribute:
            return self.attribute(node, scope)
        if kind is cst.Call:
            return self.call(node, scope)
        if kind is cst.BinaryOperation:
            left = self.expr(node.left, scope)
            right = self.expr(node.right, scope)
            self.op(node, [left, right], [node.left, node.right], scope)
            return self.derived(node, [left, right])
        if kind is cst.Comparison:
            values = [self.expr(node.left, scope)]
            values += [self.expr(c.comparator, scope) for c in node.comparisons]
            self.op(node, values, [node.left, *[c.comparator for c in node.comparisons]], scope)
            return self.derived(node, values)
        if kind is cst.UnaryOperation:
            return self.derived(node, [self.expr(node.expression, scope)])
        if kind is cst.Subscript:
            return self.subscript(node, scope)
        if kind is cst.SimpleString:
            text = _string_value(node)
            place = _device_string_place(text) if text is not None else None
            return Value(Kind.DEVICE, node, explicit=place) if place is not None else None
        if kind is cst.IfExp:
            self.expr(node.test, scope)
            guarded = _mentions_guard(node.test)
            self.guard_depth += guarded
            try:
                body = self.expr(node.body, scope)
            finally:
                self.guard_depth -= guarded
            orelse = self.expr(node.orelse, scope)
            if body is not None and orelse is not None and body.kind is orelse.kind is Kind.DEVICE:
                places = {self.facts.place(body), self.facts.place(orelse)}
                return Value(Kind.DEVICE, node, explicit=Place.DEVICE if Place.DEVICE in places else Place.CPU)
            return body if body is orelse else None
        if kind is cst.List and not node.elements:
            # outputs = [] ... outputs.append(logits): a list that holds what is appended to it.
            return Value(Kind.TENSOR, node, time=self.time, is_list=True)
        if kind in (cst.Tuple, cst.List):
            values = [self.expr(e.value, scope) for e in node.elements]
            return self.derived(node, [v for v in values if _is_tensorish(v)])
        if kind in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
            return self.comprehension(node, scope)
        if kind in (cst.DictComp, cst.Lambda):
            self.generic(node, Scope(scope))
            return None
        if kind in (cst.Await, cst.Yield, cst.StarredElement):
            inner = getattr(node, "expression", None) or getattr(node, "value", None)
            if isinstance(inner, cst.BaseExpression):
                return self.expr(inner, scope)
            return None
        if kind in (cst.Integer, cst.Float, cst.Imaginary, cst.Ellipsis):
            return None
        self.generic(node, scope)
        return None

    def comprehension(self, node: cst.BaseExpression, scope: Scope) -> Optional[Value]:
        """``[h.detach() for h in hidden]``: the elements of tensors are tensors, so is the result."""
        inner = Scope(scope)
        clause: Optional[cst.CompFor] = node.for_in
        while clause is not None:
            iterable = self.expr(clause.iter, inner)
            element = self.derived(clause.iter, _tensors_of(iterable))
            for name in _target_names(clause.target):
                inner.names[name] = element
                if iterable is not None and iterable.kind is Kind.LOADER:
                    # sum(loss(model(x)) for (x,) in loader): batches moved where they are used.
                    batch = Value(Kind.BATCH, clause.target, name=name, origin=Origin.COMPREHENSION, scope=scope,
                                  time=self.tick(), loader=iterable)
                    self.facts.values.append(batch)
                    inner.names[name] = batch
            for condition in clause.ifs:
                self.expr(condition.test, inner)
            clause = clause.inner_for_in
        value = self.expr(node.elt, inner)
        return self.derived(node, [value]) if _is_tensorish(value) else None

    def attribute(self, node: cst.Attribute, scope: Scope) -> Optional[Value]:
        key = dotted(node)
        if key is not None:
            if scope.has(key):
                return scope.lookup(key)
            head = key.split(".", 1)[0]
            if not scope.has(head) and head in self.imports.names:
                return None  # torch.float32, nn.Linear...: names, not values
        base = self.expr(node.value, scope)
        if base is None:
            return None
        attr = node.attr.value
        if base.kind is Kind.INSTANCE or base.kind is Kind.MODULE and base.class_value is not None:
            return base.attrs.get(attr)
        if base.kind is Kind.MODULE and attr in ("weight", "bias") and base.stateful:
            # model.weight of a torch.nn layer: a parameter, wherever the module is.
            return Value(Kind.TENSOR, node, output_of=(base, self.time), time=self.time)
        if base.kind is Kind.DEVICE and attr == "type":
            return base  # torch.accelerator.current_accelerator().type: "cuda", "mps"...
        if base.kind in _TENSORISH:
            if attr in api.TENSOR_ATTRIBUTES:
                return self.derived(node, [base])
            if attr == "device":
                return Value(Kind.DEVICE, node, sources=(base,), time=self.time)
        return None

    def subscript(self, node: cst.Subscript, scope: Scope) -> Optional[Value]:
        base = self.expr(node.value, scope)
        indices: list[Optional[Value]] = []
        for element in node.slice:
            if isinstance(element.slice, cst.Index):
                indices.append(self.expr(element.slice.value, scope))
            else:
                self.generic(element.slice, scope)
        if base is not None and base.kind is Kind.BATCH and len(node.slice) == 1 \
                and isinstance(node.slice[0].slice, cst.Index):
            index = node.slice[0].slice.value
            if isinstance(index, cst.Integer):
                return self.batch_from(node, base.loader, scope)  # data[0]
            if isinstance(index, cst.SimpleString) and base.is_root:
                base.dict_batch = True  # batch["input"]: the whole dict is moved at once
                return self.derived(node, [base])
        if base is None or base.kind is not Kind.TENSOR:
            return None
        tensor_indices = [i for i in indices if _is_tensorish(i)]
        if tensor_indices:
            self.facts.uses.append(Use("index", node, self.time, (base, *tensor_indices)))
        return self.derived(node, [base])

    # -- calls ---------------------------------------------------------------------

    def device_arg_place(self, node: cst.BaseExpression, scope: Scope) -> tuple[Optional[Place], Optional[Value]]:
        """Where ``.to(node)`` or ``device=node`` puts a value: (place, value it follows)."""
        text = _string_value(node)
        if text is not None:
            return _device_string_place(text), None
        qual = self.imports.resolve(node)
        if qual is not None and api.is_dtype(qual):
            return None, None
        if isinstance(node, cst.Integer):
            return Place.DEVICE, None
        value = self.expr(node, scope)
        if value is not None and value.kind is Kind.DEVICE:
            if value.explicit is not None:
                return value.explicit, None
            return None, value
        if value is not None and value.kind in _TENSORISH:
            return None, value
        if isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.IfExp)):
            # args.device, a device parameter, get_device(): a device chosen elsewhere.
            return Place.DEVICE, None
        return None, None

    def call(self, node: cst.Call, scope: Scope) -> Optional[Value]:
        result = self.plain_call(node, scope)
        generator = _call_kwarg(node, "generator")
        if generator is not None and _is_tensorish(result) and isinstance(generator.value, (cst.Name, cst.Attribute)):
            # A random draw with a generator (a DataLoader's or random_split's gives no tensor).
            drawn_by = self.expr(generator.value, scope)  # a lookup: nothing is recorded twice
            if drawn_by is not None and drawn_by.kind is Kind.GENERATOR and drawn_by.explicit is Place.CPU:
                self.facts.generator_draws.append((node, result, drawn_by, scope, self.time))
        return result

    def plain_call(self, node: cst.Call, scope: Scope) -> Optional[Value]:
        self.tick()
        func = node.func
        if isinstance(func, cst.Attribute):
            key = dotted(func)
            callee = scope.lookup(key) if key is not None else None
            if callee is not None:  # self.model(x), where self.model was bound in this scope
                return self.value_call(node, callee, scope)
            head = key.split(".", 1)[0] if key is not None else None
            qual = None
            if head is not None and not scope.has(head):
                qual = self.imports.resolve(func)
            if qual is None:
                return self.method_call(node, func, scope)
            return self.qualified_call(node, qual, scope)
        if isinstance(func, cst.Name):
            self.facts.names_in_use.add(func.value)
            if scope.has(func.value) and func.value not in self.module_classes:
                callee = scope.lookup(func.value)
                if callee is not None:
                    return self.value_call(node, callee, scope)
                self.args(node, scope)
                return None
            if func.value in self.module_classes:
                return self.qualified_call(node, "<local>." + func.value, scope)
            qual = self.imports.names.get(func.value)
            if qual is None:
                values = self.args(node, scope)
                first = values[0] if values else None
                if first is not None and first.kind is Kind.LOADER:
                    if func.value in ("tqdm", "iter"):
                        return first  # a progress bar, an iterator: they yield what the loader yields
                    if func.value == "next":
                        return self.batch_from(node, first, scope)
                if func.value == "print":
                    for value in values:
                        self.note_sync(node, value)
                if func.value in ("tuple", "list", "reversed", "sorted") and len(values) == 1:
                    return self.derived(node, _tensors_of(first))  # the same tensors in a new container
                return None
            return self.qualified_call(node, qual, scope)
        if type(func) is cst.Subscript:
            # MODELS[name](): a dict of module classes kept in another project file
            key = dotted(func.value)
            qual = self.imports.resolve(func.value) if key is not None and not scope.has(key.split(".", 1)[0]) else None
            exported = self.seeds.imported.get(qual) if qual is not None else None
            if exported is not None and exported.kind == "registry":
                self.expr(func.slice[0].slice.value, scope) if isinstance(func.slice[0].slice, cst.Index) else None
                return self.project_call(node, qual, exported, scope)
        callee = self.expr(func, scope)
        if callee is not None:
            return self.value_call(node, callee, scope)
        self.args(node, scope)
        return None

    def value_call(self, node: cst.Call, callee: Value, scope: Scope, owner: Optional[Value] = None) -> Optional[Value]:
        if callee.kind is Kind.MODULE:
            return self.module_call(node, callee, scope)
        values = self.args(node, scope)
        positional = [v for v, a in zip(values, node.args) if a.keyword is None and not a.star]
        keywords = {a.keyword.value: v for v, a in zip(values, node.args) if a.keyword is not None}
        if callee.kind is Kind.FUNCTION:
            if owner is not None and owner.kind is Kind.MODULE and owner.stateful and owner.name != "self":
                # model.decode(z): the tensors go into the module as in a call of it.
                pairs = [(t, a.value) for v, a in zip(values, node.args) for t in _tensors_of(v)]
                if pairs:
                    self.facts.uses.append(Use("call", node, self.time, tuple(v for v, _ in pairs),
                                               tuple(n for _, n in pairs), module=owner))
            if callee.walked:
                return self.another_result(node, callee, scope)
            return self.function(callee, owner, positional, keywords)
        if callee.kind is Kind.CLASS:
            instance = Value(Kind.INSTANCE, node, class_value=callee, time=self.time)
            init = callee.methods.get("__init__")
            if init is not None and not init.walked:
                self.function(init, instance, positional, keywords)
            return instance
        return None

    def args(self, node: cst.Call, scope: Scope) -> list[Optional[Value]]:
        return [self.expr(arg.value, scope) for arg in node.args]

    def another_result(self, node: cst.Call, function: Value, scope: Scope) -> Optional[Value]:
        """What a later call of a walked function gives. ``build_model()`` builds a new model
        each time: one that an earlier caller moved itself (``build_model().to(device)``) is a
        new model here, to be moved at this call site; otherwise one move in the function
        serves every call, and the value already known stands for them all."""
        returned = function.returns
        if returned is None or returned.kind is not Kind.MODULE or returned.origin is not Origin.MODULE \
                or not any(m.time > function.walked_until for m in returned.moves):
            return returned
        return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, stateful=returned.stateful,
                        weighted_loss=returned.weighted_loss, class_value=returned.class_value)

    def module_call(self, node: cst.Call, module: Value, scope: Scope) -> Optional[Value]:
        values = self.args(node, scope)
        if not module.stateful:
            self.op(node, values, _plain_args(node), scope)
            return self.derived(node, [v for v in values if _is_tensorish(v)])
        module.used = True
        cpu_inputs = module.class_value.cpu_inputs if module.class_value is not None else frozenset()
        pairs = [(t, a.value) for i, (v, a) in enumerate(zip(values, node.args))
                 if not (a.keyword is None and i in cpu_inputs) and not (a.keyword and a.keyword.value in cpu_inputs)
                 for t in _tensors_of(v)]
        self.facts.uses.append(
            Use("call", node, self.time, tuple(v for v, _ in pairs), tuple(n for _, n in pairs), module=module)
        )
        # The sources stand for the output when the module turns out to hold no state.
        return Value(Kind.TENSOR, node, output_of=(module, self.time), sources=tuple(v for v, _ in pairs),
                     time=self.time)

    def qualified_call(self, node: cst.Call, qual: str, scope: Scope) -> Optional[Value]:
        exported = self.seeds.imported.get(qual)
        if exported is not None:
            return self.project_call(node, qual, exported, scope)
        if qual == "torch.device":
            return self.torch_device(node, scope)
        if qual == "torch.accelerator.current_accelerator":
            self.args(node, scope)
            return Value(Kind.DEVICE, node, explicit=Place.DEVICE, time=self.time)
        if qual in api.FACTORIES or qual in api.LIKE_FACTORIES:
            return self.factory(node, qual, scope)
        if qual in ("torch.Generator", "torch._C.Generator"):
            device = _call_kwarg(node, "device") or next((a for a in node.args if a.keyword is None), None)
            place = self.device_arg_place(device.value, scope)[0] if device is not None else Place.CPU
            for arg in node.args:
                if arg is not device:
                    self.expr(arg.value, scope)
            return Value(Kind.GENERATOR, node, explicit=place or Place.DEVICE, time=self.time)
        if qual in api.CONVERSIONS:
            self.args(node, scope)
            return self.new(Kind.TENSOR, node, scope, origin=Origin.CONVERSION)
        if qual in api.LOAD_FUNCTIONS:
            self.args(node, scope)
            location = _call_kwarg(node, "map_location") or (
                node.args[1] if len(node.args) > 1 and node.args[1].keyword is None else None)
            if location is None:
                self.facts.loads_without_map_location.append((node, scope, self.time))
            # What was saved may be a whole model (torch.save(model)): it counts as one once it is
            # called or trained; a state dict or a tensor never is. It lands where map_location says.
            place = self.device_arg_place(location.value, scope)[0] if location is not None else None
            return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, explicit=place,
                            loaded_without_map_location=location is None)
        if qual.rsplit(".", 1)[-1] in ("tqdm", "trange") and qual.startswith("tqdm"):
            values = self.args(node, scope)
            return values[0] if values and values[0] is not None and values[0].kind is Kind.LOADER else None
        if qual in ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"):
            # A data set's tensors stay on the CPU: the loader pins, shuffles and batches them there.
            for value in self.args(node, scope):
                for root in self.facts.roots(value) if value is not None else ():
                    if root.explicit is None:
                        root.explicit = Place.CPU
                        root.dataset_pinned = True
            return None
        if qual in api.DATALOADERS:
            self.args(node, scope)
            loader = Value(Kind.LOADER, node, time=self.time)
            self.facts.loaders.append(loader)
            return loader
        if qual.startswith("torch.cuda.") and qual[11:] in api.CUDA_ONLY_CALLS and not self.guard_depth:
            self.facts.unguarded_cuda_calls.append((node, self.current_stmt))
        if api.is_optimizer(qual):
            self._params_seen = []
            self.args(node, scope)
            trained = [p.module_of for p in self._params_seen if p.module_of is not None]
            for module in trained:
                module.used = True
                self.facts.uses.append(Use("train", node, self.time, module=module))
            self._params_seen = []
            return Value(Kind.OPTIMIZER, node, time=self.time, module_of=trained[0] if trained else None)
        if qual in api.PARAMETER_CLASSES:
            values = self.args(node, scope)
            result = self.derived(node, values[:1])
            if result is not None:
                result.is_parameter = True
            return result
        if qual in api.MODULE_WRAPPERS:
            values = self.args(node, scope)
            return values[0] if values and values[0] is not None and values[0].kind is Kind.MODULE else None
        if qual.startswith("<local>.") or api.is_module_class(qual):
            values = self.args(node, scope)
            local = self.module_class_values.get(qual[8:]) if qual.startswith("<local>.") else None
            if local is not None:
                self.note_constructor_args(node, local, values)
            stateful = local is not None or not api.is_stateless_module(qual)
            weighted = not stateful and any(_is_tensorish(v) for v in values)
            # A loss built with weight=tensor holds it as a buffer.
            return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, stateful=stateful or weighted,
                            weighted_loss=weighted, class_value=local)
        if api.is_tensor_function(qual):
            values = self.args(node, scope)
            self.op(node, values, _plain_args(node), scope)
            return self.derived(node, [v for v in values if _is_tensorish(v)])
        self.args(node, scope)
        return None

    # -- the rest of the project -------------------------------------------------------

    def project_call(self, node: cst.Call, qual: str, exported: Exported, scope: Scope) -> Optional[Value]:
        """A call of a class or function of another project file: what its summary says it gives.
        A model handed to another file's function is trained or called there."""
        values = self.args(node, scope)
        self.note_outgoing(qual, node, values)
        modules = [v for v in values if v is not None and v.kind is Kind.MODULE and v.stateful]
        for value in modules:
            value.used = True
            self.facts.uses.append(Use("train", node, self.time, module=value))
        if modules:
            # loss(net, x, y), evaluate(model, x): the tensors given with a model go into it
            pairs = [(t, a.value) for v, a in zip(values, node.args) for t in _tensors_of(v)]
            if pairs:
                self.facts.uses.append(Use("call", node, self.time, tuple(v for v, _ in pairs),
                                           tuple(n for _, n in pairs), module=modules[0]))
        if exported.kind == "module_class":
            cls = self.seeded_class(exported.file, exported.name, exported.holds_state, exported.cpu_inputs, node)
            return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, class_value=cls)
        if exported.kind == "registry":
            return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, stateful=exported.holds_state)
        for index, value in enumerate(values):
            # a loader whose batches the function moves to the device (DataLoader pin_memory, CG301)
            arg = node.args[index]
            key = arg.keyword.value if arg.keyword is not None else index
            if value is not None and value.kind is Kind.LOADER and key in exported.loader_params:
                value.moved_batches = True
        kind = exported.returns if exported.kind == "function" else None
        if kind == "module":
            cls = self.seeded_class(*exported.returns_class, exported.holds_state, (), node) \
                if exported.returns_class else None
            return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, stateful=exported.holds_state,
                            class_value=cls)
        if kind == "tensor":
            return self.new(Kind.TENSOR, node, scope, origin=Origin.CONVERSION)
        if kind == "tuple":
            # adj, features, labels = load_data(): each tensor is moved after the line, if it meets the device
            source = f"`{exported.name}()` from {exported.file}"
            elements = tuple(self.new(Kind.BATCH, node, scope, origin=Origin.UNPACK, origin_file=source)
                             if element == "tensor" else None for element in exported.returns_elements)
            return Value(Kind.TUPLE, node, elements=elements, time=self.time)
        if kind == "loader":
            return Value(Kind.LOADER, node, time=self.time)
        if kind == "optimizer":
            return Value(Kind.OPTIMIZER, node, time=self.time)
        return None

    def seeded_class(self, file: str, name: str, holds_state: bool, cpu_inputs, node: cst.CSTNode) -> Value:
        """The class value standing for a module class of another project file (one per class)."""
        key = f"@{file}:{name}"
        cls = self.seeded_classes.get(key)
        if cls is None:
            cls = Value(Kind.CLASS, node, name=name, holds_state=holds_state, cpu_inputs=frozenset(cpu_inputs),
                        origin_file=file)
            self.seeded_classes[key] = cls
            self.seeded_class_quals[id(cls)] = key
        return cls

    def note_outgoing(self, qual: str, node: cst.Call, values: list) -> None:
        # the shape is taken after propagation, when it is known which tensors are on the device
        self.pending_outgoing.append((qual, node, values))

    def walk_incoming(self) -> None:
        """Functions and classes of this file that other files call: walked with what they are given."""
        for name, shape in self.seeds.incoming.items():
            class_name, _, method_name = name.partition(".")
            if method_name and class_name in self.module_class_values:
                # Net.fit(loader) called from another file: walked with self on the device
                cls = self.module_class_values[class_name]
                method = cls.methods.get(method_name)
                if method is None or method.walked:
                    continue
                self.facts.has_local_device = True
                owner = Value(Kind.MODULE, cls.node, name="self", explicit=Place.DEVICE, class_value=cls)
                args, kwargs = self.shaped_args(method.definition, shape, skip_self=True)
                self.function(method, owner, args, kwargs)
                self.note_param_loaders(name, method.definition, args, kwargs, skip_self=True)
                continue
            target = self.global_scope.names.get(name)
            if target is None or target.walked:
                continue
            self.facts.has_local_device = True  # the device lives with the callers: take it from their model
            if target.kind is Kind.FUNCTION:
                args, kwargs = self.shaped_args(target.definition, shape, skip_self=False)
                self.function(target, None, args, kwargs)
                self.note_param_loaders(name, target.definition, args, kwargs, skip_self=False)
            elif target.kind is Kind.CLASS:
                instance = Value(Kind.INSTANCE, target.node, class_value=target, time=self.tick())
                init = target.methods.get("__init__")
                if init is not None and not init.walked:
                    args, kwargs = self.shaped_args(init.definition, shape, skip_self=True)
                    self.function(init, instance, args, kwargs)
                    self.note_param_loaders(name, init.definition, args, kwargs, skip_self=True)
                for method in target.methods.values():
                    if not method.walked:
                        self.function(method, instance, [], {})

    def note_param_loaders(self, name: str, definition: cst.FunctionDef, args: list, kwargs: dict,
                           skip_self: bool) -> None:
        """The loader parameters of a function that callers in other files give a loader."""
        for index, value in enumerate(args):
            if value is not None and value.kind is Kind.LOADER:
                self.facts.param_loaders.append((name, index, value))
        for key, value in kwargs.items():
            if value.kind is Kind.LOADER:
                self.facts.param_loaders.append((name, key, value))

    def shaped_args(self, definition: cst.FunctionDef, shape: CallShape, skip_self: bool) -> tuple[list, dict]:
        """Stand-ins for what the callers pass: a model (on the device, the callers move it), a
        loader, an optimizer, a device. Tensors stay unknown: the callers decide where they are."""
        params = [*definition.params.posonly_params, *definition.params.params]
        if skip_self:
            params = params[1:]
        by_name = {p.name.value: p for p in (*params, *definition.params.kwonly_params)}

        given_by = ", ".join(shape.callers) or None

        def stand_in(kind: Optional[str], param: Optional[cst.Param], stateful: bool) -> Optional[Value]:
            if param is None or kind not in ("module", "loader", "optimizer", "device", "device_tensor"):
                return None
            name = param.name.value
            if kind == "device_tensor":  # a model's output, a moved batch: .numpy() of it needs .cpu()
                return Value(Kind.TENSOR, param.name, name=name, explicit=Place.DEVICE)
            if kind == "module":
                return Value(Kind.MODULE, param.name, name=name, explicit=Place.DEVICE, stateful=stateful, used=True)
            if kind == "device":
                return Value(Kind.DEVICE, param.name, name=name, explicit=Place.DEVICE)
            return Value(Kind.LOADER if kind == "loader" else Kind.OPTIMIZER, param.name, name=name,
                         origin_file=given_by)

        args = [stand_in(kind, params[i] if i < len(params) else None, i in shape.stateful)
                for i, kind in enumerate(shape.positional)]
        kwargs = {name: stand_in(kind, by_name.get(name), name in shape.stateful) for name, kind in shape.keywords}
        return args, {k: v for k, v in kwargs.items() if v is not None}

    def note_constructor_args(self, node: cst.Call, cls: Value, values: list[Optional[Value]]) -> None:
        """The tensors a module class of the file is built with, by ``__init__`` parameter: its
        ``__init__`` is walked once, and ``self.alpha = alpha`` then holds the caller's tensor."""
        init = cls.methods.get("__init__")
        if init is None or init.walked or not isinstance(init.definition, cst.FunctionDef):
            return
        params = init.definition.params
        names = [p.name.value for p in (*params.posonly_params, *params.params)][1:]
        positional = [v for v, a in zip(values, node.args) if a.keyword is None and not a.star]
        for name, value in zip(names, positional):
            if _is_tensorish(value):
                cls.constructor_args.setdefault(name, value)
        for value, arg in zip(values, node.args):
            if arg.keyword is not None and _is_tensorish(value):
                cls.constructor_args.setdefault(arg.keyword.value, value)

    def torch_device(self, node: cst.Call, scope: Scope) -> Value:
        place = Place.DEVICE
        if node.args:
            first = node.args[0].value
            text = _string_value(first)
            if text is not None:
                place = _device_string_place(text) or Place.DEVICE
                if _is_cuda_literal(first) and not self.guard_depth:
                    self.note_hardcoded(Hardcoded(node, "torch-device", self._binding_name(node)))
            else:
                value = self.expr(first, scope)
                if value is not None and value.kind is Kind.DEVICE and value.explicit is not None:
                    place = value.explicit
        return Value(Kind.DEVICE, node, explicit=place, time=self.time)

    def _binding_name(self, node: cst.CSTNode) -> Optional[str]:
        stmt = self.current_stmt
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
            small = stmt.body[0]
            if isinstance(small, cst.Assign) and small.value is node and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Name):
                    return target.value
        return None

    def factory(self, node: cst.Call, qual: str, scope: Scope) -> Optional[Value]:
        values = self.args(node, scope)
        device_arg = _call_kwarg(node, "device")
        if device_arg is not None:
            if _is_cuda_literal(device_arg.value) and not self.guard_depth:
                self.note_hardcoded(Hardcoded(device_arg, "device-kwarg"))
            place, follows = self.device_arg_place(device_arg.value, scope)
            if follows is not None:
                return Value(Kind.TENSOR, node, sources=(follows,), time=self.time)
            return Value(Kind.TENSOR, node, explicit=place or Place.UNKNOWN, time=self.time)
        if qual in api.LIKE_FACTORIES:
            return self.derived(node, values[:1])
        return self.new(Kind.TENSOR, node, scope, origin=Origin.FACTORY)

    def method_call(self, node: cst.Call, func: cst.Attribute, scope: Scope) -> Optional[Value]:
        receiver = self.expr(func.value, scope)
        method = func.attr.value
        if receiver is not None and receiver.kind is Kind.INSTANCE:
            return self.instance_method_call(node, receiver, method, scope)
        if receiver is not None and receiver.kind is Kind.MODULE and receiver.class_value is not None:
            if method in receiver.attrs or method in receiver.class_value.methods:
                return self.instance_method_call(node, receiver, method, scope)
            if method == "register_buffer":
                receiver.class_value.holds_state = True
                return self.register_buffer(node, receiver, scope)
            if method in ("register_parameter", "add_module", "register_module"):
                receiver.class_value.holds_state = True
            if method in api.MOVE_METHODS and self.method_context is not None:
                receiver.class_value.places_itself = True  # self.to(device) / self.cuda() in its own code
        if method in api.MOVE_METHODS and not (receiver is not None and receiver.is_list):
            return self.move(node, func, receiver, method, scope)
        values = self.args(node, scope)
        if receiver is None:
            return None
        if receiver.is_list:
            if method in ("append", "extend", "insert"):
                receiver.sources = (*receiver.sources, *[t for v in values for t in _tensors_of(v)])
            return None
        if receiver.kind is Kind.GENERATOR:
            return receiver if method == "manual_seed" else None  # torch.Generator().manual_seed(0)
        if receiver.kind is Kind.MODULE:
            if method in ("numpy", "tolist", "item") and receiver.loaded_without_map_location:
                self.facts.host_loads.add(id(receiver.node))  # torch.load(f).numpy(): read on the host
                return None
            if method in api.MODULE_SELF_METHODS:
                return receiver
            seeded = self.seeded_class_quals.get(id(receiver.class_value)) if receiver.class_value is not None else None
            if seeded is not None and method not in ("parameters", "named_parameters", "forward", "state_dict",
                                                     "load_state_dict", "modules", "children", "buffers"):
                # net.fit(loader): a method of a module class of another file, walked there with what it is given
                receiver.used = True
                self.facts.uses.append(Use("train", node, self.time, module=receiver))
                self.note_outgoing(f"{seeded}.{method}", node, values)
                return None
            if method in ("parameters", "named_parameters"):
                params = Value(Kind.PARAMS, node, module_of=receiver, time=self.time)
                self._params_seen.append(params)
                return params
            if method == "forward":
                return self.module_call(node, receiver, scope)
            return None
        if receiver.kind in _TENSORISH:
            if method in ("numpy", "item", "tolist"):
                self.note_sync(node, receiver)
            if method == "numpy":
                self.facts.uses.append(Use("numpy", node, self.time, (receiver,)))
                return None
            if method in api.NON_TENSOR_METHODS:
                return None
            self.op(node, [receiver, *values])
            result = self.derived(node, [receiver, *[v for v in values if _is_tensorish(v)]])
            if result is not None and not isinstance(func.value, (cst.Name, cst.Attribute)):
                # A chain on a fresh value: torch.from_numpy(a).float() is moved as a whole.
                root = receiver if receiver.is_root else receiver.chain_root
                result.chain_root = root
            return result
        if receiver.kind is Kind.PARAMS:
            self._params_seen.append(receiver)
        if receiver.kind is Kind.OPTIMIZER and method == "load_state_dict" and receiver.module_of is not None:
            self.facts.uses.append(Use("load-state", node, self.time, module=receiver.module_of))
        return None

    def note_hardcoded(self, found: Hardcoded) -> None:
        found.scope, found.time = self.current_scope, self.time
        self.facts.hardcoded.append(found)

    def note_sync(self, node: cst.CSTNode, value: Optional[Value]) -> None:
        """A copy to the host on every training step (``.item()``, ``.cpu()``, ``print(t)``)."""
        if self.step_depth == 0 and _is_tensorish(value):
            self.facts.uses.append(Use("sync", node, self.time, (value,)))

    def instance_method_call(self, node: cst.Call, receiver: Value, method: str, scope: Scope) -> Optional[Value]:
        """``trainer.fit()``, ``self.model(x)`` on an object of a class of the file."""
        held = receiver.attrs.get(method)
        if held is not None:
            return self.value_call(node, held, scope)
        function = receiver.class_value.methods.get(method) if receiver.class_value is not None else None
        if function is not None:
            return self.value_call(node, function, scope, owner=receiver)
        self.args(node, scope)
        return None

    def move(
        self, node: cst.Call, func: cst.Attribute, receiver: Optional[Value], method: str, scope: Scope
    ) -> Optional[Value]:
        place: Optional[Place]
        follows: Optional[Value] = None
        target: Optional[cst.BaseExpression] = None
        if method in ("to", "cuda") and receiver is not None and receiver.is_parameter \
                and func.value is receiver.node:
            # nn.Parameter(t).to(device): CG112, whatever the device expression says.
            self.args(node, scope)
            in_module = self.method_context is not None
            self.facts.parameter_moves.append((node, in_module))
            return receiver if in_module else Value(Kind.TENSOR, node, explicit=Place.DEVICE, time=self.time)
        if method == "cpu":
            place = Place.CPU
            self.args(node, scope)
        elif method == "cuda":
            place = Place.DEVICE
            if not self.guard_depth:
                fresh = receiver is not None and receiver.origin is Origin.FACTORY and func.value is receiver.node
                literal = not node.args or isinstance(node.args[0].value, cst.Integer)
                self.note_hardcoded(Hardcoded(node, "cuda-call" if literal else "cuda-index",
                                                      on_fresh_factory=fresh))
            self.args(node, scope)
        else:
            place = None
            positional = [a for a in node.args if a.keyword is None]
            device_kw = _call_kwarg(node, "device")
            candidate = device_kw if device_kw is not None else (positional[0] if positional else None)
            if candidate is not None:
                target = candidate.value
                if _is_cuda_literal(target) and not self.guard_depth:
                    self.note_hardcoded(Hardcoded(candidate, "to-string"))
                place, follows = self.device_arg_place(target, scope)
                if place is Place.DEVICE and scope is not self.global_scope \
                        and dotted(target) not in self.global_scope.device_names:
                    # .to(args.device) in main(): the script keeps its device there, not at module level.
                    self.facts.has_local_device = True
            for arg in node.args:
                if arg is not candidate:
                    self.expr(arg.value, scope)
        if receiver is None:
            return None
        if method == "cpu":
            self.note_sync(node, receiver)
        if receiver.kind is Kind.BATCH and receiver.loader is not None and (place is Place.DEVICE or follows):
            receiver.loader.moved_batches = True
        if (
            receiver.origin is Origin.FACTORY
            and func.value is receiver.node
            and method == "to"
            and len(node.args) == 1
            and node.args[0].keyword is None
            and target is not None
            and _string_value(target) is None
            and (place is Place.DEVICE or (follows is not None and follows.kind is Kind.DEVICE))
        ):
            self.facts.create_then_move.append((node, receiver.node))
        if receiver.kind is Kind.MODULE:
            if place is not None:
                receiver.moves.append(Move(self.time, place, node, target))
            elif follows is not None:
                receiver.moves.append(Move(self.time, follows.explicit or Place.DEVICE, node, target))
            return receiver
        if receiver.kind in _TENSORISH:
            if place is not None:
                return Value(Kind.TENSOR, node, explicit=place, time=self.time)
            if follows is not None:
                return Value(Kind.TENSOR, node, sources=(follows,), time=self.time)
            result = self.derived(node, [receiver])
            if result is not None and not isinstance(func.value, (cst.Name, cst.Attribute)):
                result.chain_root = receiver if receiver.is_root else receiver.chain_root
            return result
        return None

    # -- after the walk ------------------------------------------------------------

    def propagate(self) -> None:
        """Mark the roots that the migration must put on the device, to a fixed point."""
        facts = self.facts
        for value in facts.values:
            if value.kind is Kind.MODULE and value.class_value is not None:
                if _places_itself(value.class_value):
                    value.explicit = Place.DEVICE  # its __init__ puts its layers where they go
                elif not _holds_state(value.class_value):
                    value.stateful = False  # only a forward(): like nn.ReLU, nothing to move
        for value in facts.values:
            if value.kind is Kind.MODULE and value.used and value.stateful and not value.escaped:
                facts.bound.add(id(value))
        changed = True
        while changed:
            changed = False
            for use in facts.uses:
                if use.kind == "call" and not use.module.stateful:
                    if not any(facts.place(v) is Place.DEVICE for v in use.values):
                        continue
                    pulled = use.values
                elif use.kind == "call":
                    if facts.module_place(use.module, use.time) is not Place.DEVICE:
                        continue
                    pulled = use.values
                elif use.kind == "op":
                    if not any(facts.place(v) is Place.DEVICE for v in use.values):
                        continue
                    pulled = use.values
                elif use.kind == "index":
                    if not any(facts.place(v) is Place.DEVICE for v in use.values[1:]):
                        continue
                    pulled = use.values[:1]
                else:
                    continue
                for value in pulled:
                    for root in facts.roots(value):
                        if id(root) not in facts.bound:
                            facts.bound.add(id(root))
                            changed = True


def _holds_state(cls: Value) -> bool:
    return cls.holds_state or any(_holds_state(base) for base in cls.stateful_bases)


def _places_itself(cls: Value) -> bool:
    return cls.places_itself or any(_places_itself(base) for base in cls.stateful_bases)


def call_shape(node: cst.Call, values: list[Optional[Value]], facts: Facts) -> CallShape:
    """The kinds of what a call passes, as a function in another file will see them: a tensor
    that is on the device once migrated is a "device_tensor"."""

    def kind_of(value: Optional[Value]) -> Optional[str]:
        if value is None:
            return None
        if value.kind in _TENSORISH:
            return "device_tensor" if facts.place(value) is Place.DEVICE else "tensor"
        kind = value.kind.value
        return kind if kind in CROSSING_KINDS else None

    positional, keywords, stateful = [], [], []
    for value, arg in zip(values, node.args):
        if arg.star:
            break
        if arg.keyword is None:
            if value is not None and value.kind is Kind.MODULE and value.stateful:
                stateful.append(len(positional))
            positional.append(kind_of(value))
        else:
            if value is not None and value.kind is Kind.MODULE and value.stateful:
                stateful.append(arg.keyword.value)
            keywords.append((arg.keyword.value, kind_of(value)))
    return CallShape(tuple(positional), tuple(sorted(keywords)), tuple(stateful))


def analyze(module: cst.Module, pinned: frozenset[int] = frozenset(), seeds: Seeds = NO_SEEDS) -> Facts:
    """The facts of a module. ``pinned``: ids of the nodes that make values the user keeps on the CPU;
    ``seeds``: what the rest of the project says about the names this file imports and its callers."""
    return Analyzer(module, pinned, seeds).run()
