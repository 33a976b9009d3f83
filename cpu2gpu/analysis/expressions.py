"""Expressions: what each one may hold, calls of values of the file, where values meet.

A part of ``Analyzer`` (see ``analyzer.py``): its methods read and write the one ``Facts``."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Union, cast

import libcst as cst

from . import torchapi as api
from .facts import Kind, Origin, Place, Scope, Use, Value
from .imports import dotted
from .seeds import Exported

from .parts import AnalysisParts
from .core import (
    TENSORISH_KINDS,
    branch_without_gpu,
    device_string_place,
    is_built_module,
    is_tensorish,
    keyword_arg,
    mentions_gpu_guard,
    plain_args,
    string_value,
    target_names,
    tensors_of,
)


class ExpressionEvaluator(AnalysisParts):
    def tick(self) -> int:
        self.time += 1
        return self.time

    def new(self, kind: Kind, node: cst.CSTNode, scope: Optional[Scope] = None, **fields) -> Value:
        value = Value(kind, node, time=self.time, scope=scope, **fields)
        if kind is Kind.BATCH and value.loader is not None and value.loader.batches_on_device:
            value.explicit = Place.DEVICE  # its collate_fn moved it
        if kind is Kind.MODULE:
            value.built_path = tuple(id(s) for s in self.stmt_path)
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
        found = tuple(s for s in sources if s is not None and s.kind in (*TENSORISH_KINDS, Kind.DEVICE))
        if not found:
            return None
        return Value(Kind.TENSOR, node, sources=found, time=self.time)

    def op(self, node: cst.CSTNode, values: Iterable[Optional[Value]],
           operands: Optional[Sequence[cst.CSTNode]] = None, scope: Optional[Scope] = None) -> None:
        """Tensors meet in ``node``. ``operands`` are their expressions, where each is one tensor."""
        values = list(values)
        tensors = tuple(t for v in values for t in tensors_of(v))
        if len(tensors) < 2 or self.host_depth:
            return  # (in the branch of a GPU check that runs without one, nothing meets the device)
        arg_nodes: tuple[cst.CSTNode, ...] = ()
        if operands is not None and len(operands) == len(values) and all(is_tensorish(v) or v is None for v in values):
            pairs = [(v, n) for v, n in zip(values, operands) if v is not None]
            tensors = tuple(v for v, _ in pairs)
            arg_nodes = tuple(n for _, n in pairs)
        self.facts.uses.append(Use("op", node, self.time, tensors, arg_nodes=arg_nodes, scope=scope))

    def expr(self, node: Optional[cst.BaseExpression], scope: Scope) -> Optional[Value]:
        if node is None:
            return None
        kind = type(node)  # exact types: isinstance on libcst's classes goes through ABCMeta, and is slow here
        # Each branch names the node's exact type for the type checker (a cast: no check at run time).
        if kind is cst.Name:
            name = cast(cst.Name, node).value
            self.facts.names_in_use.add(name)
            value = scope.lookup(name)
            if value is not None and value.origin is Origin.COMPREHENSION:
                value.use_nodes.append(node)
            return value
        if kind is cst.Attribute:
            return self.attribute(cast(cst.Attribute, node), scope)
        if kind is cst.Call:
            return self.call(cast(cst.Call, node), scope)
        if kind is cst.BinaryOperation:
            binary = cast(cst.BinaryOperation, node)
            left = self.expr(binary.left, scope)
            right = self.expr(binary.right, scope)
            self.op(node, [left, right], [binary.left, binary.right], scope)
            return self.derived(node, [left, right])
        if kind is cst.Comparison:
            comparison = cast(cst.Comparison, node)
            values = [self.expr(comparison.left, scope)]
            values += [self.expr(c.comparator, scope) for c in comparison.comparisons]
            self.op(node, values, [comparison.left, *[c.comparator for c in comparison.comparisons]], scope)
            return self.derived(node, values)
        if kind is cst.UnaryOperation:
            return self.derived(node, [self.expr(cast(cst.UnaryOperation, node).expression, scope)])
        if kind is cst.Subscript:
            return self.subscript(cast(cst.Subscript, node), scope)
        if kind is cst.SimpleString:
            text = string_value(node)
            place = device_string_place(text) if text is not None else None
            return Value(Kind.DEVICE, node, explicit=place) if place is not None else None
        if kind is cst.IfExp:
            choice = cast(cst.IfExp, node)
            self.expr(choice.test, scope)
            guarded = mentions_gpu_guard(choice.test)
            host_branch = branch_without_gpu(choice.test) if guarded else None
            self.guard_depth += guarded
            self.host_depth += host_branch == "body"
            try:
                body = self.expr(choice.body, scope)
            finally:
                self.guard_depth -= guarded
                self.host_depth -= host_branch == "body"
            self.host_depth += host_branch == "orelse"
            try:
                orelse = self.expr(choice.orelse, scope)
            finally:
                self.host_depth -= host_branch == "orelse"
            if guarded and self.tensor_type_choice(choice):
                # FloatTensor = torch.cuda.FloatTensor if use_cuda else torch.FloatTensor: a type that
                # builds (and .type() moves) tensors on the GPU when there is one
                self.facts.places_on_device = True
                return Value(Kind.DEVICE, node, explicit=Place.DEVICE, tensor_type=True, time=self.time)
            if body is not None and orelse is not None and body.kind is orelse.kind is Kind.DEVICE:
                places = {self.facts.place(body), self.facts.place(orelse)}
                return Value(Kind.DEVICE, node, explicit=Place.DEVICE if Place.DEVICE in places else Place.CPU)
            return body if body is orelse else None
        if kind is cst.List and not cast(cst.List, node).elements:
            # outputs = [] ... outputs.append(logits): a list that holds what is appended to it.
            return Value(Kind.TENSOR, node, time=self.time, is_list=True)
        if kind in (cst.Tuple, cst.List):
            values = [self.expr(e.value, scope) for e in cast(Union[cst.Tuple, cst.List], node).elements]
            if values and all(is_built_module(v) for v in values) and self.method_context is None:
                return self.module_group(node, cast("list[Value]", values))  # nets = [Net(), Net()]: none is None
            return self.derived(node, [v for v in values if is_tensorish(v)])
        if kind in (cst.ListComp, cst.GeneratorExp, cst.SetComp):
            return self.comprehension(cast(Union[cst.ListComp, cst.GeneratorExp, cst.SetComp], node), scope)
        if kind is cst.Lambda:
            self.generic(node, Scope(scope))
            # crit = lambda out, y: ((out - y) ** 2).mean(): read again at each call, with its arguments
            return Value(Kind.FUNCTION, node, definition=node, def_scope=scope, time=self.time)
        if kind is cst.DictComp:
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

    def comprehension(self, node: Union[cst.ListComp, cst.GeneratorExp, cst.SetComp], scope: Scope) -> Optional[Value]:
        """``[h.detach() for h in hidden]``: the elements of tensors are tensors, so is the result."""
        inner = Scope(scope)
        clause: Optional[cst.CompFor] = node.for_in
        while clause is not None:
            iterable = self.expr(clause.iter, inner)
            element = self.derived(clause.iter, tensors_of(iterable))
            for name in target_names(clause.target):
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
        if is_built_module(value) and self.method_context is None:  # (in a module: its layers, see CG109)
            return self.module_group(node, [value])  # [Net() for _ in range(k)]
        return self.derived(node, [value]) if is_tensorish(value) else None

    def module_group(self, node: cst.CSTNode, modules: list[Value]) -> Value:
        """A Python list of models: one that is called stands for all of them, and each is moved where
        it is built. The group itself is never moved (``explicit``): its members are."""
        group = Value(Kind.MODULE, node, explicit=Place.DEVICE, is_list=True, alternatives=list(modules),
                      time=self.time)
        self.facts.values.append(group)
        return group

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
        if base.kind is Kind.DATASET:
            if base.context != "mnist" and attr == "tensors":
                return self.batch_from(node, base, scope)  # x, y = ds.tensors: the data set's own tensors
            if base.context == "mnist" and attr in api.MNIST_TENSOR_ATTRIBUTES:
                # ds.test_data: a CPU tensor, moved where the expression that reads it is bound
                return self.new(Kind.TENSOR, node, scope, origin=Origin.CONVERSION)
            return None
        if base.kind is Kind.INSTANCE or base.kind is Kind.MODULE and base.class_value is not None:
            return base.attrs.get(attr)
        if base.kind is Kind.MODULE and base.is_container and attr not in api.MODULE_METHODS:
            return base  # self.transformer.h: layers of the container, where it is
        if base.kind is Kind.MODULE and attr in ("weight", "bias") and base.stateful:
            # model.weight of a torch.nn layer: a parameter, wherever the module is.
            return Value(Kind.TENSOR, node, output_of=(base, self.time), time=self.time)
        if base.kind is Kind.DEVICE and attr == "type":
            return base  # torch.accelerator.current_accelerator().type: "cuda", "mps"...
        if base.kind in TENSORISH_KINDS:
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
        if base is not None and base.kind is Kind.MODULE and (base.is_list or base.is_container):
            return base  # nets[i] / self.layers[i]: one of the group, of the container
        if base is not None and base.kind is Kind.DATASET and base.context != "mnist":
            return self.batch_from(node, base, scope)  # x, y = test_ds[i]
        if base is not None and base.kind is Kind.BATCH:
            return self.derived(node, [base])  # inputs[:, :-1]: part of the batch, where the batch is
        if base is None or base.kind is not Kind.TENSOR:
            return None
        tensor_indices = [i for i in indices if is_tensorish(i)]
        if tensor_indices:
            self.facts.uses.append(Use("index", node, self.time, (base, *tensor_indices)))
        return self.derived(node, [base])

    def device_arg_place(self, node: cst.BaseExpression, scope: Scope) -> tuple[Optional[Place], Optional[Value]]:
        """Where ``.to(node)`` or ``device=node`` puts a value: (place, value it follows)."""
        place, follows = self.device_arg_reading(node, scope)
        if place is Place.DEVICE or follows is not None and follows.kind is Kind.DEVICE and not follows.cpu_literal:
            self.facts.places_on_device = True  # the script places values on the GPU itself
        return place, follows

    def device_arg_reading(self, node: cst.BaseExpression, scope: Scope) -> tuple[Optional[Place], Optional[Value]]:
        text = string_value(node)
        if text is not None:
            return device_string_place(text), None
        qual = self.imports.resolve(node)
        if qual is not None and api.is_dtype(qual):
            return None, None
        if isinstance(node, cst.Integer):
            return Place.DEVICE, None
        value = self.expr(node, scope)
        if value is not None and value.kind is Kind.DEVICE:
            if value.cpu_literal:
                return None, value  # device = torch.device("cpu"), which the migration makes the GPU
            if value.explicit is not None:
                return value.explicit, None
            return None, value
        if value is not None and value.kind in TENSORISH_KINDS:
            return None, value
        if isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.IfExp)):
            # args.device, a device parameter, get_device(): a device chosen elsewhere.
            return Place.DEVICE, None
        return None, None

    def call(self, node: cst.Call, scope: Scope) -> Optional[Value]:
        result = self.plain_call(node, scope)
        generator = keyword_arg(node, "generator")
        if generator is not None and is_tensorish(result) and isinstance(generator.value, (cst.Name, cst.Attribute)):
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
                if func.value == "list" and not node.args:
                    return Value(Kind.TENSOR, node, time=self.time, is_list=True)  # acc = list(), as []
                if func.value in ("tuple", "list", "reversed", "sorted") and len(values) == 1:
                    return self.derived(node, tensors_of(first))  # the same tensors in a new container
                return None
            return self.qualified_call(node, qual, scope)
        if type(func) is cst.Subscript:
            # MODELS[name](): a dict of module classes kept in another project file
            key = dotted(func.value)
            qual = self.imports.resolve(func.value) if key is not None and not scope.has(key.split(".", 1)[0]) else None
            exported = self.seeds.imported.get(qual) if qual is not None else None
            if qual is not None and exported is not None and exported.kind == "registry":
                for element in func.slice:  # the key is read like any expression (args[...])
                    if isinstance(element.slice, cst.Index):
                        self.expr(element.slice.value, scope)
                return self.project_call(node, qual, exported, scope)
        if type(func) is cst.Call:
            chosen = self.chosen_by_name(func, scope)
            if chosen is not None:
                return self.project_call(node, *chosen, scope)
        callee = self.expr(func, scope)
        if callee is not None:
            return self.value_call(node, callee, scope)
        self.args(node, scope)
        return None

    def chosen_by_name(self, func: cst.Call, scope: Scope) -> Optional[tuple[str, Exported]]:
        """``getattr(models, args.arch)`` where ``models`` is a project module whose classes and functions all
        make modules: whichever the run picks is a model. (One that makes anything else: nothing is told.)"""
        if not (type(func.func) is cst.Name and func.func.value == "getattr" and not scope.has("getattr")
                and len(func.args) >= 2 and not any(a.keyword or a.star for a in func.args)):
            return None
        base = dotted(func.args[0].value)
        qual = self.imports.resolve(func.args[0].value) if base and not scope.has(base.split(".", 1)[0]) else None
        if qual is None:
            return None
        callables = [e for key, e in self.seeds.imported.items()
                     if key.startswith(qual + ".") and "." not in key[len(qual) + 1:]
                     and e.kind in ("module_class", "class", "function", "registry")]
        if not callables or not all(e.kind == "module_class" or e.kind == "function" and e.returns == "module"
                                    for e in callables):
            return None
        self.expr(func.args[1].value, scope)
        return f"{qual}.*", Exported("registry", callables[0].file, qual,
                                     holds_state=all(e.holds_state for e in callables))

    def value_call(self, node: cst.Call, callee: Value, scope: Scope, owner: Optional[Value] = None,
                   receiver: Optional[Value] = None) -> Optional[Value]:
        """``receiver``: the model a method is called on, when ``owner`` is its class's ``self``."""
        if callee.kind is Kind.MODULE:
            return self.module_call(node, callee, scope)
        values = self.args(node, scope)
        positional = [v for v, a in zip(values, node.args) if a.keyword is None and not a.star]
        keywords = {a.keyword.value: v for v, a in zip(values, node.args) if a.keyword is not None}
        if callee.kind is Kind.DEVICE and callee.tensor_type:
            return Value(Kind.TENSOR, node, explicit=Place.DEVICE, time=self.time)  # FloatTensor([reward])
        if callee.kind is Kind.FUNCTION and type(callee.definition) is cst.Lambda:
            # a lambda's value always has the scope it is defined in (``expr``)
            return self.lambda_call(callee.definition, cast(Scope, callee.def_scope), positional, keywords)
        if callee.kind is Kind.FUNCTION:
            called_on = receiver or owner
            if called_on is not None and called_on.kind is Kind.MODULE and called_on.stateful \
                    and called_on.name != "self":
                # model.decode(z): the tensors go into the module as in a call of it.
                called_on.used = True
                pairs = [(t, a.value) for v, a in zip(values, node.args) for t in tensors_of(v)]
                if pairs:
                    self.facts.uses.append(Use("call", node, self.time, tuple(v for v, _ in pairs),
                                               tuple(n for _, n in pairs), module=called_on))
            if callee.walked:
                self.link_to_first_call(node, callee, positional, keywords, owner)
                return self.another_result(node, callee, scope)
            return self.function(callee, owner, positional, keywords)
        if callee.kind is Kind.CLASS:
            instance = Value(Kind.INSTANCE, node, class_value=callee, time=self.time)
            init = callee.methods.get("__init__")
            if init is not None and not init.walked:
                self.function(init, instance, positional, keywords)
            return instance
        return None

    def tensor_type_choice(self, node: cst.IfExp) -> bool:
        quals = {self.imports.resolve(node.body), self.imports.resolve(node.orelse)}
        return any(q is not None and q.startswith("torch.cuda.") and q.endswith("Tensor") for q in quals) \
            and any(q is not None and q.count(".") == 1 and q.endswith("Tensor") for q in quals)

    def lambda_call(self, definition: cst.Lambda, def_scope: Scope, positional: list, keywords: dict) -> Optional[Value]:
        inner = Scope(def_scope)
        params = [*definition.params.posonly_params, *definition.params.params]
        for index, param in enumerate(params):
            inner.names[param.name.value] = positional[index] if index < len(positional) \
                else keywords.get(param.name.value)
        for param in definition.params.kwonly_params:
            inner.names[param.name.value] = keywords.get(param.name.value)
        for star in (definition.params.star_arg, definition.params.star_kwarg):
            if isinstance(star, cst.Param):
                inner.names[star.name.value] = None
        if any(frame is definition for frame in self.lambda_frames):
            return None  # f = lambda n: f(n - 1): read once
        self.lambda_frames.append(definition)
        try:
            return self.expr(definition.body, inner)
        finally:
            self.lambda_frames.pop()

    def link_to_first_call(self, node: cst.Call, function: Value, positional: list, keywords: dict,
                           owner: Optional[Value]) -> None:
        """A function is walked with its first call's arguments; a later call's arguments go where
        those went: ``train(a); train(b)`` moves ``b`` too, ``evaluate(x_val); evaluate(x_test)`` both."""
        definition = function.definition
        if not isinstance(definition, cst.FunctionDef):
            return
        params = definition.params
        names = [p.name.value for p in (*params.posonly_params, *params.params)]
        if owner is not None:
            names = names[1:]
        given = {**dict(zip(names, positional)), **keywords}
        for name, new in given.items():
            old = function.walk_params.get(name)
            if old is None or new is None or old is new:
                continue
            if is_built_module(new) and old.kind is Kind.MODULE and new not in old.alternatives:
                old.alternatives.append(new)
            elif is_tensorish(new) and is_tensorish(old):
                self.facts.uses.append(Use("alias", node, self.time, (old, new)))

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
                        weighted_loss=returned.weighted_loss, class_value=returned.class_value,
                        parameterized=returned.parameterized)

    def module_call(self, node: cst.Call, module: Value, scope: Scope) -> Optional[Value]:
        values = self.args(node, scope)
        if not module.stateful:
            self.op(node, values, plain_args(node), scope)
            return self.derived(node, [v for v in values if is_tensorish(v)])
        module.used = True
        if any(is_tensorish(v) for v in values):
            module.fed_known_tensors = True
        elif node.args:
            module.fed_unknown_values = True  # self.blur(img): what img is, the analysis cannot tell
        cpu_inputs = module.class_value.cpu_inputs if module.class_value is not None else frozenset()
        pairs = [(t, a.value) for i, (v, a) in enumerate(zip(values, node.args))
                 if not (a.keyword is None and i in cpu_inputs) and not (a.keyword and a.keyword.value in cpu_inputs)
                 for t in tensors_of(v)]
        if not self.host_depth:
            self.facts.uses.append(
                Use("call", node, self.time, tuple(v for v, _ in pairs), tuple(n for _, n in pairs), module=module))
        # The sources stand for the output when the module turns out to hold no state.
        return Value(Kind.TENSOR, node, output_of=(module, self.time), sources=tuple(v for v, _ in pairs),
                     time=self.time)
