"""What the DDP migration of one file changes, or why it refuses: read, never written here.

The plan is found from the training step outward: the optimizer names the model (``X.parameters()``),
the calls of that model in code that calls ``.backward()`` are the training forward, the loop around
them iterates the training loader. Each is followed back to where it is made (index.py); anything the
migration cannot follow with certainty is a refusal with its reason, never half a migration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Union

import libcst as cst

from ..analysis import torchapi as api
from ..analysis.imports import dotted
from .index import FileIndex, Scope, code_of, own_nodes, preorder

# Attributes that mean the same on the DDP wrapper and on the model: everything else (state_dict,
# load_state_dict, custom methods, sub-layers) goes through ``.module``.
SAFE_ON_WRAPPER = frozenset({
    "forward",  # DDP's own forward: the gradient synchronisation is set up there
    "train", "eval", "parameters", "named_parameters", "zero_grad", "to", "cuda", "cpu", "float", "double",
    "half", "bfloat16", "requires_grad_", "modules", "named_modules", "children", "named_children", "buffers",
    "named_buffers", "training", "apply", "no_sync", "module", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook",
})
LOADER_WRAPPERS = ("enumerate", "tqdm", "tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "iter")
# Lines that every rank would repeat (or write to one file at once): rank 0 only.
LOGGING_CALLS = ("print", "logging.info", "logging.warning", "logging.debug", "logging.error",
                 "matplotlib.pyplot.show", "matplotlib.pyplot.savefig")
# Files every rank would write at once.
SAVES = ("torch.save", "torchvision.utils.save_image", "numpy.save", "numpy.savez", "numpy.savetxt")
DISTRIBUTED_NAMES = ("torch.distributed", "torch.nn.parallel.DistributedDataParallel",
                     "torch.nn.parallel.distributed", "torch.utils.data.distributed", "torch.utils.data.DistributedSampler",
                     "torch.multiprocessing")


class Refusal(Exception):
    """The file cannot be migrated safely: the reason, in one sentence."""


@dataclass
class Receiver:
    """Where the model is the DDP wrapper: a name in a scope (from ``after`` on), or ``self.attr`` in a class."""

    scope: Optional[Scope]
    name: str
    cls: Optional[cst.ClassDef] = None
    after: Optional[cst.CSTNode] = None  # the wrap statement, in the scope that binds it


@dataclass
class Plan:
    index: FileIndex
    device_name: Optional[str]  # the script's device variable (map_location), if it has one
    wrap_after: cst.BaseStatement
    wrap_target: str  # "model" or "self.model"
    receivers: list[Receiver]
    train_loaders: list[cst.Call]
    set_epochs: list[tuple[cst.BaseStatement, str, str]]  # the loop (or the call of its function), loader, epoch
    eval_loaders: int
    guards: list[cst.SimpleStatementLine]
    loads: list[cst.Call]
    divided_batches: set = field(default_factory=set)  # ids of the loaders whose batch size is divided
    kept_batches: list[str] = field(default_factory=list)  # batch sizes the code reads elsewhere: kept per rank
    mkdirs: list[cst.Call] = field(default_factory=list)  # os.mkdir: made race-free (exist_ok)
    pinned: list[cst.SimpleString] = field(default_factory=list)  # "cuda:0" in the device line -> "cuda"


def refusal_of(module: cst.Module) -> None:
    """Raise the refusal of a script before its device migration (line numbers as the user wrote them)."""
    make_plan(module)


def make_plan(module: cst.Module) -> Plan:
    index = FileIndex.of(module)
    _refuse_distributed(index)
    device_name = _device_variable(index)
    model_name = _model_name(index)
    forwards = _training_forwards(index, model_name)
    wrap_after, wrap_target, receivers = _wrap_point(index, forwards)
    _follow_handoffs(index, receivers)
    loops = _training_loops(index)
    train_loaders: list[cst.Call] = []
    set_epochs: list[tuple[cst.BaseStatement, str, str]] = []
    for loop, loader in loops:
        calls = _loader_calls(index, loader, index.scope_of(loop))
        if not calls:
            raise Refusal(f"the training loop at line {_line(index, loop)} iterates `{code_of(loader)}`, "
                          "which is not a DataLoader this file builds")
        for call in calls:
            _refuse_loader(index, call)
            if call not in train_loaders:
                train_loaders.append(call)
        epoch = _epoch_of(index, loop)
        at_calls = _epoch_at_call_sites(index, loop, loader) if epoch is None else []
        if epoch is not None:
            set_epochs.append((loop, code_of(loader), epoch))
        elif at_calls:
            set_epochs.extend(at_calls)
        elif any(_shuffles(call) for call in calls) and _repeated(index, loop):
            raise Refusal(f"the shuffled loader `{code_of(loader)}` is iterated outside an epoch loop: "
                          "there is no epoch number to give DistributedSampler.set_epoch")
    all_loaders = [node for node in preorder(module) if isinstance(node, cst.Call) and _is_loader_call(index, node)]
    guards = single_process_lines_of(index)
    loads = [node for node in preorder(module) if isinstance(node, cst.Call) and _qualified(index, node.func) == "torch.load"] \
        if device_name else []
    divided, kept = _batch_division(index, train_loaders)
    mkdirs = [node for node in preorder(module) if isinstance(node, cst.Call) and _qualified(index, node.func) == "os.mkdir"]
    return Plan(index, device_name, wrap_after, wrap_target, receivers, train_loaders, set_epochs,
                len(all_loaders) - len(train_loaders), guards, loads, divided, kept, mkdirs, pinned_gpus(index))


# -- refusals ---------------------------------------------------------------------------------


def _refuse_distributed(index: FileIndex) -> None:
    for qualified in index.imports.names.values():
        if qualified.startswith(DISTRIBUTED_NAMES):
            if qualified.startswith("torch.multiprocessing"):
                raise Refusal("the script starts its own processes (torch.multiprocessing): torchrun starts them")
            raise Refusal(f"the script is already distributed ({qualified}); `check --distributed ddp` "
                          "reports the usual DDP mistakes")
    for node in preorder(index.module):
        if isinstance(node, cst.Attribute):
            name = _qualified(index, node) or ""
            if name.startswith(("torch.distributed.", "torch.nn.parallel.DistributedDataParallel")):
                raise Refusal(f"the script is already distributed ({name})")


def _device_line(index: FileIndex) -> Optional[cst.SimpleStatementLine]:
    """The line that binds the script's device (``device = torch.device(... is_available() ...)``), if any."""
    for node in preorder(index.module):
        if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and isinstance(node.body[0], cst.Assign):
            assign = node.body[0]
            target = assign.targets[0].target if len(assign.targets) == 1 else None
            code = code_of(assign.value)
            if isinstance(target, cst.Name) and "is_available()" in code and "device(" in code:
                return node
    return None


def _device_variable(index: FileIndex) -> Optional[str]:
    """The script's device name. Its line needs no change: once each process has set its own GPU
    current, "cuda" is that GPU (a "cuda:0" in it is made "cuda": see pinned_gpus)."""
    line = _device_line(index)
    if line is None:
        return None
    assign = line.body[0]
    target = assign.targets[0].target if isinstance(assign, cst.Assign) else None
    assert isinstance(target, cst.Name)  # what _device_line looked for
    return target.value


def pinned_gpus(index: FileIndex) -> list[cst.SimpleString]:
    """``"cuda:0"`` in the device line: every rank would use GPU 0."""
    line = _device_line(index)
    if line is None:
        return []
    return [node for node in preorder(line) if isinstance(node, cst.SimpleString)
            and isinstance(node.evaluated_value, str) and re.fullmatch(r"cuda:\d+", node.evaluated_value)]


def _batch_division(index: FileIndex, loaders: list[cst.Call]) -> tuple[set, list[str]]:
    """Which training loaders get ``batch_size // world_size`` (the global batch kept): those whose
    batch size is a number, or a name the rest of the code does not read (``x.view(batch_size, -1)``
    or ``torch.zeros(batch_size, ...)`` would no longer match the batches). The others keep their
    batch per process: the global batch grows with the number of processes (said in the summary)."""
    divided, kept = set(), []
    for call in loaders:
        size = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "batch_size"), None)
        if size is None:
            continue
        if isinstance(size, cst.Integer) or not _read_elsewhere(index, size, loaders):
            divided.add(id(call))
        else:
            kept.append(code_of(size))
    return divided, kept


def _read_elsewhere(index: FileIndex, size: cst.BaseExpression, loaders: list[cst.Call]) -> bool:
    code = code_of(size)
    inside = {id(n) for call in loaders for n in preorder(call)}
    for node in preorder(index.module):
        if id(node) in inside or not isinstance(node, (cst.Name, cst.Attribute)) or code_of(node) != code:
            continue
        if _is_assignment_target(index, node):
            continue
        return True
    return False


def _is_assignment_target(index: FileIndex, node: cst.CSTNode) -> bool:
    parent = index.parent(node)
    return isinstance(parent, (cst.AssignTarget, cst.Param)) or (isinstance(parent, cst.AnnAssign) and parent.target is node)


def _model_name(index: FileIndex) -> str:
    names = set()
    for node in preorder(index.module):
        if not isinstance(node, cst.Call):
            continue
        qualified = _qualified(index, node.func) or ""
        if not qualified.startswith("torch.optim.") or "lr_scheduler" in qualified or "swa_utils" in qualified:
            continue
        params = next((a.value for a in node.args if a.keyword is None or a.keyword.value == "params"), None)
        owner = _parameters_owner(params)
        if owner is None:
            raise Refusal(f"the optimizer at line {_line(index, node)} is not given one model's `.parameters()`")
        names.add(owner)
    if not names:
        raise Refusal("no torch.optim optimizer: training without one (manual gradient code) is left as it is")
    if len(names) > 1:
        raise Refusal(f"several models are optimised ({', '.join(sorted(names))}): wrap them by hand")
    return names.pop()


def _parameters_owner(params: Optional[cst.BaseExpression]) -> Optional[str]:
    """``model.parameters()`` or ``self.model.parameters()`` -> "model"."""
    if isinstance(params, cst.Call) and isinstance(params.func, cst.Attribute) and params.func.attr.value == "parameters":
        owner = params.func.value
        if isinstance(owner, cst.Name):
            return owner.value
        if isinstance(owner, cst.Attribute) and isinstance(owner.value, cst.Name) and owner.value.value == "self":
            return owner.attr.value
    return None


# -- the model and where it becomes the wrapper -------------------------------------------------


def _has_backward(index: FileIndex, scope: Scope) -> bool:
    for node in own_nodes(scope):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value == "backward":
                return True
    return False


def _training_forwards(index: FileIndex, model_name: str) -> list[cst.Call]:
    calls = []
    for node in preorder(index.module):
        if not isinstance(node, cst.Call):
            continue
        callee = node.func
        if isinstance(callee, cst.Attribute) and callee.attr.value == "forward":  # model.forward(x)
            callee = callee.value
        if _is_receiver_expr(callee, model_name) and _has_backward(index, index.scope_of(node)):
            calls.append(node)
    if not calls:
        raise Refusal(f"no call of `{model_name}` next to a `.backward()`: the training step was not found")
    return calls


def _is_receiver_expr(node: cst.BaseExpression, name: str) -> bool:
    return (isinstance(node, cst.Name) and node.value == name) or (
        isinstance(node, cst.Attribute) and node.attr.value == name and isinstance(node.value, cst.Name)
        and node.value.value == "self")


def _wrap_point(index: FileIndex, forwards: list[cst.Call]) -> tuple[cst.BaseStatement, str, list[Receiver]]:
    points: dict[int, tuple[cst.BaseStatement, str, list[Receiver]]] = {}
    for call in forwards:
        callee = call.func.value if isinstance(call.func, cst.Attribute) and call.func.attr.value == "forward" \
            and not _is_receiver_expr(call.func, "forward") else call.func
        assert isinstance(callee, (cst.Name, cst.Attribute))  # _training_forwards kept these calls only
        found = _wrap_for(index, callee, index.scope_of(call), call, depth=0)
        points.setdefault(id(found[0]), found)
    if len(points) != 1:
        raise Refusal("the model the training step calls is made in several places: wrap it by hand")
    stmt, target, receivers = next(iter(points.values()))
    return stmt, target, receivers


def _wrap_for(index: FileIndex, expr: Union[cst.Name, cst.Attribute], scope: Scope, use: cst.CSTNode,
              depth: int) -> tuple[cst.BaseStatement, str, list[Receiver]]:
    if depth > 4:
        raise Refusal("the model is handed through too many functions to follow")
    if isinstance(expr, cst.Attribute):  # self.model
        cls = index.class_of(scope) if isinstance(scope, cst.FunctionDef) else None
        bindings = [b for b in index.self_bindings(cls, expr.attr.value)
                    if isinstance(b.scope, cst.FunctionDef) and b.scope.name.value == "__init__"] if cls else []
        if not bindings:
            raise Refusal(f"`self.{expr.attr.value}` is not set in `__init__`")
        after = _out_of_branches(index, bindings[-1].stmt)
        return after, f"self.{expr.attr.value}", [Receiver(None, expr.attr.value, cls, after)]
    name = expr.value
    local = [b for b in index.bindings(name, scope) if index.before(b.stmt, use)]
    if local:
        after = _out_of_branches(index, local[-1].stmt)
        return after, name, [Receiver(scope, name, None, after)]
    if isinstance(scope, cst.FunctionDef) and index.is_parameter(name, scope):
        found: dict[int, tuple] = {}
        for site in index.call_sites(scope):
            argument = index.argument_for(site, scope, name)
            if not isinstance(argument, (cst.Name, cst.Attribute)):
                raise Refusal(f"`{scope.name.value}` is called without a model named at line {_line(index, site)}")
            wrapped = _wrap_for(index, argument, index.scope_of(site), site, depth + 1)
            found.setdefault(id(wrapped[0]), wrapped)
        if len(found) != 1:
            raise Refusal(f"the model `{name}` of `{scope.name.value}` comes from {len(found) or 'no'} places")
        stmt, target, receivers = next(iter(found.values()))
        return stmt, target, receivers + [Receiver(scope, name)]
    outer = index.scope_of(scope) if isinstance(scope, cst.FunctionDef) else None
    if isinstance(outer, cst.FunctionDef):  # a closure: the enclosing function's name
        stmt, target, receivers = _wrap_for(index, expr, outer, scope, depth + 1)
        return stmt, target, receivers + [Receiver(scope, name)]
    if isinstance(scope, cst.FunctionDef):  # a global the function reads
        module_bindings = index.bindings(name, index.module)
        if module_bindings:
            after = _out_of_branches(index, module_bindings[-1].stmt)
            return after, name, [Receiver(index.module, name, None, after), Receiver(scope, name)]
    raise Refusal(f"where the model `{name}` is made was not found")


def _out_of_branches(index: FileIndex, stmt: cst.BaseStatement) -> cst.BaseStatement:
    """Where the wrap goes for a model made at ``stmt``: after the ``if``/``with``/``try`` around it
    (``if use_gpu: model = model.cuda()`` must not leave the model bare on the CPU), never out of a
    loop or a function."""
    where = stmt
    for up in index.ancestors(stmt):
        if isinstance(up, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Module)):
            break
        if isinstance(up, (cst.If, cst.With, cst.Try)) and not _is_elif(index, up):
            where = up
    return where


def _is_elif(index: FileIndex, node: cst.CSTNode) -> bool:
    return isinstance(index.parent(node), cst.If)  # an `elif`: its `if` holds it


def _follow_handoffs(index: FileIndex, receivers: list[Receiver]) -> None:
    """A same-file function given the wrapper (``save(model, path)``) sees the wrapper in its parameter."""
    seen = {(id(r.scope), r.name) for r in receivers if r.cls is None}
    queue = [r for r in receivers if r.cls is None]
    while queue:
        receiver = queue.pop()
        assert receiver.scope is not None  # a receiver by name has its scope (only ``self.x`` has none)
        for node in own_nodes(receiver.scope):
            if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Name):
                continue
            function = index.functions.get(node.func.value)
            if function is None:
                continue
            for position, arg in enumerate(node.args):
                if isinstance(arg.value, cst.Name) and arg.value.value == receiver.name and not arg.star \
                        and _receives_wrapper(index, receiver, node):
                    parameter = _parameter_at(function, position, arg)
                    if parameter is not None and (id(function), parameter) not in seen:
                        seen.add((id(function), parameter))
                        added = Receiver(function, parameter)
                        receivers.append(added)
                        queue.append(added)


def _parameter_at(function: cst.FunctionDef, position: int, arg: cst.Arg) -> Optional[str]:
    if arg.keyword is not None:
        return arg.keyword.value
    params = [*function.params.posonly_params, *function.params.params]
    return params[position].name.value if position < len(params) else None


def _receives_wrapper(index: FileIndex, receiver: Receiver, node: cst.CSTNode) -> bool:
    return receiver.after is None or index.follows(receiver.after, node)


def is_wrapper(index: FileIndex, receivers: list[Receiver], expr: cst.BaseExpression) -> bool:
    """``expr`` (a name or ``self.x``) is the DDP wrapper where it stands."""
    scope = index.scope_of(expr)
    for receiver in receivers:
        if receiver.cls is not None:
            if _is_receiver_expr(expr, receiver.name) and isinstance(expr, cst.Attribute) \
                    and isinstance(scope, cst.FunctionDef) and index.class_of(scope) is receiver.cls \
                    and (scope.name.value != "__init__"
                         or (receiver.after is not None and index.follows(receiver.after, expr))):
                return True
        elif isinstance(expr, cst.Name) and expr.value == receiver.name:
            if scope is receiver.scope and _receives_wrapper(index, receiver, expr):
                return True
            if receiver.scope is index.module and index.reads_global(receiver.name, scope):
                return True
    return False


# -- the training loaders ---------------------------------------------------------------------


def _training_loops(index: FileIndex) -> list[tuple[cst.For, cst.BaseExpression]]:
    """The innermost loops whose body trains (calls ``.backward()``, itself or in a same-file function
    it calls), with the loader they iterate."""
    loops: list[tuple[cst.For, cst.BaseExpression]] = []
    for node in preorder(index.module):
        if not isinstance(node, cst.For) or not _trains(index, node):
            continue
        if any(isinstance(inner, cst.For) and inner is not node and _trains(index, inner) for inner in preorder(node.body)):
            continue  # an epoch loop: its inner loop is the one over the batches
        if _calls_a_training_loop(index, node):
            continue  # an epoch loop around a function that loops over the batches
        loader = _strip_wrappers(index, node.iter)
        if isinstance(loader, cst.Call) and _is_loader_call(index, loader):
            _refuse_loader(index, loader)
            raise Refusal(f"the training DataLoader at line {_line(index, loader)} is made in the loop's header: "
                          "bind it to a name first, so that its sampler can be given the epoch")
        if not isinstance(loader, (cst.Name, cst.Attribute)):
            raise Refusal(f"the training loop at line {_line(index, node)} iterates `{code_of(node.iter)}`, "
                          "not a DataLoader: there is no loader to shard")
        loops.append((node, loader))
    if not loops:
        raise Refusal("no loop over a DataLoader trains the model")
    return loops


def _trains(index: FileIndex, loop: cst.For) -> bool:
    for node in preorder(loop.body):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward":
            return True
        if isinstance(node, cst.Call):
            function = _same_file_callee(index, node, loop)
            if function is not None and _has_backward(index, function):
                return True
    return False


def _calls_a_training_loop(index: FileIndex, loop: cst.For) -> bool:
    for node in preorder(loop.body):
        if isinstance(node, cst.Call):
            function = _same_file_callee(index, node, loop)
            if function is not None and any(isinstance(inner, cst.For) and _trains(index, inner)
                                            for inner in own_nodes(function)):
                return True
    return False


def _same_file_callee(index: FileIndex, call: cst.Call, at: cst.CSTNode) -> Optional[cst.FunctionDef]:
    if isinstance(call.func, cst.Name):
        return index.functions.get(call.func.value)
    if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and call.func.value.value == "self":
        scope = index.scope_of(at)
        cls = index.class_of(scope) if isinstance(scope, cst.FunctionDef) else None
        if cls is not None:
            return next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == call.func.attr.value), None)
    return None


def _strip_wrappers(index: FileIndex, expr: cst.BaseExpression) -> cst.BaseExpression:
    while isinstance(expr, cst.Call) and (_qualified(index, expr.func) or "") in LOADER_WRAPPERS \
            and expr.args:
        expr = expr.args[0].value
    return expr


def _loader_calls(index: FileIndex, expr: cst.BaseExpression, scope: Scope, depth: int = 0) -> list[cst.Call]:
    """The DataLoader(...) calls ``expr`` stands for, followed through names, parameters, ``self.x``
    and same-file functions that return one."""
    if depth > 5:
        return []
    if isinstance(expr, cst.Call):
        if _is_loader_call(index, expr):
            return [expr]
        function = _same_file_callee(index, expr, expr)
        if function is None:
            return []
        return [c for value in index.returns(function) for c in _loader_calls(index, value, function, depth + 1)]
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        cls = index.class_of(scope) if isinstance(scope, cst.FunctionDef) else None
        if cls is None:
            return []
        return [c for b in index.self_bindings(cls, expr.attr.value)
                for c in _loader_calls(index, b.value, b.scope, depth + 1)]
    if not isinstance(expr, cst.Name):
        return []
    bindings = index.bindings(expr.value, scope)
    if bindings:
        return [c for b in bindings[-1:] for c in _loader_calls(index, b.value, scope, depth + 1)]
    if isinstance(scope, cst.FunctionDef) and index.is_parameter(expr.value, scope):
        found = []
        for site in index.call_sites(scope):
            argument = index.argument_for(site, scope, expr.value)
            if argument is not None:
                found += _loader_calls(index, argument, index.scope_of(site), depth + 1)
        return found
    if scope is not index.module:
        return [c for b in index.bindings(expr.value, index.module)[-1:]
                for c in _loader_calls(index, b.value, index.module, depth + 1)]
    return []


def _is_loader_call(index: FileIndex, call: cst.Call) -> bool:
    return _qualified(index, call.func) in api.DATALOADERS


def _refuse_loader(index: FileIndex, call: cst.Call) -> None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in ("sampler", "batch_sampler"):
            raise Refusal(f"the training DataLoader at line {_line(index, call)} has its own {arg.keyword.value}: "
                          "it cannot also take a DistributedSampler")
        if arg.star:
            raise Refusal(f"the training DataLoader at line {_line(index, call)} takes **kwargs: its sampler is not known")
    dataset = dataset_argument(call)
    if dataset is None:
        raise Refusal(f"the training DataLoader at line {_line(index, call)} has no data set argument")
    if _is_iterable_dataset(index, dataset, index.scope_of(call)):
        raise Refusal(f"the training DataLoader at line {_line(index, call)} reads an IterableDataset: "
                      "a DistributedSampler cannot shard a stream (each rank needs its own share)")


def dataset_argument(call: cst.Call) -> Optional[cst.BaseExpression]:
    for arg in call.args:
        if arg.keyword is None and not arg.star:
            return arg.value
        if arg.keyword is not None and arg.keyword.value == "dataset":
            return arg.value
    return None


def _is_iterable_dataset(index: FileIndex, expr: cst.BaseExpression, scope: Scope) -> bool:
    if isinstance(expr, cst.Name):
        bindings = index.bindings(expr.value, scope) or index.bindings(expr.value, index.module)
        return any(_is_iterable_dataset(index, b.value, b.scope) for b in bindings[-1:])
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
        cls = index.classes.get(expr.func.value)
        if cls is not None:
            return any("IterableDataset" in code_of(base.value) for base in cls.bases)
        return (_qualified(index, expr.func) or "").endswith("IterableDataset")
    return False


def _shuffles(call: cst.Call) -> bool:
    shuffle = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "shuffle"), None)
    return shuffle is not None and not (isinstance(shuffle, cst.Name) and shuffle.value == "False")


def _epoch_at_call_sites(index: FileIndex, loop: cst.For, loader: cst.BaseExpression) -> list:
    """``def train(model, loader): for x, y in loader: ...`` called in ``for epoch in ...: train(m, dl)``:
    ``dl.sampler.set_epoch(epoch)`` before each call, when every call is in such a loop."""
    scope = index.scope_of(loop)
    if not isinstance(loader, cst.Name) or not isinstance(scope, cst.FunctionDef) \
            or not index.is_parameter(loader.value, scope):
        return []
    found = []
    for site in index.call_sites(scope):
        argument = index.argument_for(site, scope, loader.value)
        stmt = index.statement_of(site)
        epoch = _epoch_of(index, stmt) if stmt is not None else None
        if stmt is None or not isinstance(argument, (cst.Name, cst.Attribute)) or epoch is None \
                or not isinstance(index.parent(stmt), (cst.IndentedBlock, cst.Module)):
            return []
        found.append((stmt, code_of(argument), epoch))
    return found


def _repeated(index: FileIndex, loop: cst.CSTNode, depth: int = 0) -> bool:
    """The pass runs more than once: in a loop, or in a function called in one (or from unknown places).
    One pass needs no set_epoch: the sampler's epoch 0 is a shuffle of its own."""
    for up in index.ancestors(loop):
        if isinstance(up, (cst.For, cst.While)):
            return True
        if isinstance(up, cst.FunctionDef):
            sites = index.call_sites(up, loose=True)
            return depth > 3 or not sites or any(_repeated(index, site, depth + 1) for site in sites)
    return False


def _epoch_of(index: FileIndex, loop: cst.CSTNode) -> Optional[str]:
    for up in index.ancestors(loop):
        if isinstance(up, (cst.FunctionDef, cst.Module)):
            if isinstance(up, cst.FunctionDef):
                epoch = next((p.name.value for p in up.params.params if "epoch" in p.name.value), None)
                if epoch is not None:
                    return epoch
            return None
        if isinstance(up, cst.For) and isinstance(up.target, cst.Name):
            return up.target.value
    return None


# -- what runs on rank 0 only ------------------------------------------------------------------


def single_process_lines(plan: Plan) -> list[cst.SimpleStatementLine]:
    return plan.guards


def single_process_lines_of(index: FileIndex) -> list[cst.SimpleStatementLine]:
    """Every print/logging/plot- or image-saving line and torch.save of the file: what would run on
    every rank (the process group is set up right after the imports, before any of them)."""
    return [node for node in preorder(index.module)
            if isinstance(node, cst.SimpleStatementLine) and _every_rank_line(index, node)]


def _every_rank_line(index: FileIndex, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.SimpleStatementLine) or len(node.body) != 1 or not isinstance(node.body[0], cst.Expr):
        return False
    call = node.body[0].value
    if not isinstance(call, cst.Call):
        return False
    name = _qualified(index, call.func) or ""
    is_log = name in LOGGING_CALLS or (name.count(".") == 1 and name.split(".")[0].lower().endswith("logger"))
    return (is_log or name in SAVES) and isinstance(index.parent(node), (cst.IndentedBlock, cst.Module))


# -- small helpers ------------------------------------------------------------------------------


def _qualified(index: FileIndex, expr: cst.BaseExpression) -> Optional[str]:
    """The imported name ``expr`` stands for, else its own dotted name (``print``)."""
    return index.imports.resolve(expr) or dotted(expr)


def _line(index: FileIndex, node: cst.CSTNode) -> int:
    """The 1-based line a node starts on (counted in the code before it)."""
    return index.line_of(node)
