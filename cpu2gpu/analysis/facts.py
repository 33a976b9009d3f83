"""The facts one analysis pass records about a file, which every rule reads.

A ``Value`` is what a name may hold: a module, a tensor, a loader batch, an optimizer,
a device. Where it was made, how it was placed and what it met are kept as plain
data so that a rule is a small query (see ``cpu2gpu.rules``).

Placement is judged *after the migration*: a value that nothing pins to a device is
"bound" for the device when it meets the model or a device tensor, and then counts
as on the device, because the rewrite will move it there. That is how the checker
reports, on a script with no device yet, what will break once it has one.

A ``Scope`` is where names are bound (the module, a function's body): what each name holds, and the
device variable in reach. Values and scopes refer to each other, so both live here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import libcst as cst

if TYPE_CHECKING:
    from .imports import ImportTable


class Place(enum.Enum):
    CPU = "cpu"
    DEVICE = "device"
    UNKNOWN = "unknown"


class Kind(enum.Enum):
    MODULE = "module"
    TENSOR = "tensor"
    LOADER = "loader"
    BATCH = "batch"
    OPTIMIZER = "optimizer"
    DEVICE = "device"
    PARAMS = "params"
    FUNCTION = "function"  # a function of the file: walked where it is first called
    CLASS = "class"  # a class of the file that is not a module
    INSTANCE = "instance"  # an object of such a class: its attributes are tracked
    GENERATOR = "generator"  # torch.Generator(): where it can draw
    TUPLE = "tuple"  # what a function of the file returns as a tuple: unpacked by its callers
    DATASET = "dataset"  # TensorDataset(...) (items are tensors) or an MNIST-style data set (tensor attributes)


class Origin(enum.Enum):
    """How a fixable root came to be: decides the shape of its fix."""

    FACTORY = "factory"  # torch.zeros(...): gets device=
    CONVERSION = "conversion"  # torch.from_numpy(...): gets .to(device)
    MODULE = "module"  # Net(): gets .to(device)
    LOOP = "loop"  # for x, y in loader: moved at the top of the body
    COMPREHENSION = "comprehension"  # (x,) in loader inside a comprehension: moved at each use
    UNPACK = "unpack"  # x, y = batch / next(iter(loader)) / batch[0]: moved right after


@dataclass(eq=False)
class Move:
    time: int
    place: Place
    node: cst.CSTNode  # the .to()/.cuda()/.cpu() call
    target: Optional[cst.BaseExpression]  # the device expression given to .to(), if any


@dataclass(eq=False)
class Value:
    kind: Kind
    node: cst.CSTNode
    name: Optional[str] = None  # the first name it was bound to
    # A root is made here, with no device given: the rewrite can place it.
    origin: Optional[Origin] = None
    explicit: Optional[Place] = None
    dataset_pinned: bool = False  # given to a TensorDataset: stays on the CPU, moved where it meets the device
    sources: tuple["Value", ...] = ()
    # For a module's output: the module, and when it was called.
    output_of: Optional[tuple["Value", int]] = None
    time: int = 0
    # Modules: moves after creation (modules move in place); whether they hold state.
    moves: list[Move] = field(default_factory=list)
    stateful: bool = True
    used: bool = False
    # Fix anchors: the expression to chain ``.to(device)`` on, the statement that
    # binds it, and for loop variables the loop.
    fix_node: Optional[cst.CSTNode] = None
    binding_stmt: Optional[cst.CSTNode] = None
    loop: Optional[cst.For] = None
    scope: Optional["Scope"] = None
    # Chain of tensor methods on a fresh root, e.g. torch.from_numpy(a).float().
    chain_root: Optional["Value"] = None
    # Devices: whether this device value can be the GPU.
    module_of: Optional["Value"] = None  # PARAMS: the module whose parameters these are
    # FUNCTION / CLASS / INSTANCE: the definition, where it was defined, what it holds.
    definition: Optional[cst.CSTNode] = None
    def_scope: Optional["Scope"] = None
    methods: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    class_value: Optional["Value"] = None
    self_value: Optional["Value"] = None  # CLASS of a module: the ``self`` its methods are walked with
    walked: bool = False
    walk_params: dict = field(default_factory=dict)  # FUNCTION: parameter -> the value its walk was given
    returns: Optional["Value"] = None
    # A tensor kept on a module: the attribute name and the ``self.x = ...`` statement.
    attribute_binding: Optional[tuple] = None
    cpu_inputs: frozenset = frozenset()  # module CLASS: forward's inputs that stay on the CPU (names, positions)
    constructor_args: dict = field(default_factory=dict)  # module CLASS: __init__ parameter -> tensor given
    use_nodes: list = field(default_factory=list)  # a comprehension's batch: where it is read
    is_list: bool = False
    loaded_without_map_location: bool = False  # torch.load(path): CG202 places it with map_location  # a Python list of tensors: its sources are what was appended
    walked_until: int = 0  # FUNCTION: the time its walk ended (moves later were made by a caller)
    # Where a root was made, when that decides its rule: "module-method" (forward(),
    # init_hidden()...), "module-attribute" (self.x = ... in a module's __init__).
    context: Optional[str] = None
    method: Optional[cst.FunctionDef] = None
    method_input: Optional[str] = None  # the method's input tensor parameter, for device=x.device
    input_value: Optional["Value"] = None  # in a plain function: the value that parameter holds
    is_parameter: bool = False  # nn.Parameter(...)
    weighted_loss: bool = False  # a loss built with tensor arguments (weight=...)
    loader: Optional["Value"] = None  # BATCH: the DataLoader it comes from
    moved_batches: bool = False  # LOADER: the script moves its batches to the device
    batches_on_device: bool = False  # LOADER: its collate_fn returns device tensors
    escaped: bool = False  # MODULE: returned from a function nobody in the file calls
    elements: tuple = ()  # TUPLE: the values, None where unknown
    # CLASS of a module: whether it holds state, whether it places its own submodules.
    holds_state: bool = False
    places_itself: bool = False
    # MODULE: known to have parameters (a stand-in for a model its callers train); CLASS of a module:
    # its __init__ makes some (a layer with weights, an nn.Parameter), so next(self.parameters()) is safe
    parameterized: bool = False
    stateful_bases: tuple = ()  # CLASS: local module classes it inherits from
    device_attr: Optional[str] = None  # CLASS: self.<name> holds the device
    origin_file: Optional[str] = None  # CLASS of another project file / LOADER given by one: that file, for messages
    dict_batch: bool = False
    # MODULE: where it was built (ids of the enclosing statements), the statement of that block that
    # holds its last add_module / attribute change, and whether a change happened in another block.
    # MODULE: given to an optimizer; called with tensors the analysis knows; called with values it does not.
    trained: bool = False
    fed_known_tensors: bool = False
    fed_unknown_values: bool = False
    attached_to: Optional["Value"] = None  # MODULE: the model it was set on as a layer (model.fc = ...)
    is_container: bool = False  # MODULE: an nn.ModuleDict / ModuleList / Sequential, whose attributes are layers
    tensor_type: bool = False  # DEVICE: torch.cuda.FloatTensor if cuda else torch.FloatTensor
    # TENSOR: 0-dim, CUDA ops take it from the CPU: torch.tensor(<one number>), or a full reduction (x.sum())
    scalar: bool = False
    cpu_literal: bool = False  # DEVICE: `device = torch.device("cpu")`, which the migration makes the GPU
    built_path: Optional[tuple] = None
    last_change_stmt: Optional[cst.CSTNode] = None
    changed_elsewhere: bool = False
    alternatives: list = field(default_factory=list)  # MODULE: the models other branches bind to the same name  # BATCH: indexed by keys (batch["input"]): every value is moved

    @property
    def is_root(self) -> bool:
        return self.origin is not None


@dataclass(eq=False)
class Use:
    """Where values meet. ``kind`` is one of: call, op, index, numpy, train, train-tensors, alias,
    fed-device (a model handed to another file's function with a loader whose batches it moves)."""

    kind: str
    node: cst.CSTNode
    time: int
    values: tuple[Value, ...] = ()
    arg_nodes: tuple[cst.CSTNode, ...] = ()
    module: Optional[Value] = None
    scope: Optional["Scope"] = None  # ops: the scope they happen in, to find the device there


@dataclass
class Hardcoded:
    """A literal CUDA placement with no fallback (``.cuda()``, ``"cuda"``)."""

    node: cst.CSTNode
    form: str  # "cuda-call" | "cuda-index" | "to-string" | "device-kwarg" | "torch-device" | "device-string"
    binding_name: Optional[str] = None
    scope: Optional["Scope"] = None
    time: Optional[int] = None
    on_fresh_factory: bool = False  # torch.zeros(3).cuda(): the factory can take device= at once


@dataclass
class Facts:
    module: cst.Module
    torch_alias: Optional[str] = None  # how ``torch`` is spelled here, if imported
    values: list[Value] = field(default_factory=list)
    uses: list[Use] = field(default_factory=list)
    hardcoded: list[Hardcoded] = field(default_factory=list)
    loads_without_map_location: list = field(default_factory=list)  # (call, scope, time)
    unguarded_cuda_calls: list = field(default_factory=list)  # (call, statement)
    parameter_moves: list = field(default_factory=list)  # (nn.Parameter(t).to() call, in a module's method)
    generator_draws: list = field(default_factory=list)  # (call, result, CPU generator, scope, time)
    discarded_moves: list = field(default_factory=list)  # cst.Expr statements: `x.to(device)` alone
    create_then_move: list = field(default_factory=list)  # (.to() call, factory call)
    loaders: list[Value] = field(default_factory=list)
    # Names of module-level device variables that can be the GPU, in binding order.
    device_names: list[str] = field(default_factory=list)
    global_scope: Optional["Scope"] = None
    has_local_device: bool = False  # a device variable inside some function (main(), a Trainer...)
    authors_local_device: bool = False  # ... that the script itself binds or moves to (not its callers')
    device_binding_time: dict[str, int] = field(default_factory=dict)
    names_in_use: set[str] = field(default_factory=set)
    last_import_stmt: Optional[cst.CSTNode] = None
    bound: set[int] = field(default_factory=set)  # ids of roots bound for the device
    method_results: list = field(default_factory=list)  # factory tensors a module's method returns (init_hidden)
    imports: Optional["ImportTable"] = None  # the ImportTable: rules that read code resolve names with it
    module_class_defs: dict[str, cst.ClassDef] = field(default_factory=dict)  # nn.Module subclasses
    method_classes: dict = field(default_factory=dict)  # id(method's FunctionDef) -> its module CLASS value
    host_loads: set = field(default_factory=set)  # ids of torch.load calls whose result is read on the host
    param_loaders: list = field(default_factory=list)  # (function, position or keyword, stand-in loader): given by other files
    outgoing_calls: list = field(default_factory=list)  # (qualified name, CallShape): calls into other project files
    # (t.type(torch.FloatTensor) call, t's value, dtype method, the cast's value)
    cpu_type_casts: list = field(default_factory=list)
    places_on_device: bool = False  # some .to(device) / .cuda() / device= that can be the GPU
    # `device = torch.device("cpu")` / `device = "cpu"`: (name, the literal expression, its scope)
    cpu_device_literals: list = field(default_factory=list)
    device_name_bindings: dict = field(default_factory=dict)  # device variable name -> times bound

    @property
    def device_aware(self) -> bool:
        """The script places values on the GPU itself already (it is migrated, or was written for it)."""
        return self.places_on_device or bool(self.device_names) or self.authors_local_device or bool(self.hardcoded)

    # -- placement after the migration ------------------------------------------------

    def is_bound(self, value: Value) -> bool:
        return id(value) in self.bound

    def module_place(self, module: Value, time: int) -> Place:
        placed = [m for m in module.moves if m.time <= time]
        if placed:
            return placed[-1].place
        if module.attached_to is not None:
            return self.module_place(module.attached_to, time)
        if module.explicit is not None:
            return module.explicit
        return Place.DEVICE if self.is_bound(module) else Place.CPU

    def place(self, value: Value) -> Place:
        if value.kind is Kind.MODULE:
            return self.module_place(value, value.time)
        if value.explicit is not None:
            return value.explicit
        if value.output_of is not None and value.output_of[0].stateful:
            module, time = value.output_of
            return self.module_place(module, time)
        if value.is_root:
            return Place.DEVICE if self.is_bound(value) else Place.CPU
        if not value.sources:
            return Place.UNKNOWN
        places = {self.place(s) for s in value.sources}
        if Place.DEVICE in places:
            return Place.DEVICE
        return Place.CPU if places == {Place.CPU} else Place.UNKNOWN

    def is_zero_dim(self, value: Value) -> bool:
        """A 0-dim tensor: a scalar root or reduction, or arithmetic of such values only."""
        if value.scalar:
            return True
        if value.is_root or value.output_of is not None or not value.sources:
            return False
        if not isinstance(value.node, (cst.BinaryOperation, cst.UnaryOperation)):
            return False  # (a method or function of a 0-dim tensor may give it dimensions: t.expand(3))
        return all(s.kind is Kind.TENSOR and self.is_zero_dim(s) for s in value.sources)

    def derives_from(self, value: Value, origin: Value) -> bool:
        """Whether ``value`` is ``origin`` or is computed from it."""
        seen: set[int] = set()
        pending = [value]
        while pending:
            current = pending.pop()
            if current is origin:
                return True
            if id(current) in seen:
                continue  # (a list's sources grow as it is appended to: cycles are possible)
            seen.add(id(current))
            pending.extend(current.sources)
        return False

    def meets_device(self, value: Value, in_place_only: bool = False) -> bool:
        """Whether what is computed from ``value`` meets the device: it is fed to a module on the
        device, or an op takes it with a device tensor that does not come from it. With
        ``in_place_only``, only as the target of an in-place op (``t += d``), which a 0-dim CPU
        tensor cannot take a device tensor into."""
        for use in self.uses:
            if use.kind == "call" and not in_place_only:
                if use.module is not None and use.module.stateful \
                        and self.module_place(use.module, use.time) is Place.DEVICE \
                        and any(self.derives_from(v, value) for v in use.values):
                    return True
            elif use.kind in ("op", "index"):
                if in_place_only and not isinstance(use.node, cst.AugAssign):
                    continue
                # An index use: a CPU tensor indexed with device indices fails, the reverse is fine.
                mine = use.values[:1] if use.kind == "index" or in_place_only else use.values
                if not any(self.derives_from(v, value) for v in mine):
                    continue
                others = use.values[1:] if use.kind == "index" or in_place_only else use.values
                if any(self.place(v) is Place.DEVICE and not self.derives_from(v, value) for v in others):
                    return True
        return False

    def roots(self, value: Value) -> list[Value]:
        """The fixable roots whose placement decides this value's."""
        if value.is_root:
            return [value] if value.explicit is None else []  # pinned (a data set's tensor): not movable
        if value.explicit is not None or value.output_of is not None and value.output_of[0].stateful:
            return []
        found: list[Value] = []
        for source in value.sources:
            found.extend(r for r in self.roots(source) if r not in found)
        return found


class Scope:
    """The names bound in the module or in one function, and the device variables among them."""

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
