"""What every part of the analysis shares: the scopes of names and small readings of nodes."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Optional, Union, cast

import libcst as cst

if TYPE_CHECKING:  # Python 3.10's; only the type checker reads it
    from typing import TypeGuard

from .classdefs import walk
from .facts import Kind, Origin, Place, Value

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
            if value is not None and value.kind is Kind.MODULE and value.stateful and value.name != "self" \
                    and has_parameters(value):
                return name
        if self.owner is not None and self.owner.kind is Kind.INSTANCE and self.params:
            for attr, value in self.owner.attrs.items():
                # a model the object was given (on the device already), never one it builds itself:
                # self.net = Net().to(next(self.net.parameters()).device) would read self.net too early
                if value is not None and value.kind is Kind.MODULE and value.stateful \
                        and value.explicit is Place.DEVICE and not value.moves and has_parameters(value):
                    return f"{self.params[0]}.{attr}"
        return None


def iterates_batches(cls: Optional[Value]) -> bool:
    """A plain class of the project whose objects are iterated for batches: it defines ``__next__`` (a
    data-set iterator that builds each batch) or ``__iter__``. (Module classes are not CLASS values: an
    nn.ModuleList iterates its layers.)"""
    return cls is not None and cls.kind is Kind.CLASS and ("__next__" in cls.methods or "__iter__" in cls.methods)


def has_parameters(value: Optional[Value]) -> bool:
    """Whether a module certainly has parameters, so that ``next(module.parameters())`` cannot raise
    StopIteration: an optimizer is given them (here or, for a stand-in, by the callers), a torch layer
    with weights (``parameterized`` where it is built; not a container, which may be empty), or a class of the file whose ``__init__``
    makes a layer with weights or an ``nn.Parameter``. A module with buffers only, a container, a class
    of another file or one whose layers come from a function is not known to have any."""
    if value is None or value.kind is not Kind.MODULE or not value.stateful:
        return False
    if value.trained or value.parameterized:
        return True
    return value.class_value is not None and class_has_parameters(value.class_value)


def class_has_parameters(cls: Value, seen: Optional[set] = None) -> bool:
    seen = set() if seen is None else seen
    if id(cls) in seen:
        return False
    seen.add(id(cls))
    return cls.parameterized or any(class_has_parameters(base, seen) for base in cls.stateful_bases)


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


def _is_tensorish(value: Optional[Value]) -> TypeGuard[Value]:
    return value is not None and value.kind in _TENSORISH


def _is_built_module(value: Optional[Value]) -> TypeGuard[Value]:
    """A model made here (``Net()``), which the rewrite can move where it is made."""
    return value is not None and value.kind is Kind.MODULE and value.origin is Origin.MODULE and value.stateful \
        and not value.weighted_loss


def _tensors_of(value: Optional[Value]) -> list[Value]:
    """The tensors a value stands for: itself, or the tensors of a returned tuple (h, c)."""
    if value is None:
        return []
    if value.kind is Kind.TUPLE:
        return [e for e in value.elements if _is_tensorish(e)]
    return [value] if _is_tensorish(value) else []


_PACK_PADDED = "torch.nn.utils.rnn.pack_padded_sequence"

# Python containers of tensors, written out: never a tensor themselves, so never given .to(device)
_CONTAINER_DISPLAYS = (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp,
                       cst.GeneratorExp)


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
            lowered = cast(cst.Name, current).value.lower()
            if any(word in lowered for word in _GUARD_WORDS):
                return True
        elif kind is cst.SimpleString:
            if "cuda" in cast(cst.SimpleString, current).value.lower():
                return True
    return False


def _host_branch(test: cst.BaseExpression) -> str:
    """Which branch of ``if <GPU check>`` runs without a GPU: ``else``, or the body of ``if not use_cuda``."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return "body"
    return "orelse"


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


class Deferred:
    """The functions and methods no code has called yet, walked after the module in the order they were
    found, methods of modules first: the helper functions forward() calls are then walked with its tensors.
    (Two queues: a file of thousands of functions must not scan the list for the next method each time.)"""

    def __init__(self) -> None:
        self.methods: deque[tuple[Value, Optional[Value]]] = deque()
        self.functions: deque[tuple[Value, Optional[Value]]] = deque()

    def append(self, item: tuple[Value, Optional[Value]]) -> None:
        (self.methods if item[1] is not None else self.functions).append(item)

    def pop_next(self) -> tuple[Value, Optional[Value]]:
        return self.methods.popleft() if self.methods else self.functions.popleft()

    def __bool__(self) -> bool:
        return bool(self.methods or self.functions)
