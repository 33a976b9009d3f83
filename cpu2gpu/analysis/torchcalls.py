"""Calls into torch and torchvision (the tables of ``torchapi`` beside what they mean) and device moves.

A part of ``Analyzer`` (see ``analyzer.py``): its methods read and write the one ``Facts``."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from . import torchapi as api
from .classdefs import walk
from .facts import Hardcoded, Kind, Move, Origin, Place, Scope, Use, Value
from .devicecode import places_on_device
from .imports import dotted

from .parts import AnalysisParts
from .core import (
    TENSORISH_KINDS,
    device_string_place,
    is_built_module,
    is_cuda_literal,
    is_tensorish,
    keyword_arg,
    plain_args,
    string_value,
    tensors_of,
)


# Libraries whose object chooses the device (and exposes it as .device): accelerate, Lightning Fabric.
_DEVICE_OWNERS = frozenset({
    "accelerate.Accelerator", "accelerate.accelerator.Accelerator",
    "lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric", "lightning.fabric.fabric.Fabric",
})


# Methods of a Python list that a tensor lacks: a value they are called on is a list of tensors.
_LIST_METHODS = frozenset({"append", "extend", "insert"})


class TorchCalls(AnalysisParts):
    def qualified_call(self, node: cst.Call, qual: str, scope: Scope) -> Optional[Value]:
        exported = self.seeds.imported.get(qual)
        if exported is not None:
            return self.project_call(node, qual, exported, scope)
        if qual == "torch.device":
            return self.torch_device(node, scope)
        if qual in api.VARIABLE_WRAPPERS:
            values = self.args(node, scope)  # Variable(x, requires_grad=True): the value is x itself
            first = node.args[0] if node.args else None
            return values[0] if first is not None and first.keyword is None and not first.star else None
        if qual in ("torch.accelerator.current_accelerator", "torch.get_default_device"):
            self.args(node, scope)
            return Value(Kind.DEVICE, node, explicit=Place.DEVICE, time=self.time)
        if qual in _DEVICE_OWNERS:
            # Accelerator() / Fabric(): the library picks the device; its .device is the script's device
            self.args(node, scope)
            return Value(Kind.INSTANCE, node, time=self.time,
                         attrs={"device": Value(Kind.DEVICE, node, explicit=Place.DEVICE, time=self.time)})
        if qual in api.FACTORIES or qual in api.LIKE_FACTORIES:
            return self.factory(node, qual, scope)
        if qual in ("torch.Generator", "torch._C.Generator"):
            device = keyword_arg(node, "device") or next((a for a in node.args if a.keyword is None), None)
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
            location = keyword_arg(node, "map_location") or (
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
        if qual in api.TENSOR_DATASETS:
            # A data set's tensors stay on the CPU: the loader pins, shuffles and batches them there.
            for value in self.args(node, scope):
                for root in self.facts.roots(value) if value is not None else ():
                    if root.explicit is None:
                        root.explicit = Place.CPU
                        root.dataset_pinned = True
            return Value(Kind.DATASET, node, time=self.time)  # its items: tuples of tensors
        if qual in api.MNIST_STYLE_DATASETS:
            self.args(node, scope)
            return Value(Kind.DATASET, node, time=self.time, context="mnist")  # tensors as attributes
        if qual in api.DATALOADERS:
            self.args(node, scope)
            loader = Value(Kind.LOADER, node, time=self.time)
            collate = keyword_arg(node, "collate_fn")
            if collate is not None and isinstance(collate.value, cst.Name):
                function = scope.lookup(collate.value.value)
                if function is not None and function.kind is Kind.FUNCTION \
                        and isinstance(function.definition, cst.FunctionDef):
                    loader.batches_on_device = _returns_device_moves(function.definition)
            self.facts.loaders.append(loader)
            return loader
        if qual.startswith(api.HOST_LIBRARIES):
            self.host_call(node, scope)
            return None
        if qual.startswith("torch.cuda.") and qual[11:] in api.CUDA_ONLY_CALLS and not self.guard_depth:
            self.facts.unguarded_cuda_calls.append((node, self.current_stmt))
        if api.is_optimizer(qual):
            self._params_seen = []
            values = self.args(node, scope)
            trained = [p.module_of for p in self._params_seen if p.module_of is not None]
            for module in trained:
                module.used = True
                module.trained = True
                self.facts.uses.append(Use("train", node, self.time, module=module))
            self._params_seen = []
            leaves = self.trained_leaves(values[0] if values else None)
            if leaves:
                # SGD([w, b]): tensors trained without a module are the model; they go to the device.
                self.facts.uses.append(Use("train-tensors", node, self.time, tuple(leaves)))
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
            # A loss built with weight=tensor holds it as a buffer (one made on the device needs no move).
            weighted = not stateful and any(is_tensorish(v) and self.facts.place(v) is not Place.DEVICE
                                            for v in values)
            # nn.Linear(...), resnet18(): a layer or model with weights (next(m.parameters()) is safe on it)
            parameterized = local is None and stateful and qual not in api.CONTAINER_MODULES \
                and not qual.rsplit(".", 1)[-1].endswith(api.LOSS_SUFFIX)
            return self.new(Kind.MODULE, node, scope, origin=Origin.MODULE, stateful=stateful or weighted,
                            weighted_loss=weighted, class_value=local, is_container=qual in api.CONTAINER_MODULES,
                            parameterized=parameterized)
        if api.is_tensor_function(qual):
            values = self.args(node, scope)
            self.op(node, values, plain_args(node), scope)
            result = self.derived(node, [v for v in values if is_tensorish(v)])
            if result is not None and qual[len("torch."):] in api.FULL_REDUCTIONS and len(node.args) == 1 \
                    and node.args[0].keyword is None and not node.args[0].star:
                result.scalar = True  # torch.sum(x): 0-dim
            return result
        self.args(node, scope)
        return None

    def host_call(self, node: cst.Call, scope: Scope) -> None:
        """``np.array(t)``, ``plt.imshow(t)``: numpy and matplotlib read a tensor on the host (CG107)."""
        for arg, value in zip(node.args, self.args(node, scope)):
            if is_tensorish(value) and not arg.star and not self.host_depth:
                self.facts.uses.append(Use("host", node, self.time, (value,), arg_nodes=(arg.value,)))
        return None

    def append_modules(self, receiver: Value, modules: list[Value]) -> None:
        """``nets.append(Net())``: a list of models is a group (see ``module_group``)."""
        built = [m for m in modules if is_built_module(m)]
        if not built or len(built) != len(modules) or self.method_context is not None:
            return
        if receiver.kind is Kind.MODULE:
            receiver.alternatives.extend(built)
        elif not receiver.sources:  # nets = [] until now: it holds models, not tensors
            receiver.kind, receiver.explicit, receiver.alternatives = Kind.MODULE, Place.DEVICE, built
            self.facts.values.append(receiver)

    def trained_leaves(self, params: Optional[Value]) -> list[Value]:
        """The tensors an optimizer is given directly, when each is made by a factory whose
        ``device=`` keeps it a leaf (a ``.to(device)`` after ``requires_grad`` would not)."""
        if params is None or params.kind not in TENSORISH_KINDS:
            return []
        given = params.sources if not params.is_root else (params,)
        leaves = [v for v in given if v.is_root and v.origin is Origin.FACTORY and v.explicit is None]
        return leaves if len(leaves) == len(given) else []

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
            if is_tensorish(value):
                cls.constructor_args.setdefault(name, value)
        for value, arg in zip(values, node.args):
            if arg.keyword is not None and is_tensorish(value):
                cls.constructor_args.setdefault(arg.keyword.value, value)

    def torch_device(self, node: cst.Call, scope: Scope) -> Value:
        place = Place.DEVICE
        if node.args:
            first = node.args[0].value
            text = string_value(first)
            if text is not None:
                place = device_string_place(text) or Place.DEVICE
                if is_cuda_literal(first) and not self.guard_depth:
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
        device_arg = keyword_arg(node, "device")
        if device_arg is not None:
            if is_cuda_literal(device_arg.value) and not self.guard_depth:
                self.note_hardcoded(Hardcoded(device_arg, "device-kwarg"))
            place, follows = self.device_arg_place(device_arg.value, scope)
            if follows is not None:
                return Value(Kind.TENSOR, node, sources=(follows,), time=self.time)
            return Value(Kind.TENSOR, node, explicit=place or Place.UNKNOWN, time=self.time)
        if qual in api.LIKE_FACTORIES:
            return self.derived(node, values[:1])
        if qual in api.TENSOR_ARGUMENT_FACTORIES and (_tensor_overload(node) or any(is_tensorish(v) for v in values)):
            # torch.normal(mean, std) of tensors: made where they are, and it takes no device=
            self.op(node, values, plain_args(node), scope)
            return self.derived(node, [v for v in values if is_tensorish(v)])
        value = self.new(Kind.TENSOR, node, scope, origin=Origin.FACTORY)
        if qual in ("torch.tensor", "torch.scalar_tensor") and _number_literal(node):
            value.scalar = True  # torch.tensor(1e-7): a 0-dim CPU tensor joins device tensors in any op
        return value

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
                self.register_buffer(node, receiver, scope)
                return None
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
            if method in ("append", "insert"):
                self.append_modules(receiver, [v for v in values if v is not None and v.kind is Kind.MODULE])
            if method in ("append", "extend", "insert") and receiver.kind is not Kind.MODULE:
                receiver.sources = (*receiver.sources, *[t for v in values for t in tensors_of(v)])
            return None
        if receiver.kind is Kind.LOADER and method in ("next", "__next__") and not node.args:
            return self.batch_from(node, receiver, scope)  # dataiter.next(), from PyTorch < 1.13 code
        if receiver.kind is Kind.GENERATOR:
            return receiver if method == "manual_seed" else None  # torch.Generator().manual_seed(0)
        if receiver.kind is Kind.MODULE and not receiver.is_list:
            if method in api.MODULE_STRUCTURE_METHODS and receiver.class_value is None:
                self.note_structure_change(receiver)
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
                pairs = [(t, a.value) for v, a in zip(values, node.args) for t in tensors_of(v)]
                if pairs and receiver.stateful and not self.host_depth:
                    # model.predict(x) after training: its own method runs its layers on x, as forward
                    # does, so x meets the module, and what comes back is the module's output
                    self.facts.uses.append(Use("call", node, self.time, tuple(t for t, _ in pairs),
                                               tuple(n for _, n in pairs), module=receiver))
                    return Value(Kind.TENSOR, node, output_of=(receiver, self.time),
                                 sources=tuple(t for t, _ in pairs), time=self.time)
                return None
            if method in ("parameters", "named_parameters"):
                params = Value(Kind.PARAMS, node, module_of=receiver, time=self.time)
                self._params_seen.append(params)
                return params
            if method == "forward" or receiver.is_container and method not in api.MODULE_METHODS:
                return self.module_call(node, receiver, scope)  # self.transformer.wpe(pos): one of its layers
            return None
        if receiver.kind in TENSORISH_KINDS:
            if method in ("numpy", "item", "tolist"):
                self.note_sync(node, receiver)
            if method == "numpy":
                if not self.host_depth:  # (t.numpy() if not use_cuda else ...: runs only without a GPU)
                    self.facts.uses.append(Use("numpy", node, self.time, (receiver,)))
                return None
            if method in api.NON_TENSOR_METHODS:
                return None
            if method in _LIST_METHODS:
                # tns = [torch.from_numpy(d) for d in images]; tns.append(t): a tensor has no append,
                # so this is a Python list of tensors, which holds what it is given (no op on a device)
                receiver.sources = (*receiver.sources, *[t for v in values for t in tensors_of(v)])
                return None
            cast: Optional[str] = None
            if method == "type" and len(node.args) == 1 and node.args[0].keyword is None:
                chosen = values[0] if values else None
                if chosen is not None and chosen.kind is Kind.DEVICE and chosen.tensor_type:
                    return Value(Kind.TENSOR, node, explicit=Place.DEVICE, time=self.time)  # .type(FloatTensor)
                type_name = self.imports.resolve(node.args[0].value) or string_value(node.args[0].value) or ""
                if type_name in api.CUDA_TENSOR_TYPES:
                    # .type(torch.cuda.FloatTensor): a copy to the GPU, which leaves the receiver where it was
                    self.facts.places_on_device = True
                    return Value(Kind.TENSOR, node, explicit=Place.DEVICE, time=self.time)
                cast = api.CPU_TENSOR_TYPES.get(type_name)
            if method != "copy_":  # noises.data.copy_(t.randn(...)): copy_ reads from any device
                self.op(node, [receiver, *values])
            result = self.derived(node, [receiver, *[v for v in values if is_tensorish(v)]])
            if result is not None and method in api.FULL_REDUCTIONS and not node.args:
                result.scalar = True  # x.sum(): 0-dim
            if cast is not None and result is not None:
                # read as the dtype change it is meant to be (CG115 makes it one where that matters)
                self.facts.cpu_type_casts.append((node, receiver, cast, result))
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
        if self.step_depth == 0 and is_tensorish(value):
            self.facts.uses.append(Use("sync", node, self.time, (value,)))

    def instance_method_call(self, node: cst.Call, receiver: Value, method: str, scope: Scope) -> Optional[Value]:
        """``trainer.fit()``, ``self.model(x)`` on an object of a class of the file."""
        held = receiver.attrs.get(method)
        if held is not None:
            return self.value_call(node, held, scope)
        cls = receiver.class_value
        function = cls.methods.get(method) if cls is not None else None
        if cls is not None and function is not None:
            if receiver.kind is Kind.MODULE and cls.self_value is not None and receiver is not cls.self_value:
                # model.sample(n): walked as the class's own method, with the attributes __init__ makes
                init = cls.methods.get("__init__")
                if init is not None and not init.walked:
                    self.function(init, cls.self_value, [], {})
                return self.value_call(node, function, scope, owner=cls.self_value, receiver=receiver)
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
            device_kw = keyword_arg(node, "device")
            candidate = device_kw if device_kw is not None else (positional[0] if positional else None)
            if candidate is not None:
                target = candidate.value
                if is_cuda_literal(target) and not self.guard_depth:
                    self.note_hardcoded(Hardcoded(candidate, "to-string"))
                place, follows = self.device_arg_place(target, scope)
                if place is Place.DEVICE and scope is not self.global_scope \
                        and dotted(target) not in self.global_scope.device_names:
                    # .to(args.device) in main(): the script keeps its device there, not at module level.
                    self.facts.has_local_device = True
                    self.facts.authors_local_device = True
            for arg in node.args:
                if arg is not candidate:
                    self.expr(arg.value, scope)
        if method == "cuda":
            self.facts.places_on_device = True
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
            and string_value(target) is None
            and (place is Place.DEVICE or (follows is not None and follows.kind is Kind.DEVICE))
        ):
            self.facts.create_then_move.append((node, receiver.node))
        if receiver.kind is Kind.MODULE:
            if place is not None:
                receiver.moves.append(Move(self.time, place, node, target))
            elif follows is not None:
                receiver.moves.append(Move(self.time, follows.explicit or Place.DEVICE, node, target))
            return receiver
        if receiver.kind in TENSORISH_KINDS:
            if place is not None:
                return Value(Kind.TENSOR, node, explicit=place, time=self.time)
            if follows is not None:
                return Value(Kind.TENSOR, node, sources=(follows,), time=self.time)
            result = self.derived(node, [receiver])
            if result is not None and not isinstance(func.value, (cst.Name, cst.Attribute)):
                result.chain_root = receiver if receiver.is_root else receiver.chain_root
            return result
        return None


def _tensor_overload(node: cst.Call) -> bool:
    """``torch.normal(mean, std)`` without a size: the overload of tensors (the one of floats needs a size)."""
    positional = [a for a in node.args if a.keyword is None]
    return len(positional) < 3 and keyword_arg(node, "size") is None


def _number_literal(node: cst.Call) -> bool:
    """``torch.tensor(1e-7)``, ``torch.tensor(-1)``: one number, no list."""
    positional = [a for a in node.args if a.keyword is None]
    if not positional:
        return False
    first = positional[0].value
    if type(first) is cst.UnaryOperation:
        first = first.expression
    return type(first) in (cst.Integer, cst.Float)


def _returns_device_moves(function: cst.FunctionDef) -> bool:
    """A collate function that returns its tensors moved (``return x.to(device), y.to(device)``)."""
    for ret in walk(function):
        if type(ret) is cst.Return and ret.value is not None \
                and any(type(call) is cst.Call and places_on_device(call) for call in walk(ret.value)):
            return True
    return False
