"""Turn what a run located into an edit at the value's binding, in the rewrite's own style.

- a batch of a loop: the loop-head move, ``x, y = x.to(device), y.to(device)``, for every batch of
  that loop still on the CPU;
- a tensor bound by ``name = ...``: ``device=`` on a torch factory, else ``.to(device)`` chained there;
- a tensor kept as a plain attribute of a module: ``self.register_buffer("mask", ..., persistent=False)``
  in ``__init__`` (moved with the module, left out of the checkpoint as a plain attribute was);
- a module: ``.to(device)`` chained where it is bound;
- a name bound by unpacking (``a, b = f()``): ``a = a.to(device)`` right after.

The device is taken as the rewrite takes it in that file: a device tensor the function is given
(``x.device``), a ``device`` parameter, the file's device variable; else the file gets the rewrite's
device line after its imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import libcst as cst

from ..analysis import analyze
from ..analysis.facts import Facts
from ..engine import SourceError, rewrite_data, select_rules
from ..rewrite.fixes import (Edit, InsertAfter, InsertAtLoopStart, Replace, add_keyword, apply_edits, chain_to, method_call,
                     plan_device_setup, replaced_by)
from ..sources.syntax import python_syntax_error
from ..analysis.torchapi import FACTORIES, TENSOR_ARGUMENT_FACTORIES
from ..rules import RULES_BY_CODE
from ..rules.runtimeside import REGISTERED_NAMES
from .aliases import with_registered_names
from .atuse import conversions_on_device, host_copies, moves_at_use, statement_at
from .binding import Binding, Evidence, FileReading, find_binding, parameters_of, scope_of, target_names
from .leaves import leaf_factory, trained_factories

_DEVICE_PARAMETERS = ("device", "dev", "torch_device")
# Draws on the device come from its own generator: other numbers than the CPU run's. Drawn on the CPU
# and copied, the migrated run keeps the original's data, and verify can compare the losses.
_RANDOM_FACTORIES = frozenset({"torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.normal",
                               "torch.bernoulli_"})


@dataclass
class Repair:
    """The file's new bytes and what was done, for the report."""

    data: bytes
    line: int  # the binding's line (where check should have reported the value)
    how: str  # loop | assign | unpack | attribute
    edit: str  # the new or changed code, as one line


def repair(data: bytes, evidence: Evidence) -> Optional[Repair]:
    """The edit for ``evidence`` in this file, or None when its binding cannot be found or changed."""
    try:
        reading = FileReading.of(data)
    except cst.ParserSyntaxError:
        return None
    if evidence.kind == "numpy":
        return _host_copy(reading, evidence)
    if evidence.kind == "trained":
        return _trained_leaves(reading)
    if evidence.kind in ("use", "conversion"):
        return _at_use(reading, evidence)
    binding = find_binding(reading, evidence)
    if binding is None:
        return None
    facts = analyze(reading.module)
    device, setup = _device(reading, facts, binding, evidence)
    edits, shown = _edits(binding, evidence, device, facts)
    fixed = _made(reading, facts, edits, setup, binding.line, binding.how, shown)
    return None if fixed is None or fixed.data == data else fixed


def rule_fix(data: bytes, path: str, code: str, line: int) -> Optional[Repair]:
    """The engine's own fix of rule ``code`` in this file (unsafe ones too: the run that follows is the
    proof), for a cause a run located but no binding edit repairs: a layer kept in a plain list
    (CG109), a layer built in forward (CG111)."""
    if code not in RULES_BY_CODE:
        return None
    source = data
    how = RULES_BY_CODE[code].runtime.repair
    if how is not None and how.prepare == REGISTERED_NAMES:
        # a list of the buffers' locals is the list of the buffers: written so, the rule (CG114) reads it
        try:
            named = with_registered_names(cst.parse_module(data))
        except cst.ParserSyntaxError:
            named = None
        source = named.bytes if named is not None else data
    try:
        new = rewrite_data(source, path, select_rules(select=[code]), unsafe_fixes=True)[1]
    except SourceError:
        return None
    if new == source:
        return None
    changed, text = _first_changed_line(data, new)
    return Repair(new, changed or line, "rule", text)


def _first_changed_line(old: bytes, new: bytes) -> tuple[int, str]:
    """The first line that differs, and its new text."""
    for number, (a, b) in enumerate(zip(old.splitlines(), new.splitlines()), start=1):
        if a != b:
            return number, b.decode("utf-8", errors="replace").strip()
    return 0, ""


def _at_use(reading: FileReading, evidence: Evidence) -> Optional[Repair]:
    """A tensor no name binds, moved on the statement where it met the device: an object's attribute or a
    container's item (``net(ds.features.to(device))``), a conversion (``torch.from_numpy(m).to(x.device)``)."""
    stmt = statement_at(reading, evidence.line)
    scope = scope_of(reading, evidence)
    if stmt is None or scope is None:
        return None
    facts = analyze(reading.module)
    at = Binding("use", stmt, evidence.line, scope)
    device, setup = _device(reading, facts, at, evidence)
    if evidence.kind == "use":
        edits, shown = moves_at_use(stmt, evidence.expressions, device)
    else:
        edits, shown = conversions_on_device(stmt, facts, device)
    return _made(reading, facts, edits, setup, evidence.line, evidence.kind, shown)


def _trained_leaves(reading: FileReading) -> Optional[Repair]:
    """``device=`` on the factory of every leaf an optimizer of the file trains."""
    facts = analyze(reading.module)
    edits: list[Edit] = []
    shown, line, setup = "", 0, False
    for factory, scope, at_line in trained_factories(reading, facts):
        device, needs = _device(reading, facts, Binding("use", factory, at_line, scope), Evidence("CG102", "", "", 0))
        made = add_keyword(factory, "device", cst.parse_expression(device))
        edits.append(replaced_by(factory, made))
        setup = setup or needs
        if not line:
            line, shown = reading.start(factory), _code(made)
    return _made(reading, facts, edits, setup, line, "factory", shown)


def _made(reading: FileReading, facts: Facts, edits: list, setup: bool, line: int, how: str,
          shown: str) -> Optional[Repair]:
    if not edits:
        return None
    if setup:
        edits.extend(plan_device_setup(reading.module, facts.torch_alias, facts.names_in_use).setup_edits(
            reading.module, edits))
    new = apply_edits(reading.module, edits).bytes
    if python_syntax_error(new):
        return None
    return Repair(new, line, how, shown)


def _host_copy(reading: FileReading, evidence: Evidence) -> Optional[Repair]:
    """CG107's fix on the line that ran it: ``t.numpy()`` -> ``t.cpu().numpy()`` (after ``.detach()``), and
    ``np.asarray(t)`` -> ``np.asarray(t.cpu())`` for the device tensors the run saw handed to NumPy."""
    stmt = statement_at(reading, evidence.line)
    edits: list[Edit] = []
    shown = ""
    if stmt is not None and evidence.expressions:
        edits, shown = host_copies(stmt, analyze(reading.module), evidence.expressions, evidence.grad)
    for node, rng in reading.positions.items():
        if not (isinstance(node, cst.Call) and rng.start.line <= evidence.line <= rng.end.line and not node.args):
            continue
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "numpy"):
            continue
        receiver = func.value
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) \
                and receiver.func.attr.value == "cpu":
            continue
        moved = func.with_changes(value=method_call(receiver, "cpu"))
        edits.append(replaced_by(func, moved))
        shown = _code(node.with_changes(func=moved))
    if not edits:
        return None
    new = apply_edits(reading.module, edits).bytes
    if python_syntax_error(new):
        return None
    return Repair(new, evidence.line, "host", shown)


def _edits(binding: Binding, evidence: Evidence, device: str, facts: Facts) -> tuple[list[Edit], str]:
    torch_name = facts.torch_alias or "torch"
    if evidence.leaf:  # trained as it is: made on the device, never a .to() copy
        factory = leaf_factory(binding.value, facts) if binding.value is not None else None
        if factory is None:
            return [], ""
        made = add_keyword(factory, "device", cst.parse_expression(device))
        return [replaced_by(factory, made)], _code(made)
    if binding.how == "loop":
        assert isinstance(binding.stmt, cst.For)
        names = [n for n in binding.target_names if n in evidence.batches or n == evidence.name]
        names = list(dict.fromkeys(names))
        code = f"{', '.join(names)} = {', '.join(f'{n}.to({device})' for n in names)}"
        return [InsertAtLoopStart(binding.stmt, code)], code
    if binding.how == "unpack":
        assert binding.small is not None and isinstance(binding.stmt, cst.Assign)
        # the names it binds that were CPU tensors there too: `x, y = x.to(device), y.to(device)`, once
        bound = [n for t in binding.stmt.targets for n in target_names(t.target)]
        names = [n for n in bound if n == evidence.name or n in evidence.batches]
        names = list(dict.fromkeys(names))
        code = f"{', '.join(names)} = {', '.join(f'{n}.to({device})' for n in names)}"
        return [InsertAfter(binding.small, code)], code
    value = binding.value
    if value is None:
        return [], ""
    if binding.how == "attribute" and binding.in_init_after_super and evidence.kind == "attribute":
        def register(node: cst.CSTNode, attribute=binding.attribute) -> cst.CSTNode:
            assert isinstance(node, cst.Assign)
            call = cst.parse_expression(f'self.register_buffer("{attribute}", VALUE, persistent=False)')
            assert isinstance(call, cst.Call)
            args = list(call.args)
            args[1] = args[1].with_changes(value=node.value)
            return cst.Expr(call.with_changes(args=args))

        shown = f'self.register_buffer("{binding.attribute}", {_code(value)}, persistent=False)'
        return [Replace(binding.stmt, register)], shown
    if evidence.kind != "module" and _is_factory(value, torch_name):
        assert isinstance(value, cst.Call)
        new_value: cst.BaseExpression = add_keyword(value, "device", cst.parse_expression(device))
    else:
        new_value = chain_to(value, device)
    target = _code(binding.stmt.targets[0].target) if isinstance(binding.stmt, cst.Assign) else evidence.name
    return [replaced_by(value, new_value)], f"{target} = {_code(new_value)}"


def _is_factory(value: cst.BaseExpression, torch_name: str) -> bool:
    """``torch.zeros(...)`` without a device: the factory takes ``device=`` (not torch.normal(mean, std))."""
    if not isinstance(value, cst.Call):
        return False
    dotted = _dotted(value.func)
    if dotted is None or not dotted.startswith(torch_name + "."):
        return False
    qualified = "torch." + dotted[len(torch_name) + 1:]
    if qualified not in FACTORIES or qualified in TENSOR_ARGUMENT_FACTORIES or qualified in _RANDOM_FACTORIES:
        return False
    return not any(a.keyword is not None and a.keyword.value == "device" for a in value.args)


def _dotted(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr.value}"
    return None


def _device(reading: FileReading, facts: Facts, binding: Binding, evidence: Evidence) -> tuple[str, bool]:
    """The device expression for a move at ``binding``, and whether the file needs the device line."""
    params = parameters_of(binding.scope)
    if evidence.device_from and evidence.device_from in params:
        return f"{evidence.device_from}.device", False
    for name in _DEVICE_PARAMETERS:
        if name in params:
            return name, False
    for name in facts.device_names:
        if name.isidentifier() and _bound_before(reading, name, binding):
            return name, False
    setup = plan_device_setup(reading.module, facts.torch_alias, facts.names_in_use)
    return setup.name, True


def _bound_before(reading: FileReading, name: str, binding: Binding) -> bool:
    """A module-level variable bound before the move runs: anywhere for code in a function (it runs
    after the module's own code), above the binding for module-level code."""
    for stmt in reading.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            targets = small.targets if isinstance(small, cst.Assign) else ()
            if any(isinstance(t.target, cst.Name) and t.target.value == name for t in targets):
                if not isinstance(binding.scope, cst.Module) or reading.start(stmt) < binding.line:
                    return True
    return False


def _code(node: cst.CSTNode) -> str:
    return " ".join(cst.Module(body=[]).code_for_node(node).split())
