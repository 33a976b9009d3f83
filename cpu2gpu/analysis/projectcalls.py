"""The rest of the project: calls into other project files, and the callers of this file's functions.

A part of ``Analyzer`` (see ``analyzer.py``): its methods read and write the one ``Facts``."""

from __future__ import annotations

from typing import Optional, Union, cast

import libcst as cst

from .facts import Facts, Kind, Origin, Place, Scope, Use, Value, has_parameters
from .seeds import CROSSING_KINDS, CallShape, Exported

from .parts import AnalysisParts
from .core import TENSORISH_KINDS, tensors_of


class ProjectCalls(AnalysisParts):
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
            pairs = [(t, a.value) for v, a in zip(values, node.args) for t in tensors_of(v)]
            if pairs:
                self.facts.uses.append(Use("call", node, self.time, tuple(v for v, _ in pairs),
                                           tuple(n for _, n in pairs), module=modules[0]))
        cls: Optional[Value]
        if exported.kind == "module_class":
            cls = self.seeded_class(exported.file, exported.name, exported.holds_state, exported.cpu_inputs, node)
            return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, class_value=cls)
        if exported.kind == "registry":
            return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, stateful=exported.holds_state)
        for index, given in enumerate(values):
            # a loader whose batches the function moves to the device (DataLoader pin_memory, CG301)
            arg = node.args[index]
            key = arg.keyword.value if arg.keyword is not None else index
            if given is not None and given.kind is Kind.LOADER and key in exported.loader_params:
                given.moved_batches = True
                for module in modules:
                    # train(model, device, loader): the model meets the batches it moves
                    self.facts.uses.append(Use("fed-device", node, self.time, module=module))
        kind = exported.returns if exported.kind == "function" else None
        if exported.kind == "class" and exported.returns == "loader":
            kind = "loader"  # BatchIterator(rows): an object whose iteration yields the step's batches
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
                definition = cast(cst.FunctionDef, method.definition)  # a method: a def of the class body
                args, kwargs = self.shaped_args(definition, shape, skip_self=True)
                self.function(method, owner, args, kwargs)
                self.note_param_loaders(name, definition, args, kwargs, skip_self=True)
                continue
            target = self.global_scope.names.get(name)
            if target is None or target.walked:
                continue
            if target.kind is Kind.FUNCTION and not isinstance(target.definition, cst.FunctionDef):
                continue  # `scale = lambda m, x: ...`: read at each call of this file, not walked as a def
            self.facts.has_local_device = True  # the device lives with the callers: take it from their model
            if target.kind is Kind.FUNCTION and isinstance(target.definition, cst.FunctionDef):
                args, kwargs = self.shaped_args(target.definition, shape, skip_self=False)
                self.function(target, None, args, kwargs)
                self.note_param_loaders(name, target.definition, args, kwargs, skip_self=False)
            elif target.kind is Kind.CLASS:
                instance = Value(Kind.INSTANCE, target.node, class_value=target, time=self.tick())
                init = target.methods.get("__init__")
                if init is not None and not init.walked:
                    init_def = cast(cst.FunctionDef, init.definition)  # a method: a def of the class body
                    args, kwargs = self.shaped_args(init_def, shape, skip_self=True)
                    self.function(init, instance, args, kwargs)
                    self.note_param_loaders(name, init_def, args, kwargs, skip_self=True)
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

        def stand_in(kind: Optional[str], param: Optional[cst.Param], stateful: bool,
                     parameterized: bool = False) -> Optional[Value]:
            if param is None or kind not in ("module", "loader", "optimizer", "device", "device_tensor"):
                return None
            name = param.name.value
            if kind == "device_tensor":  # a model's output, a moved batch: .numpy() of it needs .cpu()
                return Value(Kind.TENSOR, param.name, name=name, explicit=Place.DEVICE)
            if kind == "module":
                return Value(Kind.MODULE, param.name, name=name, explicit=Place.DEVICE, stateful=stateful, used=True,
                             parameterized=parameterized)
            if kind == "device":
                return Value(Kind.DEVICE, param.name, name=name, explicit=Place.DEVICE)
            return Value(Kind.LOADER if kind == "loader" else Kind.OPTIMIZER, param.name, name=name,
                         origin_file=given_by)

        args = [stand_in(kind, params[i] if i < len(params) else None, i in shape.stateful, i in shape.parameterized)
                for i, kind in enumerate(shape.positional)]
        kwargs = {name: stand_in(kind, by_name.get(name), name in shape.stateful, name in shape.parameterized)
                  for name, kind in shape.keywords}
        return args, {k: v for k, v in kwargs.items() if v is not None}


def call_shape(node: cst.Call, values: list[Optional[Value]], facts: Facts) -> CallShape:
    """The kinds of what a call passes, as a function in another file will see them: a tensor
    that is on the device once migrated is a "device_tensor"."""

    def kind_of(value: Optional[Value]) -> Optional[str]:
        if value is None:
            return None
        if value.kind in TENSORISH_KINDS:
            return "device_tensor" if facts.place(value) is Place.DEVICE else "tensor"
        kind = value.kind.value
        return kind if kind in CROSSING_KINDS else None

    positional: list[Optional[str]] = []
    keywords: list[tuple[str, Optional[str]]] = []
    stateful: list[Union[int, str]] = []
    parameterized: list[Union[int, str]] = []
    for value, arg in zip(values, node.args):
        if arg.star:
            break
        key = len(positional) if arg.keyword is None else arg.keyword.value
        if value is not None and value.kind is Kind.MODULE and value.stateful:
            stateful.append(key)
            if has_parameters(value):
                parameterized.append(key)  # trained by the caller, or a layer with weights
        if arg.keyword is None:
            positional.append(kind_of(value))
        else:
            keywords.append((arg.keyword.value, kind_of(value)))
    return CallShape(tuple(positional), tuple(sorted(keywords)), tuple(stateful),
                     parameterized=tuple(parameterized))
