"""One pass over a file that records its device facts (see ``facts.py``).

The walk reads the file as straight-line code in source order: module level first,
then the bodies of functions and methods (which run later, when called). It is an
abstract interpretation with a tiny domain: for every expression, the ``Value`` it
may hold, or None when it cannot tell. None is never reported: uncertain is not
wrong.
"""

from __future__ import annotations

from typing import Optional, cast

import libcst as cst

from .facts import Facts, Kind, Place, Scope, Value
from .imports import ImportTable
from .seeds import NO_SEEDS, Seeds

from .core import Deferred
from .statements import StatementWalker
from .expressions import ExpressionEvaluator
from .torchcalls import TorchCalls
from .moduleclasses import ModuleClasses
from .projectcalls import ProjectCalls, call_shape
from .moduleclasses import class_holds_state, class_places_itself


class Analyzer(StatementWalker, ExpressionEvaluator, TorchCalls, ModuleClasses, ProjectCalls):
    """One pass over a file: the statements in source order, then the functions no code of the file calls."""

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
        self.lambda_frames: list = []  # the lambdas being read at their call, innermost last
        self.host_depth = 0  # inside the branch of a GPU check that runs without a GPU
        self.global_scope = Scope(None)
        # Functions and methods not called yet: walked at the end, with unknown arguments.
        self.deferred = Deferred()
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
        self.stmt_path: list[cst.CSTNode] = []  # the statements being walked, outermost first

    def run(self) -> Facts:
        for stmt in self.facts.module.body:
            self.top_stmt = stmt
            self.statement(stmt, self.global_scope)
        self.walk_incoming()
        while self.deferred:
            function, owner = self.deferred.pop_next()
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

    def propagate(self) -> None:
        """Mark the roots that the migration must put on the device, to a fixed point."""
        facts = self.facts
        for value in facts.values:
            if value.kind is Kind.MODULE and value.class_value is not None:
                if class_places_itself(value.class_value):
                    value.explicit = Place.DEVICE  # its __init__ puts its layers where they go
                elif not class_holds_state(value.class_value):
                    value.stateful = False  # only a forward(): like nn.ReLU, nothing to move
        # A script that places values on the GPU itself is judged against its authors' placements: what
        # they left on the CPU is a finding only where it meets what they put on the device. (A device
        # picked but never used is a migration begun: judged as a CPU script.)
        aware = facts.places_on_device or bool(facts.hardcoded)
        for value in () if aware else facts.values:
            if value.kind is Kind.MODULE and value.used and value.stateful and not value.escaped \
                    and not _only_fed_unknown_values(value):
                facts.bound.add(id(value))
                pending = list(value.alternatives)  # the models other branches would have built
                while pending:
                    other = pending.pop()
                    if id(other) not in facts.bound and other.stateful and not other.escaped \
                            and other.explicit is None:
                        facts.bound.add(id(other))
                        pending.extend(other.alternatives)
        for value in () if aware else facts.method_results:
            facts.bound.add(id(value))  # init_hidden()'s state: made for the module that returns it
        changed = True
        while changed:
            changed = False
            for use in facts.uses:
                # set on "call" and "fed-device" uses, the only ones that read it below
                module = cast(Value, use.module)
                if use.kind == "call" and not module.stateful:
                    if not any(facts.place(v) is Place.DEVICE for v in use.values):
                        continue
                    pulled = use.values
                elif use.kind == "call":
                    if facts.module_place(module, use.time) is not Place.DEVICE:
                        if aware and any(facts.place(v) is Place.DEVICE for v in use.values) \
                                and _bind_owner(module, facts):
                            changed = True  # fed the authors' device tensors
                        continue
                    pulled = use.values
                elif use.kind == "op":
                    if not any(facts.place(v) is Place.DEVICE for v in use.values):
                        continue
                    pulled = use.values
                elif use.kind == "alias":
                    # a later call's argument, where the first call's went
                    if facts.place(use.values[0]) is not Place.DEVICE:
                        continue
                    pulled = use.values[1:]
                elif use.kind == "fed-device":
                    if aware and facts.module_place(module, use.time) is not Place.DEVICE \
                            and _bind_owner(module, facts):
                        changed = True
                    continue
                elif use.kind == "train-tensors":
                    if aware:
                        continue  # the authors chose where their leaves live
                    pulled = use.values  # the leaves an optimizer trains: the script's model
                elif use.kind == "index":
                    if not any(facts.place(v) is Place.DEVICE for v in use.values[1:]):
                        continue
                    pulled = use.values[:1]
                else:
                    continue
                for value in pulled:
                    for root in facts.roots(value):
                        if root.scalar and use.kind == "op" and type(use.node) is not cst.AugAssign:
                            continue  # a 0-dim CPU tensor is fine beside device tensors (not as +='s target)
                        if id(root) not in facts.bound:
                            facts.bound.add(id(root))
                            changed = True


def analyze(module: cst.Module, pinned: frozenset[int] = frozenset(), seeds: Seeds = NO_SEEDS) -> Facts:
    """The facts of a module. ``pinned``: ids of the nodes that make values the user keeps on the CPU;
    ``seeds``: what the rest of the project says about the names this file imports and its callers."""
    return Analyzer(module, pinned, seeds).run()



def _bind_owner(module: Value, facts: Facts) -> bool:
    """Bind for the device the module a move is written for (the outermost one holding ``module`` as a
    layer), where the migration may: stateful, kept in the script, not placed by its authors. Whether
    it was newly bound."""
    while module.attached_to is not None:
        module = module.attached_to
    if module.kind is not Kind.MODULE or not module.stateful or module.escaped or module.explicit is not None \
            or module.moves or id(module) in facts.bound:
        return False
    facts.bound.add(id(module))
    return True


def _only_fed_unknown_values(module: Value) -> bool:
    """A module that a plain object builds for itself, never trained and only ever called with values
    of unknown kind: an image transform's blur, called on what ToTensor made of a PIL image in a data
    set's worker. Moving it would leave its inputs behind, so it stays where the script keeps it."""
    owner = getattr(module.scope, "owner", None)
    return module.fed_unknown_values and not module.fed_known_tensors and not module.trained \
        and owner is not None and owner.kind is Kind.INSTANCE
