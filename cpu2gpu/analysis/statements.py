"""Statements and control flow: blocks, if/for/while/with/try, assignments, bindings, function bodies.

A part of ``Analyzer`` (see ``analyzer.py``): its methods read and write the one ``Facts``."""

from __future__ import annotations

from typing import Iterable, Optional, Union, cast

import libcst as cst

from . import torchapi as api
from .classdefs import child_nodes, walk
from .facts import Hardcoded, Kind, Origin, Place, Scope, Value
from .imports import dotted

from .parts import AnalysisParts
from .core import (
    CONTAINER_DISPLAYS,
    DEVICE_PARAMETER_NAMES,
    EXPRESSION_ROLE,
    SMALL_STATEMENT_ROLE,
    STATEMENT_ROLE,
    branch_without_gpu,
    is_cuda_literal,
    is_tensorish,
    iterates_batches,
    leaves_block,
    mentions_gpu_guard,
    node_role,
    string_value,
    target_names,
    tensors_of,
)


class StatementWalker(AnalysisParts):
    def block(self, body: Iterable[cst.CSTNode], scope: Scope) -> None:
        guards = 0
        try:
            for stmt in body:
                self.statement(stmt, scope)
                if isinstance(stmt, cst.If) and stmt.orelse is None and leaves_block(stmt.body) \
                        and mentions_gpu_guard(stmt.test):
                    # if not torch.cuda.is_available(): return ... -> what follows runs with a GPU
                    guards += 1
                    self.guard_depth += 1
        finally:
            self.guard_depth -= guards

    def body_of(self, node: cst.BaseSuite) -> Iterable[cst.CSTNode]:
        return node.body

    def statement(self, stmt: cst.CSTNode, scope: Scope) -> None:
        self.stmt_path.append(stmt)
        try:
            self.statement_at(stmt, scope)
        finally:
            self.stmt_path.pop()

    def statement_at(self, stmt: cst.CSTNode, scope: Scope) -> None:
        self.current_scope = scope
        kind = type(stmt)
        # Dispatched on the exact type (no isinstance on this path): each branch names the node's type.
        if kind is cst.SimpleStatementLine:
            for small in cast(cst.SimpleStatementLine, stmt).body:
                self.current_stmt = stmt
                self.small(small, stmt, scope)
        elif node_role(kind) is SMALL_STATEMENT_ROLE:  # the body of `if x: a = 1` on one line
            self.small(cast(cst.BaseSmallStatement, stmt), stmt, scope)
        elif kind is cst.If:
            self.if_statement(cast(cst.If, stmt), scope)
        elif kind is cst.For:
            self.for_statement(cast(cst.For, stmt), scope)
        elif kind is cst.While:
            loop = cast(cst.While, stmt)
            self.expr(loop.test, scope)
            self.guarded_block(loop.body, scope, mentions_gpu_guard(loop.test))
            if loop.orelse is not None:
                self.block(self.body_of(loop.orelse.body), scope)
        elif kind is cst.With:
            with_stmt = cast(cst.With, stmt)
            for item in with_stmt.items:
                value = self.expr(item.item, scope)
                if item.asname is not None:
                    self.bind(item.asname.name, value if is_tensorish(value) else None, stmt, None, scope)
            self.block(self.body_of(with_stmt.body), scope)
        elif isinstance(stmt, cst.Try) or isinstance(stmt, getattr(cst, "TryStar", cst.Try)):
            try_stmt = cast(cst.Try, stmt)  # or a TryStar: the same fields
            self.block(self.body_of(try_stmt.body), scope)
            for handler in try_stmt.handlers:
                self.block(self.body_of(handler.body), scope)
            if try_stmt.orelse is not None:
                self.block(self.body_of(try_stmt.orelse.body), scope)
            if try_stmt.finalbody is not None:
                self.block(self.body_of(try_stmt.finalbody.body), scope)
        elif kind is cst.FunctionDef:
            func = cast(cst.FunctionDef, stmt)
            function = Value(Kind.FUNCTION, func, name=func.name.value, definition=func, def_scope=scope)
            scope.names[func.name.value] = function
            self.deferred.append((function, None))
        elif kind is cst.ClassDef:
            self.class_def(cast(cst.ClassDef, stmt), scope)
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
        guarded = mentions_gpu_guard(stmt.test)
        # self.x set in both branches of a method's `if` joins like a name does.
        owner = scope.owner if scope.owner is not None and scope.owner.kind in (Kind.MODULE, Kind.INSTANCE) else None
        before = dict(scope.names)
        attrs_before = dict(owner.attrs) if owner is not None else {}
        host_branch = branch_without_gpu(stmt.test) if guarded else None
        self.host_depth += host_branch == "body"
        try:
            self.guarded_block(stmt.body, scope, guarded)
        finally:
            self.host_depth -= host_branch == "body"
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
            self.host_depth += host_branch == "orelse"
            try:
                self.guarded_block(stmt.orelse.body, scope, guarded)
            finally:
                self.host_depth -= host_branch == "orelse"
        scope.names = self.merge(before, after_body, scope.names)
        if owner is not None:
            owner.attrs = self.merge(attrs_before, attrs_after_body, owner.attrs)

    def merge(self, before: dict[str, Optional[Value]], left: dict[str, Optional[Value]],
              right: dict[str, Optional[Value]]) -> dict[str, Optional[Value]]:
        """Join the names two branches bound: the same value stays, two devices join."""
        merged = dict(before)
        for name in set(left) | set(right):
            a, b = left.get(name), right.get(name)
            if (name in left) != (name in right) and name not in before:
                # bound in one branch only (if/elif without else): where it is read, that branch ran
                merged[name] = a if name in left else b
            elif a is b:
                merged[name] = a
            elif a is not None and b is not None and a.kind is b.kind is Kind.DEVICE:
                # if cuda: device = cuda else: device = cpu -> a device that can be the GPU
                can_be_gpu = Place.DEVICE in (self.facts.place(a), self.facts.place(b))
                merged[name] = Value(Kind.DEVICE, a.node, name=name,
                                     explicit=Place.DEVICE if can_be_gpu else Place.CPU)
            elif a is not None and b is not None and a.kind is b.kind is Kind.MODULE:
                # if args.arch == "a": net = A() else: net = B(): whichever runs is moved
                merged[name] = a
                if b not in a.alternatives and b is not a:
                    a.alternatives.append(b)
            elif a is not None and b is not None and a.kind is b.kind is Kind.LOADER:
                merged[name] = a  # train_loader or test_loader: either yields batches
            elif is_tensorish(a) and is_tensorish(b) and a.explicit is None and b.explicit is None:
                # if ...: mask = torch.ones(n) else: mask = torch.zeros(n): either is read below
                merged[name] = Value(Kind.TENSOR, a.node, sources=(a, b), time=self.time)
            elif (only := b if a is None else a if b is None else None) is not None \
                    and only.kind in (Kind.LOADER, Kind.MODULE):
                # self.model = None; if ...: self.model = Net(): a model wherever it is called, a loader
                # wherever it is iterated (their moves land where they are made, never on the name)
                merged[name] = only
            else:
                merged[name] = None
        return merged

    def for_statement(self, stmt: cst.For, scope: Scope) -> None:
        pairs = self.loop_targets(stmt.target, stmt.iter, scope)
        is_training_loop = False
        for target, source in pairs:
            if source is not None and (source.kind is Kind.LOADER
                                       or source.kind is Kind.DATASET and source.context != "mnist"):
                # for x, y in loader / in a TensorDataset: each step's tensors
                is_training_loop = True
                self.bind_loop_variables(target, stmt, scope, source)
            elif source is not None and source.kind is Kind.MODULE and (source.is_list or source.is_container) \
                    and isinstance(target, cst.Name):
                self.bind(target, source, stmt, None, scope)  # for net in nets / block in self.blocks
            elif source is None and _given_iterable(stmt.iter, scope) \
                    or source is not None and source.kind is Kind.INSTANCE and iterates_batches(source.class_value):
                # for x, y in batches: a parameter the callers' files leave unknown (a loader handed back by
                # a function of another file, in a tuple): its items are the step's batches, moved where
                # they meet a device module, as a loader's are.
                self.bind_loop_variables(target, stmt, scope, None)
            elif tensors_of(source):
                # for xb in torch.split(x, 10): the pieces of tensors are tensors from the same sources.
                for name in target_names(target):
                    self.bind(cst.Name(name), self.derived(stmt.iter, tensors_of(source)), stmt, None, scope)
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

    def bind_loop_variables(self, target: cst.BaseExpression, loop: cst.For, scope: Scope,
                            loader: Optional[Value]) -> None:
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
                          time=self.tick(), loader=loader,
                          explicit=Place.DEVICE if loader is not None and loader.batches_on_device else None)
            self.facts.values.append(value)
            self.bind(name, value, loop, None, scope)

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
            function.walk_params[name] = value
            if (name in DEVICE_PARAMETER_NAMES and value is None) or (value is not None and value.kind is Kind.DEVICE):
                scope.device_names.append(name)  # train(model, device, loader): the caller's device
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                scope.names[star.name.value] = None
                self.facts.names_in_use.add(star.name.value)
        context: Optional[tuple[cst.FunctionDef, Optional[str]]] = None
        if owner is not None and owner.kind is Kind.MODULE:
            context = (node, None)
            if node.name.value == "forward" and len(positional) > 1 and not args:
                # The data a module is called with is on the device once migrated: the first
                # input, and the other inputs without a default (flags and options have one).
                first = positional[1].name.value
                cpu_inputs = owner.class_value.cpu_inputs if owner.class_value is not None else frozenset()
                mappings = _mapping_params(node)
                for param in positional[1:]:
                    name = param.name.value
                    if name in cpu_inputs or name in mappings:
                        continue  # pack_padded_sequence's lengths: on the CPU; a dict of tensors has no device
                    if scope.names.get(name) is None and (param is positional[1] or param.default is None):
                        scope.names[name] = Value(Kind.TENSOR, param, name=name, explicit=Place.DEVICE)
                context = (node, None if first in mappings else first)
        function_input = None
        if context is None:
            # A plain function handed tensors (a custom loss, a mask helper): what it makes
            # follows its input's device, so it stays right wherever it is called from.
            function_input = next(((n, v) for n, v in scope.names.items()
                                   if n in scope.params and is_tensorish(v)), None)
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
            assign = cast(cst.Assign, node)
            if (
                len(assign.targets) == 1
                and isinstance(assign.targets[0].target, (cst.Tuple, cst.List))
                and isinstance(assign.value, (cst.Tuple, cst.List))
                and len(assign.targets[0].target.elements) == len(assign.value.elements)
                and not any(isinstance(e, cst.StarredElement) for e in assign.value.elements)
            ):
                # a, b = a.to(device), b.to(device): bind pairwise.
                for target_el, value_el in zip(assign.targets[0].target.elements, assign.value.elements):
                    value = self.expr(value_el.value, scope)
                    self.bind(target_el.value, value, stmt, value_el.value, scope)
                return
            if self.unpack_mapped_tensors(assign, stmt, scope):
                return
            if self.imports.add_dynamic(assign):
                self.facts.names_in_use.add(cast(cst.Name, assign.targets[0].target).value)
                return  # x.Model(...) is then read through the import table, as after `import models.cnn as x`
            value = self.expr(assign.value, scope)
            if value is not None and value.kind is Kind.BATCH and self.unpack_batch(assign, value, stmt, scope):
                return
            if value is not None and value.kind is Kind.TUPLE and len(assign.targets) == 1:
                target = assign.targets[0].target
                if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == len(value.elements):
                    # model, optimizer = build(): what the function returned, element by element
                    for element, returned in zip(target.elements, value.elements):
                        self.bind(element.value, returned, stmt, None, scope)
                    return
            if value is not None and value.output_of is not None and len(assign.targets) == 1 \
                    and isinstance(assign.targets[0].target, (cst.Tuple, cst.List)):
                # features, logits = net(x): every output of a module is where the module is.
                for element in assign.targets[0].target.elements:
                    part = Value(Kind.TENSOR, element.value, output_of=value.output_of, sources=value.sources,
                                 time=value.time)
                    self.bind(element.value, part, stmt, None, scope)
                return
            if is_tensorish(value) and len(assign.targets) == 1 \
                    and isinstance(assign.targets[0].target, (cst.Tuple, cst.List)):
                # _, predicted = torch.max(out, 1) / h, c = hidden: each part is where the whole is.
                for element in assign.targets[0].target.elements:
                    self.bind(element.value, self.derived(element.value, [value]), stmt, None, scope)
                return
            for assign_target in assign.targets:
                self.bind(assign_target.target, value, stmt, assign.value, scope)
            self.note_device_string(assign, stmt)
        elif kind is cst.AnnAssign:
            ann = cast(cst.AnnAssign, node)
            value = self.expr(ann.value, scope) if ann.value is not None else None
            if ann.value is not None:
                self.bind(ann.target, value, stmt, ann.value, scope)
        elif kind is cst.AugAssign:
            aug = cast(cst.AugAssign, node)
            left = self.expr(aug.target, scope)
            right = self.expr(aug.value, scope)
            self.op(aug, [left, right])
        elif kind is cst.Expr:
            expr_stmt = cast(cst.Expr, node)
            value = self.expr(expr_stmt.value, scope)
            self.discarded_move(expr_stmt, value, stmt, scope)
        elif kind is cst.Return:
            ret = cast(cst.Return, node)
            if isinstance(ret.value, cst.Tuple) and not any(isinstance(e, cst.StarredElement) for e in ret.value.elements):
                elements = tuple(self.expr(e.value, scope) for e in ret.value.elements)
                value = Value(Kind.TUPLE, ret.value, elements=elements, time=self.time)
            else:
                value = self.expr(ret.value, scope) if ret.value is not None else None
            if self.walking_deferred:
                # Returned to a caller outside this file: where it goes from here is not known.
                for returned in (value.elements if value is not None and value.kind is Kind.TUPLE else (value,)):
                    if returned is not None and returned.kind is Kind.MODULE:
                        returned.escaped = True
            self.note_method_result(value)
            if value is not None and value.is_root and value.fix_node is None and value.node is ret.value:
                # def build(): return Net() -> moved where it is made, so every caller gets it moved.
                value.fix_node = ret.value
            if self.returns:
                self.returns[-1].append(value)
        elif kind is cst.Import or kind is cst.ImportFrom:
            imp = cast(Union[cst.Import, cst.ImportFrom], node)
            self.imports.add(imp)
            for alias in imp.names if not isinstance(imp.names, cst.ImportStar) else ():
                local = alias.evaluated_alias or alias.evaluated_name
                self.facts.names_in_use.add(local.split(".", 1)[0])
                if kind is cst.ImportFrom and isinstance(alias.asname.name if alias.asname else alias.name, cst.Name):
                    self.import_device(cast(cst.Name, alias.asname.name if alias.asname else alias.name), stmt, scope)
        else:
            self.generic(node, scope)

    def note_method_result(self, value: Optional[Value]) -> None:
        """``def init_hidden(self, n): return torch.zeros(...)`` in a module's class: what a module's method
        makes and hands back is made for the module (its callers, maybe in other files, feed it back)."""
        method = self.method_context[0] if self.method_context is not None else None
        if method is None or method.name.value == "__init__" or id(method) not in self.facts.method_classes:
            return
        for returned in (value.elements if value is not None and value.kind is Kind.TUPLE else (value,)):
            roots = self.facts.roots(returned) if returned is not None and returned.kind is Kind.TENSOR else []
            if roots and all(r.origin is Origin.FACTORY and r.method is method for r in roots):
                self.facts.method_results.extend(roots)

    def import_device(self, name: cst.Name, stmt: cst.CSTNode, scope: Scope) -> None:
        """``from seq2seq import device``: the project's device variable, reused here (never a second one)."""
        exported = self.seeds.imported.get(self.imports.names.get(name.value, ""))
        if exported is not None and exported.kind == "value" and exported.returns == "device":
            self.bind(name, Value(Kind.DEVICE, name, explicit=Place.DEVICE, time=self.time), stmt, None, scope)

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
                             loader=batch.loader, binding_stmt=stmt, origin_file=batch.origin_file)
            self.bind(name, value, stmt, None, scope)
        return True

    def unpack_mapped_tensors(self, node: cst.Assign, stmt: cst.CSTNode, scope: Scope) -> bool:
        """``x, y = map(torch.LongTensor, zip(*batch))``: each name is a tensor made on the CPU, moved after
        this line like the parts of a batch. (Only when unpacked: the map object itself has no ``.to()``.)"""
        call = node.value
        if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "map"
                and not scope.has("map") and len(call.args) >= 2 and not any(a.star or a.keyword for a in call.args)
                and len(node.targets) == 1 and isinstance(node.targets[0].target, (cst.Tuple, cst.List))):
            return False
        maker = self.imports.resolve(call.args[0].value)
        if maker not in api.CONVERSIONS and maker not in ("torch.tensor", "torch.as_tensor"):
            return False
        for arg in call.args[1:]:
            self.expr(arg.value, scope)
        made = self.new(Kind.BATCH, call, scope, origin=Origin.UNPACK,
                        origin_file=f"`map({dotted(call.args[0].value)}, ...)`")  # named in CG103's message
        return self.unpack_batch(node, made, stmt, scope)

    def batch_from(self, node: cst.CSTNode, loader: Optional[Value], scope: Scope) -> Value:
        """A batch read out of a loader or a batch: ``next(iter(loader))``, ``data[0]``."""
        return self.new(Kind.BATCH, node, scope, origin=Origin.UNPACK, loader=loader)

    def note_device_string(self, node: cst.Assign, stmt: cst.CSTNode) -> None:
        """``device = "cuda"`` with no fallback."""
        if self.guard_depth or not is_cuda_literal(node.value):
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
        if not is_tensorish(receiver) or value is None:
            return
        self.facts.discarded_moves.append(node)
        self.bind(call.func.value, value, stmt, call, scope)

    def generic(self, node: cst.CSTNode, scope: Scope) -> None:
        """Walk the children of a node the analysis has no special reading for (in field order,
        which for these nodes is their order in the source)."""
        for child in child_nodes(node):
            role = node_role(type(child))
            if role is EXPRESSION_ROLE:
                self.expr(cast(cst.BaseExpression, child), scope)
            elif role is STATEMENT_ROLE:
                self.statement(child, scope)
            elif role is SMALL_STATEMENT_ROLE:
                self.small(cast(cst.BaseSmallStatement, child), self.current_stmt or child, scope)
            else:
                self.generic(child, scope)

    def bind(
        self,
        target: cst.BaseExpression,
        value: Optional[Value],
        stmt: cst.CSTNode,
        value_node: Optional[cst.BaseExpression],
        scope: Scope,
    ) -> None:
        key: Optional[str]
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
            if base is not None and base.kind is Kind.MODULE and value is not None and value.kind is Kind.MODULE:
                self.note_structure_change(base)  # model.fc = nn.Linear(...) on an nn.Sequential()
                if value.is_root and value is not base:
                    # model_conv.fc = nn.Linear(n, 2): a layer of the model from now on, moved with it
                    value.attached_to = base
                    if base not in value.alternatives:
                        value.alternatives.append(base)
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
        if value is not None and value.kind is Kind.DEVICE:
            self.facts.device_name_bindings[key] = self.facts.device_name_bindings.get(key, 0) + 1
            if isinstance(target, cst.Name) and "device" in key.lower() and "cpu" not in key.lower() \
                    and value.explicit is Place.CPU and value_node is not None \
                    and _is_cpu_device_literal(value_node) and scope.device_binding() is None:
                # device = torch.device("cpu"): the script's one device, made the GPU by the migration (CG205)
                self.facts.cpu_device_literals.append((key, value_node, scope))
                value = Value(Kind.DEVICE, value.node, explicit=Place.DEVICE, time=value.time, cpu_literal=True)
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
        elif value.kind is Kind.TENSOR and value.node is value_node and not value.is_root \
                and type(value_node) not in CONTAINER_DISPLAYS:
            # test_x = torch.unsqueeze(ds.test_data, 1).type(torch.FloatTensor)[:2000] / 255.: the data
            # read inside is moved with the whole expression, after its casts and scaling. (Not a list,
            # tuple, set or dict of tensors, or a comprehension: a list has no .to(); its elements are
            # moved where they are made.)
            roots = self.facts.roots(value)
            if len(roots) == 1 and roots[0].origin is Origin.CONVERSION and roots[0].fix_node is None \
                    and roots[0].name is None:
                roots[0].fix_node = value_node
        if value.kind is Kind.DEVICE and self.facts.place(value) is Place.DEVICE:
            if scope is not self.global_scope:
                self.facts.has_local_device = True
                self.facts.authors_local_device = True
            if key not in scope.device_names:
                scope.device_names.append(key)
                scope.device_bindings[key] = (self.time, self.top_stmt if scope is self.global_scope else stmt)

    def note_structure_change(self, module: Value) -> None:
        """``model.add_module(...)`` / ``model.fc = layer`` after ``model = nn.Sequential()``: the move
        goes after the last change, in the block where the model is built (else none can be placed)."""
        if module.built_path is None:
            return
        depth = len(module.built_path)
        path = self.stmt_path
        if len(path) >= depth and tuple(id(s) for s in path[:depth - 1]) == module.built_path[:-1]:
            module.last_change_stmt = path[depth - 1]
        else:
            module.changed_elsewhere = True


def _is_cpu_device_literal(node: cst.CSTNode) -> bool:
    """``"cpu"`` or ``torch.device("cpu")``."""
    if type(node) is cst.Call and len(node.args) == 1 and node.args[0].keyword is None \
            and (dotted(node.func) or "").endswith("device"):
        node = node.args[0].value
    text = string_value(node)
    return text is not None and text.strip().lower() == "cpu"


def _given_iterable(iterable: cst.BaseExpression, scope: Scope) -> bool:
    """A parameter of the function being walked that nothing is known of (not a default, not a kind)."""
    return isinstance(iterable, cst.Name) and iterable.value in (scope.params or ()) \
        and scope.names.get(iterable.value) is None


_MAPPING_METHODS = frozenset({"items", "keys", "values", "get"})


def _mapping_params(function: cst.FunctionDef) -> frozenset:
    """The parameters the function reads as a mapping (``batch["x"]``, ``batch.items()``): no tensor, so no
    ``batch.device`` to make its tensors on (it would raise on the CPU too)."""
    found = set()
    for node in walk(function.body):
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and any(
                isinstance(e.slice, cst.Index) and isinstance(e.slice.value, (cst.SimpleString, cst.ConcatenatedString))
                for e in node.slice):
            found.add(node.value.value)
        elif (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
              and node.attr.value in _MAPPING_METHODS):
            found.add(node.value.value)
    return frozenset(found)
