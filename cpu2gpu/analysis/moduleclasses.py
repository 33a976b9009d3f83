"""``nn.Module`` classes of the file: what they hold, their inputs that stay on the CPU, ``self.x = ...``.

A part of ``Analyzer`` (see ``analyzer.py``): its methods read and write the one ``Facts``."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from . import classdefs
from . import torchapi as api
from .classdefs import walk
from .facts import Kind, Origin, Place, Scope, Value, has_parameters
from .imports import dotted

from .parts import AnalysisParts
from .core import PACK_PADDED_SEQUENCE, keyword_arg, string_value


class ModuleClasses(AnalysisParts):
    def cpu_inputs(self, classdef: cst.ClassDef) -> frozenset:
        """The inputs of ``forward`` that must stay on the CPU: the lengths given to
        ``pack_padded_sequence`` ("lengths ... must be a 1D CPU int64 tensor"). By name and position."""
        forward = classdefs.method(classdef, "forward")
        if forward is None:
            return frozenset()
        params = [p.name.value for p in (*forward.params.posonly_params, *forward.params.params)][1:]
        found: set = set()
        for node in walk(forward.body):
            if not isinstance(node, cst.Call) or self.imports.resolve(node.func) != PACK_PADDED_SEQUENCE:
                continue
            lengths = keyword_arg(node, "lengths") or next(
                (a for i, a in enumerate(a for a in node.args if a.keyword is None) if i == 1), None)
            name = _receiver_name(lengths.value) if lengths is not None else None
            if name is not None and name in params:
                found.update({name, params.index(name)})
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
        class_value.self_value = owner
        class_scope = Scope(scope)
        methods = []
        for item in stmt.body.body:
            if isinstance(item, cst.FunctionDef):
                # Methods see the enclosing scope, not the class body.
                method = Value(Kind.FUNCTION, item, name=item.name.value, definition=item, def_scope=scope)
                class_value.methods[item.name.value] = method
                if is_module:
                    self.facts.method_classes[id(item)] = class_value
                methods.append(method)
            else:
                self.statement(item, class_scope)
        # __init__ first (it makes the attributes), then forward (it calls the helpers with tensors).
        order = {"__init__": 0, "forward": 1}
        for method in sorted(methods, key=lambda m: order.get(m.name or "", 2)):
            self.deferred.append((method, owner))

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
        context = self.method_context
        init = context[0] if context is not None and context[0].name.value == "__init__" else None
        in_init = init is not None
        if init is not None and owner.class_value is not None and stmt in init.body.body \
                and (value.is_parameter or has_parameters(value)):
            owner.class_value.parameterized = True  # self.fc = nn.Linear(...) on every construction
        if value.name is None:
            value.name = dotted(target)
            value.binding_stmt = stmt
        if value.kind is Kind.MODULE or value.is_parameter:
            # Submodules and parameters move with the module.
            value.explicit = Place.DEVICE
            for root in self.facts.roots(value):
                root.explicit = Place.DEVICE
        elif value.is_root and value.kind is Kind.TENSOR and value.method is not None \
                and (value.method.name.value == "__init__" or in_init and self._own_method(owner, value.method)):
            # self.table = torch.zeros(...) in __init__, or self.table = self.one_hot_table() there: a tensor
            # made at construction and kept, which model.to(device) leaves where it is (a buffer, CG105)
            value.context = "module-attribute"
            value.attribute_binding = (target.attr.value, stmt)
            if owner.class_value is not None:
                owner.class_value.holds_state = True  # a buffer once migrated (CG105): its inputs go to the device
        elif value.kind is Kind.TENSOR and not value.is_root and value.explicit is None and value.output_of is None \
                and value.node is value_node and self.method_context is not None \
                and self.method_context[0].name.value == "__init__":
            roots = self.facts.roots(value)
            if roots and all(r.method is self.method_context[0] or self._own_method(owner, r.method) for r in roots):
                # self.mask = torch.tril(torch.ones(n, n)) / n: the whole expression is the attribute.
                value.origin, value.context, value.method = Origin.CONVERSION, "module-attribute", self.method_context[0]
                value.attribute_binding = (target.attr.value, stmt)
                self.facts.values.append(value)

    def _own_method(self, owner: Value, method: Optional[cst.FunctionDef]) -> bool:
        """A method of the module's own class (walked from its ``__init__``, when that is where it is called)."""
        return method is not None and owner.class_value is not None \
            and self.facts.method_classes.get(id(method)) is owner.class_value

    def register_buffer(self, node: cst.Call, owner: Value, scope: Scope) -> None:
        values = self.args(node, scope)
        name = string_value(node.args[0].value) if node.args else None
        for value in values[1:2]:
            if value is not None:
                for root in self.facts.roots(value):
                    root.explicit = Place.DEVICE  # buffers move with the module
        if name is not None:
            owner.attrs[name] = Value(Kind.TENSOR, node, name=f"self.{name}", explicit=Place.DEVICE)
        return None


def class_holds_state(cls: Value) -> bool:
    """Whether a module class of the file holds state, itself or through the classes of the file it inherits from."""
    return cls.holds_state or any(class_holds_state(base) for base in cls.stateful_bases)


def class_places_itself(cls: Value) -> bool:
    """Whether a module class of the file places its own submodules (``self.fc = nn.Linear(...).cuda(rank)``), itself
    or through the classes of the file it inherits from."""
    return cls.places_itself or any(class_places_itself(base) for base in cls.stateful_bases)


def _receiver_name(node: cst.BaseExpression) -> Optional[str]:
    """The parameter behind ``lengths``, ``lengths.cpu()``, ``lengths.to("cpu").long()``, ``lengths.tolist()``:
    each form reaches pack_padded_sequence on the CPU whatever device the input came from."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
            and node.func.attr.value in ("cpu", "to", "int", "long", "tolist", "type"):
        node = node.func.value
    return node.value if isinstance(node, cst.Name) else None
