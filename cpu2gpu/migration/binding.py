"""Where a value the run met was bound: the loop header, the assignment, the attribute set in a class.

``cpu2gpu migrate`` learns from a run that a value stayed on the CPU (a batch, a tensor, a tensor
attribute, a module) and where it was met: a name, a line, the function running it. The move belongs
where the value is made, not on the failing line (moving it there works once and leaves the next use
broken), so this module reads the file and finds that place. Static, like the rest of ``cpu2gpu/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

Scope = Union[cst.Module, cst.FunctionDef]


@dataclass(frozen=True)
class Evidence:
    """What a run located: the value, where it was met, and how verify classified it."""

    rule: str  # the rule that check would have reported: CG101, CG102, CG103, CG104, CG105
    kind: str  # batch | tensor | attribute | module | numpy | use | conversion | trained | rule
    name: str  # as met on the line: "x", "self.mask", "model"
    line: int  # the line it was met on
    func: str = "<module>"  # the function running that line
    def_line: int = 0  # its first line (a decorator's, as Python counts it); 0 at module level
    batches: tuple = ()  # the loop variables that are batches still on the CPU there (a loop-head move)
    device_from: Optional[str] = None  # a device tensor the function is given: device=x.device
    owner_class: Optional[str] = None  # the class of the module that keeps a tensor attribute
    expressions: tuple = ()  # use / numpy: the CPU (use) or device (numpy) tensors the line reads, as written
    grad: tuple = ()  # numpy: those of them that require grad (copied after .detach())
    leaf: bool = False  # a tensor trained as it is (requires_grad): a .to() copy would not be a leaf


@dataclass
class Binding:
    """The statement that binds the value, and how."""

    how: str  # loop | assign | unpack | attribute
    stmt: cst.CSTNode  # the For, or the statement (Assign / AnnAssign)
    line: int
    scope: Scope
    target_names: tuple = ()  # loop: the names its target binds, in order
    value: Optional[cst.BaseExpression] = None  # assign / attribute: the value bound
    # the line that holds the assignment (unpack: the statement the move follows, a try or an if around it)
    small: Optional[Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]] = None
    in_init_after_super: bool = False  # attribute: set in __init__ after the Module's own __init__
    attribute: str = ""  # attribute: its name on self


@dataclass
class FileReading:
    """One file's tree with the positions of its statements (computed once per repair)."""

    module: cst.Module
    positions: dict = field(default_factory=dict)

    @classmethod
    def of(cls, data: bytes) -> "FileReading":
        wrapper = MetadataWrapper(cst.parse_module(data), unsafe_skip_copy=True)
        return cls(wrapper.module, dict(wrapper.resolve(PositionProvider)))

    def span(self, node: cst.CSTNode) -> CodeRange:
        return self.positions[node]

    def start(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line


def scope_of(reading: FileReading, evidence: Evidence) -> Optional[Scope]:
    """The function (or the module) whose frame met the value."""
    if evidence.def_line == 0 or evidence.func == "<module>":
        return reading.module
    best: Optional[cst.FunctionDef] = None
    for node in _functions(reading.module):
        rng = reading.span(node)
        if not (rng.start.line <= evidence.line <= rng.end.line):
            continue
        if node.name.value == evidence.func and rng.start.line == evidence.def_line:
            return node
        if node.name.value == evidence.func and (best is None or reading.start(node) > reading.start(best)):
            best = node
    return best


def find_binding(reading: FileReading, evidence: Evidence) -> Optional[Binding]:
    """The last statement of the scope, at or before the line, that binds the name."""
    if evidence.name.startswith("self."):
        return _attribute_binding(reading, evidence)
    if "." in evidence.name:
        return None
    scope = scope_of(reading, evidence)
    if scope is None:
        return None
    if isinstance(scope, cst.FunctionDef) and evidence.name in _parameters(scope):
        bindings = _bindings(reading, scope, evidence)
        if not bindings:
            return None  # given by the caller: the caller's frame names where it came from
    else:
        bindings = _bindings(reading, scope, evidence)
    if not bindings and isinstance(scope, cst.FunctionDef):
        # a global the function reads: bound at module level
        bindings = _bindings(reading, reading.module, evidence, any_line=True)
    if not bindings:
        return None
    found = bindings[-1]
    branch = _branch_around(reading, found, evidence.line)
    if branch is not None and isinstance(found.stmt, cst.Assign):
        # `try: x, y = next(it)` / `except StopIteration: ...; x, y = next(it)`: bound in one branch or the
        # other, used after them; the move goes after the whole statement, which every path runs through
        return Binding("unpack", found.stmt, reading.start(branch), found.scope, small=branch)
    return found


def _branch_around(reading: FileReading, binding: Binding, use_line: int) -> Optional[Union[cst.Try, cst.If]]:
    """The compound statement (try, if) in the block of the use that holds the binding but not the use:
    where a value bound in one of its branches is moved for every path. None where there is none."""
    if binding.how not in ("assign", "unpack") or binding.small is None:
        return None
    inner = reading.span(binding.small)
    block: Sequence[cst.CSTNode] = binding.scope.body if isinstance(binding.scope, cst.Module) \
        else _block(binding.scope.body)
    while True:
        holder = next((s for s in block if reading.span(s).start.line <= inner.start.line
                       and inner.end.line <= reading.span(s).end.line), None)
        if holder is None or holder is binding.small:
            return None
        rng = reading.span(holder)
        if not rng.start.line <= use_line <= rng.end.line:
            return holder if isinstance(holder, (cst.Try, cst.If)) else None
        block = [stmt for suite in _suites(holder) if isinstance(suite, cst.IndentedBlock) for stmt in suite.body]


def _bindings(reading: FileReading, scope: Scope, evidence: Evidence, any_line: bool = False) -> list[Binding]:
    name, line = evidence.name, evidence.line
    found: list[Binding] = []
    for stmt in _statements(scope):
        start = reading.start(stmt)
        if not any_line and start > line:
            continue
        if isinstance(stmt, cst.For):
            names = _target_names(stmt.target)
            rng = reading.span(stmt)
            contains = rng.start.line <= line <= rng.end.line
            # a loop's target outlives it (`for x, y in loader: break`, then `model(x)`): moved in its body
            if name in names and (contains or any_line or rng.end.line < line):
                found.append(Binding("loop", stmt, start, scope, tuple(names)))
            continue
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    t = target.target
                    if isinstance(t, cst.Name) and t.value == name and len(small.targets) == 1:
                        found.append(Binding("assign", small, start, scope, value=small.value, small=stmt))
                    elif name in _target_names(t):
                        found.append(Binding("unpack", small, start, scope, small=stmt))
            elif isinstance(small, cst.AnnAssign) and small.value is not None \
                    and isinstance(small.target, cst.Name) and small.target.value == name:
                found.append(Binding("assign", small, start, scope, value=small.value, small=stmt))
    found.sort(key=lambda b: b.line)
    return found


def _attribute_binding(reading: FileReading, evidence: Evidence) -> Optional[Binding]:
    """``self.mask = ...`` in the class whose method met ``self.mask`` (its first binding in __init__,
    else the last one before the line in that method)."""
    attribute = evidence.name.split(".")[1]
    if evidence.name.count(".") != 1:
        return None
    scope = scope_of(reading, evidence)
    klass = _class_around(reading, scope) if isinstance(scope, cst.FunctionDef) else None
    if klass is None and evidence.owner_class:
        klass = next((c for c in _classes(reading.module) if c.name.value == evidence.owner_class), None)
    if klass is None:
        return None
    candidates: list[Binding] = []
    for method in klass.body.body:
        if not isinstance(method, cst.FunctionDef):
            continue
        after_super = False
        for stmt in _statements(method):
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if _calls_init(small):
                    after_super = True
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    continue
                t = small.targets[0].target
                if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self" \
                        and t.attr.value == attribute:
                    candidates.append(Binding("attribute", small, reading.start(stmt), method, value=small.value,
                                              small=stmt, attribute=attribute,
                                              in_init_after_super=method.name.value == "__init__" and after_super))
    init = [b for b in candidates if isinstance(b.scope, cst.FunctionDef) and b.scope.name.value == "__init__"]
    if init:
        return init[0]
    return candidates[-1] if candidates else None


def _calls_init(small: cst.BaseSmallStatement) -> bool:
    """``super().__init__(...)`` / ``nn.Module.__init__(self)``."""
    if not isinstance(small, cst.Expr) or not isinstance(small.value, cst.Call):
        return False
    func = small.value.func
    return isinstance(func, cst.Attribute) and func.attr.value == "__init__"


# -- walking one scope (not into nested functions and classes) ---------------------------------


def _statements(scope: Scope) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []
    body: Sequence[cst.CSTNode] = scope.body if isinstance(scope, cst.Module) else _block(scope.body)
    _collect(body, out)
    return out


def _block(suite: cst.BaseSuite) -> Sequence[cst.CSTNode]:
    if isinstance(suite, cst.IndentedBlock):
        return suite.body
    return ()  # a one-line body (`def f(): return x`) binds nothing a move could follow


def _collect(body: Sequence[cst.CSTNode], out: list[cst.CSTNode]) -> None:
    for stmt in body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        out.append(stmt)
        for suite in _suites(stmt):
            if isinstance(suite, cst.IndentedBlock):
                _collect(suite.body, out)


def _suites(stmt: cst.CSTNode) -> list[cst.BaseSuite]:
    suites: list[cst.BaseSuite] = []
    if isinstance(stmt, (cst.For, cst.While, cst.If, cst.With, cst.Try, cst.TryStar)):
        suites.append(stmt.body)
    orelse = getattr(stmt, "orelse", None)
    while orelse is not None:
        suites.append(orelse.body)
        orelse = getattr(orelse, "orelse", None) if isinstance(orelse, cst.If) else None
    for handler in getattr(stmt, "handlers", ()):
        suites.append(handler.body)
    final = getattr(stmt, "finalbody", None)
    if final is not None:
        suites.append(final.body)
    return suites


def target_names(target: cst.BaseExpression) -> list[str]:
    """The names an assignment or loop target binds, in order."""
    return _target_names(target)


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _target_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return []
    return []


def _parameters(func: cst.FunctionDef) -> set[str]:
    p = func.params
    names = {param.name.value for param in (*p.posonly_params, *p.params, *p.kwonly_params)}
    for star in (p.star_arg, p.star_kwarg):
        if isinstance(star, cst.Param):
            names.add(star.name.value)
    return names


def _functions(node: cst.CSTNode) -> list[cst.FunctionDef]:
    out: list[cst.FunctionDef] = []

    class Collect(cst.CSTVisitor):
        def visit_FunctionDef(self, fn: cst.FunctionDef) -> None:
            out.append(fn)

    node.visit(Collect())
    return out


def _classes(node: cst.CSTNode) -> list[cst.ClassDef]:
    out: list[cst.ClassDef] = []

    class Collect(cst.CSTVisitor):
        def visit_ClassDef(self, klass: cst.ClassDef) -> None:
            out.append(klass)

    node.visit(Collect())
    return out


def _class_around(reading: FileReading, func: cst.FunctionDef) -> Optional[cst.ClassDef]:
    for klass in _classes(reading.module):
        if any(stmt is func for stmt in klass.body.body):
            return klass
    return None


def parameters_of(scope: Scope) -> set[str]:
    return _parameters(scope) if isinstance(scope, cst.FunctionDef) else set()
