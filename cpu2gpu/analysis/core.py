"""What every part of the analysis shares: small readings of nodes and values, the roles of node types,
and the queue of functions left to walk. (The scopes of names are in ``facts``.)"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Optional, Union, cast

import libcst as cst

if TYPE_CHECKING:  # Python 3.10's; only the type checker reads it
    from typing import TypeGuard

from .classdefs import walk
from .facts import Kind, Origin, Place, Value

TENSORISH_KINDS = (Kind.TENSOR, Kind.BATCH)
_GUARD_WORDS = ("cuda", "gpu", "is_available", "accelerator", "device")
DEVICE_PARAMETER_NAMES = frozenset({"device", "dev", "torch_device"})

Block = Union[cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite, cst.BaseSuite]


def iterates_batches(cls: Optional[Value]) -> bool:
    """A plain class of the project whose objects are iterated for batches: it defines ``__next__`` (a
    data-set iterator that builds each batch) or ``__iter__``. (Module classes are not CLASS values: an
    nn.ModuleList iterates its layers.)"""
    return cls is not None and cls.kind is Kind.CLASS and ("__next__" in cls.methods or "__iter__" in cls.methods)


# What a node type is to the analysis (``node_role``)
EXPRESSION_ROLE, STATEMENT_ROLE, SMALL_STATEMENT_ROLE, OTHER_ROLE = \
    "expression", "statement", "small statement", "other"
_ROLES: dict[type, str] = {}


def node_role(kind: type) -> str:
    """What a node type is to the analysis, remembered per type (isinstance on libcst's ABCs is slow)."""
    role = _ROLES.get(kind)
    if role is None:
        role = _ROLES[kind] = (EXPRESSION_ROLE if issubclass(kind, cst.BaseExpression) else
                               STATEMENT_ROLE if issubclass(kind, cst.BaseStatement) else
                               SMALL_STATEMENT_ROLE if issubclass(kind, cst.BaseSmallStatement) else OTHER_ROLE)
    return role


def is_tensorish(value: Optional[Value]) -> TypeGuard[Value]:
    """A tensor, or a loader's batch (``TENSORISH_KINDS``)."""
    return value is not None and value.kind in TENSORISH_KINDS


def is_built_module(value: Optional[Value]) -> TypeGuard[Value]:
    """A model made here (``Net()``), which the rewrite can move where it is made."""
    return value is not None and value.kind is Kind.MODULE and value.origin is Origin.MODULE and value.stateful \
        and not value.weighted_loss


def tensors_of(value: Optional[Value]) -> list[Value]:
    """The tensors a value stands for: itself, or the tensors of a returned tuple (h, c)."""
    if value is None:
        return []
    if value.kind is Kind.TUPLE:
        return [e for e in value.elements if is_tensorish(e)]
    return [value] if is_tensorish(value) else []


PACK_PADDED_SEQUENCE = "torch.nn.utils.rnn.pack_padded_sequence"

# Python containers of tensors, written out: never a tensor themselves, so never given .to(device)
CONTAINER_DISPLAYS = (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp,
                      cst.GeneratorExp)


def plain_args(node: cst.Call) -> Optional[list[cst.CSTNode]]:
    """The argument expressions of a call, or None when one is unpacked (*args)."""
    if any(arg.star for arg in node.args):
        return None
    return [arg.value for arg in node.args]


def target_names(target: cst.BaseExpression) -> list[str]:
    """The names an assignment target binds: ``x``, ``x, (y, *z)``; none for ``a.b`` or ``a[i]``."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return []


def string_value(node: cst.CSTNode) -> Optional[str]:
    """The text of a plain string literal (``"cuda:0"``), else None."""
    if type(node) is cst.SimpleString:
        try:
            evaluated = node.evaluated_value
        except Exception:  # odd prefixes: not a device string
            return None
        return evaluated if isinstance(evaluated, str) else None
    return None


def device_string_place(text: str) -> Optional[Place]:
    """Where a device string puts a tensor: ``"cpu"`` the CPU, ``"cuda:1"``, ``"mps"``... the device."""
    text = text.strip().lower()
    if text == "cpu":
        return Place.CPU
    if text.split(":", 1)[0] in ("cuda", "mps", "xpu", "hip"):
        return Place.DEVICE
    return None


def is_cuda_literal(node: cst.CSTNode) -> bool:
    """A string literal naming a CUDA device (``"cuda"``, ``"cuda:0"``)."""
    text = string_value(node)
    return text is not None and text.strip().lower().split(":", 1)[0] == "cuda"


def mentions_gpu_guard(node: cst.CSTNode) -> bool:
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


def branch_without_gpu(test: cst.BaseExpression) -> str:
    """Which branch of ``if <GPU check>`` runs without a GPU: ``else``, or the body of ``if not use_cuda``."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return "body"
    return "orelse"


def leaves_block(suite: cst.BaseSuite) -> bool:
    """Whether a block ends by leaving it: ``return``, ``raise``, ``continue`` or ``break``."""
    last = suite.body[-1] if suite.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    return isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break))


def keyword_arg(call: cst.Call, name: str) -> Optional[cst.Arg]:
    """The argument a call gives by keyword ``name``, if any."""
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
