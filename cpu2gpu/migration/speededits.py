"""The static half of ``migrate --speed``: the edit that removes one cause a device run ranked (runtime's
speed.findings), at the line it named, and only where its form is known to keep the numbers.

- ``workers``: the DataLoader at that line prepares its batches on the main process: ``num_workers=4``
  and ``persistent_workers=True`` (the alternative without it is offered next, since a persistent
  worker's iterator is made once and so draws its seed from the global generator only once). Only in a
  file with an ``if __name__ == "__main__":`` guard: workers started by spawn or forkserver (Windows,
  macOS, Python 3.14's Linux default) import the script again, and without the guard they run it again;
- ``pinned``: batches copied from pageable memory, or from pinned memory but waiting for each copy:
  ``pin_memory=torch.cuda.is_available()`` in their DataLoader (as the rewrite writes it: a CPU-only
  machine has nothing to pin into) and ``non_blocking=True`` on the moves at the copying line;
- ``on_device``: a tensor made on the host every step and then moved (``torch.zeros(n).to(device)``):
  made on the device (``torch.zeros(n, device=device)``), for the factories that make their values in
  place; a draw (``torch.randn``) would come from the device's own generator, which changes the numbers,
  and ``torch.tensor(data)`` copies its host data whichever way, so neither is edited;
- ``move_once``: a slice of a long-lived CPU tensor (``x_all[i:j].to(device)``), or the same tensor,
  copied every step: the whole tensor moved once, right before the outermost loop that copies it
  (``x_all = x_all.to(device)``), where the tensor is bound before that loop and not rebound in it; the
  slices then are the device's (their ``.to(device)`` does nothing). The caller judges its size;
- ``sum_on_device``: a running sum of values read back every step (``total += loss.item()``) is kept on
  the device (``total += loss.detach().double()`` for a floating value: float64, as Python's float sums
  it, so the printed sums stay the same; ``.detach()`` for a count) and read where the script reads it
  (``float(total)``): one host synchronisation where the script prints instead of one a step;
- ``cudnn_benchmark``: convolutions of fixed shapes without ``torch.backends.cudnn.benchmark``: set
  after the device line.

Each function returns the edits to try in order (the first that keeps the losses stays), or the reason
why this code gets none. torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union, cast

import libcst as cst
import libcst.matchers as m

from ..analysis.core import keyword_arg
from ..analysis.imports import ImportTable
from ..rewrite.fixes import Edit, InsertAfter, add_keyword, apply_edits, replaced_by
from .binding import FileReading

WORKERS = 4  # a DataLoader's worker processes: what most training machines' cores allow beside the main one
# factories that make their values where they are: on the device, no copy is left (torch.tensor(data) still
# copies its host data there, so it is not one of them)
_MADE_IN_PLACE = frozenset({"zeros", "ones", "full", "empty", "arange", "eye", "linspace", "logspace"})
_HOST_DATA = frozenset({"tensor", "as_tensor", "from_numpy", "asarray", "Tensor", "FloatTensor", "LongTensor",
                        "IntTensor", "DoubleTensor", "HalfTensor", "ByteTensor", "BoolTensor", "ShortTensor"})
_DRAWS = ("rand", "normal", "bernoulli", "multinomial", "poisson")


@dataclass(frozen=True)
class SpeedEdit:
    """One speed edit: the file's new bytes, where, and what it does."""

    kind: str  # workers | pinned | on_device | sum_on_device | cudnn_benchmark
    data: bytes
    line: int  # the line edited (in the bytes given)
    edit: str  # the new code of that line
    how: str  # in words, for the report


Outcome = Union[list[SpeedEdit], str]  # the edits to try, in order; or why none


def _read(data: bytes) -> Optional[FileReading]:
    try:
        return FileReading.of(data)
    except cst.ParserSyntaxError:
        return None


def _calls_named(reading: FileReading, name: str, line: int) -> list[cst.Call]:
    """The calls of ``name`` (``name(...)`` or ``x.name(...)``) that span ``line``, the innermost first."""
    found = []
    for node, rng in reading.positions.items():
        if isinstance(node, cst.Call) and _last_name(node.func) == name and rng.start.line <= line <= rng.end.line:
            found.append(node)
    return sorted(found, key=lambda c: -reading.start(c))


def _last_name(func: cst.BaseExpression) -> str:
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return ""


def _literal(arg: Optional[cst.Arg]) -> Optional[str]:
    if arg is None:
        return None
    return cst.Module([]).code_for_node(arg.value)


def _set_keyword(call: cst.Call, name: str, value: str) -> cst.Call:
    """``name=value`` in the call: its value replaced where given, else appended."""
    expr = cst.parse_expression(value)
    if keyword_arg(call, name) is not None:
        return call.with_changes(args=[a.with_changes(value=expr) if a.keyword is not None and a.keyword.value == name
                                       else a for a in call.args])
    return add_keyword(call, name, expr)


def _made(reading: FileReading, edits: Sequence[Edit], kind: str, line: int, how: str) -> SpeedEdit:
    new = apply_edits(reading.module, edits).code.encode("utf-8")
    return SpeedEdit(kind, new, line, _line_of(new, line), how)


def _line_of(data: bytes, line: int) -> str:
    lines = data.splitlines()
    return lines[line - 1].decode("utf-8", errors="replace").strip() if 0 < line <= len(lines) else ""


def _torch_name(module: cst.Module) -> str:
    """The name the file imports torch as (``import torch as th``), else ``torch``: the analysis' import table."""
    table = ImportTable()
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    table.add(small)
    return table.torch_alias or "torch"


def _has_main_guard(module: cst.Module) -> bool:
    main = m.Comparison(left=m.Name("__name__"), comparisons=[m.ComparisonTarget(operator=m.Equal(),
                                                                               comparator=m.SimpleString())])
    flipped = m.Comparison(left=m.SimpleString(), comparisons=[m.ComparisonTarget(operator=m.Equal(),
                                                                                comparator=m.Name("__name__"))])
    return any(isinstance(stmt, cst.If) and (m.matches(stmt.test, main) or m.matches(stmt.test, flipped))
               and "__main__" in cst.Module([]).code_for_node(stmt.test) for stmt in module.body)


def _loader_call(reading: FileReading, line: int) -> Union[cst.Call, str]:
    calls = _calls_named(reading, "DataLoader", line)
    if not calls:
        return f"no DataLoader(...) call at line {line}"
    call = calls[0]
    if any(a.star for a in call.args):
        return "the DataLoader's arguments are passed with * or **: which ones it gets is not known here"
    if sum(1 for a in call.args if a.keyword is None) > 5:
        return "the DataLoader's num_workers is given by position"
    return call


def workers(data: bytes, line: int) -> Outcome:
    """num_workers (and persistent_workers) for the DataLoader at ``line``."""
    reading = _read(data)
    if reading is None:
        return "the file cannot be parsed"
    call = _loader_call(reading, line)
    if isinstance(call, str):
        return call
    given = _literal(keyword_arg(call, "num_workers"))
    if given is not None and given != "0":
        return f"num_workers is set by the script ({given}): the script's own setting is left to its user"
    if not _has_main_guard(reading.module):
        return ("the script has no `if __name__ == \"__main__\":` guard: worker processes started by spawn or "
                "forkserver (Windows, macOS, Python 3.14 on Linux) would run it again")
    out = []
    with_persistent = _set_keyword(_set_keyword(call, "num_workers", str(WORKERS)), "persistent_workers", "True") \
        if keyword_arg(call, "persistent_workers") is None else _set_keyword(call, "num_workers", str(WORKERS))
    start = reading.start(call)
    out.append(_made(reading, [replaced_by(call, with_persistent)], "workers", start,
                     f"{WORKERS} worker processes prepare the batches, kept between epochs"))
    if keyword_arg(call, "persistent_workers") is None:
        plain = _set_keyword(call, "num_workers", str(WORKERS))
        out.append(_made(reading, [replaced_by(call, plain)], "workers", start,
                         f"{WORKERS} worker processes prepare the batches"))
    return out


def pinned(data: bytes, loader_lines: Sequence[int], copy_line: int) -> Outcome:
    """pin_memory=True in the DataLoaders at ``loader_lines`` and non_blocking=True on the moves at
    ``copy_line``."""
    reading = _read(data)
    if reading is None:
        return "the file cannot be parsed"
    edits: list[Edit] = []
    loaders = [c for c in (_loader_call(reading, line) for line in loader_lines) if not isinstance(c, str)]
    for call in loaders:
        if _literal(keyword_arg(call, "pin_memory")) not in (None, "False"):
            continue  # pinned already (the rewrite's pin_memory=torch.cuda.is_available()): the moves are left
        pinned_call: cst.Call = _set_keyword(call, "pin_memory", f"{_torch_name(reading.module)}.cuda.is_available()")
        edits.append(replaced_by(call, pinned_call))
    moves = [c for c in _calls_named(reading, "to", copy_line) + _calls_named(reading, "cuda", copy_line)
             if reading.start(c) == copy_line and keyword_arg(c, "non_blocking") is None
             and isinstance(c.func, cst.Attribute) and not any(a.star for a in c.args)]
    if not moves:
        return f"no .to(...) or .cuda() without non_blocking at line {copy_line}"
    if not loaders:
        return "the DataLoader of these batches was not found in this file (pin_memory is set where it is made)"
    for call in moves:
        if _last_name(call.func) == "to" and len([a for a in call.args if a.keyword is None]) > 1:
            continue  # .to(device, dtype) given by position: non_blocking would be a third
        new = add_keyword(call, "non_blocking", cst.Name("True"))
        edits.append(replaced_by(call, new))
    return [_made(reading, edits, "pinned", copy_line,
                  "the batches come in pinned memory and are copied with non_blocking=True")]


def on_device(data: bytes, line: int) -> Outcome:
    """``torch.F(args).to(dev)`` at ``line`` -> ``torch.F(args, device=dev)`` for a factory whose values
    are the same wherever it makes them."""
    reading = _read(data)
    if reading is None:
        return "the file cannot be parsed"
    edits: list[Edit] = []
    drawn = host = ""
    for call in _calls_named(reading, "to", line):
        func = call.func
        if not isinstance(func, cst.Attribute) or len(call.args) != 1 or call.args[0].keyword is not None \
                or call.args[0].star:
            continue
        if not isinstance(func.value, cst.Call):  # (0.1 * torch.randn(...)).to(device): what does it make?
            drawn = drawn or next((_last_name(c.func) for c in _nodes(func.value, cst.Call)
                                   if _last_name(c.func).startswith(_DRAWS)), "")
            continue
        inner = func.value
        name = _last_name(inner.func)
        if not (isinstance(inner.func, cst.Attribute) and _last_name(inner.func.value) in ("torch", "th")):
            continue
        if name in _HOST_DATA:
            host = host or name
            continue
        if name.startswith(_DRAWS):
            drawn = drawn or name
            continue
        if name not in _MADE_IN_PLACE:
            continue
        if keyword_arg(inner, "device") is not None or any(a.star for a in inner.args):
            continue
        new = add_keyword(inner, "device", call.args[0].value)
        edits.append(replaced_by(call, new))
    if not edits:
        if host:
            return (f"torch.{host} copies its host data to the device whichever way it is made: moving the data "
                    f"to the device once, before the loop, is left to the script's author")
        if drawn:
            return (f"torch.{drawn} here would draw from the device's own generator, which changes the numbers "
                    f"(not made: the migration keeps the original's random stream)")
        return f"no torch factory moved with .to(device) at line {line}"
    return [_made(reading, edits, "on_device", line, "made on the device instead of copied there every step")]


def move_once(data: bytes, line: int) -> Outcome:
    """``NAME = NAME.to(dev)`` before the outermost loop around ``line``, whose ``NAME[...].to(dev)`` (or
    ``NAME.to(dev)``) copies the same tensor's data every step."""
    reading = _read(data)
    if reading is None:
        return "the file cannot be parsed"
    moves = [c for c in _calls_named(reading, "to", line) + _calls_named(reading, "cuda", line)
             if reading.start(c) == line and isinstance(c.func, cst.Attribute) and not any(a.star for a in c.args)]
    for call in moves:
        assert isinstance(call.func, cst.Attribute)
        receiver = call.func.value
        if isinstance(receiver, cst.Subscript):
            receiver = receiver.value
        if not isinstance(receiver, cst.Name):
            continue
        name = receiver.value
        scope = _scope_of(reading, call)
        loop = _outermost_loop(reading, scope, line) if scope is not None else None
        if scope is None or loop is None:
            return "the copy is in no loop of its function"
        if any(isinstance(t, cst.Name) and t.value == name for t in _stored_names(loop)):
            return f"{name} is bound again inside the loop: it is not one tensor to move once"
        if not any(reading.start(t) < reading.start(loop) for t in _stored_names(scope)
                   if isinstance(t, cst.Name) and t.value == name):
            return f"{name} is not bound before the loop in the same function"
        args = ", ".join(cst.Module([]).code_for_node(a) for a in call.args)
        code = f"{name} = {name}.{_last_name(call.func)}({args})"
        statement = cst.parse_statement(code)
        loop_start = reading.start(loop)
        # the move and the loop in the loop's place; the comments above the loop go above the move
        both = cst.FlattenSentinel([statement.with_changes(leading_lines=loop.leading_lines),
                                    loop.with_changes(leading_lines=[])])
        edit = replaced_by(loop, cast(cst.CSTNode, both))
        return [_made(reading, [edit], "move_once", loop_start,
                      f"{name} is moved to the device once, before the loop, instead of copied in slices every step")]
    return f"no .to(...) or .cuda() of a name or of its slice at line {line}"


def _outermost_loop(reading: FileReading, scope: cst.CSTNode, line: int) -> Optional[cst.BaseCompoundStatement]:
    """The outermost for/while of ``scope`` (not of a function nested in it) that holds ``line``."""
    inner = {id(n) for f in _inner_functions(scope) for n in _nodes(f, (cst.For, cst.While))}
    loops = [n for n in _nodes(scope, (cst.For, cst.While)) if id(n) not in inner
             and reading.start(n) <= line <= reading.span(n).end.line]
    return min(loops, key=reading.start) if loops else None


def _stored_names(root: cst.CSTNode) -> list[cst.CSTNode]:
    """The names ``root`` binds: assignment, augmented and annotated targets, loop and with targets."""
    out: list[cst.CSTNode] = []
    for node in _nodes(root, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor, cst.WithItem)):
        target = node.asname if isinstance(node, cst.WithItem) else getattr(node, "target", None)
        if target is not None:
            out += [n for n in _nodes(target, cst.Name)]
    return out


def sum_on_device(data: bytes, line: int, floating: bool = False) -> Outcome:
    """``total += x.item()`` at ``line`` -> ``total += x.detach()``, and ``float(total)`` where the script
    reads ``total``. ``floating``: the value read is a floating-point one (the run saw its dtype), summed as
    ``x.detach().double()``: in float64, as Python's float sums it, so the sums it prints stay the same."""
    reading = _read(data)
    if reading is None:
        return "the file cannot be parsed"
    found = None
    for node, rng in reading.positions.items():
        if isinstance(node, cst.AugAssign) and rng.start.line == line and isinstance(node.operator, cst.AddAssign) \
                and isinstance(node.target, cst.Name):
            found = node
    if found is None:
        return "not a running sum (name += value.item()) at this line"
    reads = [c for c in _nodes(found.value, cst.Call) if m.matches(c, m.Call(func=m.Attribute(attr=m.Name("item")),
                                                                             args=[]))]
    if len(reads) != 1:
        return "the running sum reads more or fewer than one value with .item()"
    assert isinstance(found.target, cst.Name)
    name = found.target.value
    scope = _scope_of(reading, found)
    if scope is None or _used_outside(reading.module, scope, name):
        return f"{name} is used outside the function that sums it"
    item = reads[0]
    assert isinstance(item.func, cst.Attribute)
    detached: cst.BaseExpression = item.with_changes(func=item.func.with_changes(attr=cst.Name("detach")))
    if floating:
        detached = cst.Call(func=cst.Attribute(value=detached, attr=cst.Name("double")))
    edits: list[Edit] = [replaced_by(item, detached)]
    for use in _loads(scope, name, skip=found):
        edits.append(replaced_by(use, cst.Call(func=cst.Name("float"), args=[cst.Arg(cst.Name(name))])))
    precision = ("in float64, as Python's float sums it" if floating else
                 "in the value's own dtype (an integer count stays exact)")
    return [_made(reading, edits, "sum_on_device", line,
                  f"{name} sums on the device, {precision}, and is read where the script reads it (float({name}))")]


def cudnn_benchmark(data: bytes, device_line: int) -> Outcome:
    """``torch.backends.cudnn.benchmark = True`` after the statement at ``device_line`` (the device's)."""
    reading = _read(data)
    if reading is None:
        return "the file cannot be parsed"
    if "cudnn.benchmark" in data.decode("utf-8", errors="replace"):
        return "the script sets cudnn.benchmark itself"
    stmt = next((s for s in reading.module.body if isinstance(s, cst.SimpleStatementLine)
                 and reading.start(s) <= device_line <= reading.span(s).end.line), None)
    if stmt is None:
        return "the device line is not a statement of the module's top level"
    return [_made(reading, [InsertAfter(stmt, "torch.backends.cudnn.benchmark = True")], "cudnn_benchmark",
                  reading.span(stmt).end.line + 1,
                  "cuDNN times its algorithms for each shape of convolution once and keeps the fastest")]


# -- scopes ---------------------------------------------------------------------------------------

def _nodes(root: cst.CSTNode, kind: Union[type, tuple[type, ...]]) -> list:
    found: list = []

    class _Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kind):
                found.append(node)
            return True

    root.visit(_Collect())
    return found


def _scope_of(reading: FileReading, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The innermost function holding ``node``, else the module."""
    line = reading.start(node)
    best: cst.CSTNode = reading.module
    for fn, rng in reading.positions.items():
        if isinstance(fn, (cst.FunctionDef, cst.Lambda)) and rng.start.line <= line <= rng.end.line:
            if best is reading.module or reading.start(fn) >= reading.start(best):
                best = fn
    return None if isinstance(best, cst.Lambda) else best


def _inner_functions(scope: cst.CSTNode) -> list[cst.CSTNode]:
    return [n for n in _nodes(scope, (cst.FunctionDef, cst.Lambda, cst.ClassDef,
                                      cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)) if n is not scope]


def _used_outside(module: cst.Module, scope: cst.CSTNode, name: str) -> bool:
    """Whether ``name`` appears in a function other than ``scope``, or in one nested in it (or is declared
    global or nonlocal): its reads there would not get their float()."""
    inside = {id(n) for n in _names(scope, name)}
    nested = {id(n) for inner in _inner_functions(scope) for n in _names(inner, name)}
    declared = any(name in [n.name.value for n in decl.names]
                   for decl in _nodes(module, (cst.Global, cst.Nonlocal)))
    return declared or bool(nested) or any(id(n) not in inside for n in _names(module, name))


def _names(root: cst.CSTNode, name: str) -> list[cst.Name]:
    return [n for n in _nodes(root, cst.Name) if n.value == name]


def _loads(scope: cst.CSTNode, name: str, skip: cst.AugAssign) -> list[cst.Name]:
    """The reads of ``name`` in ``scope``: every Name but those bound there (``_stored_names``), parameters,
    attribute names and keywords."""
    stores = {id(n) for n in _stored_names(scope)} | {id(skip.target)}
    for node in _nodes(scope, (cst.Param, cst.Attribute, cst.Arg)):
        if isinstance(node, cst.Param):
            stores.add(id(node.name))
        elif isinstance(node, cst.Attribute):
            stores.add(id(node.attr))
        elif node.keyword is not None:
            stores.add(id(node.keyword))
    return [n for n in _names(scope, name) if id(n) not in stores]
