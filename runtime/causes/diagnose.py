"""Turn the first exception of a run into a cause in the user's terms.

Runs in the child, while the failing frames are still alive: it reads the
names on the failing lines of the user's code, looks them up in those frames
and says which one stayed on the CPU, and which static rule would have caught
it (the CG codes of ``cpu2gpu check``).
"""

from __future__ import annotations

import linecache
import re
from typing import Any

import torch

from cpu2gpu.rules import RULES_BY_CODE

RULE_NAMES = {code: rule.name for code, rule in RULES_BY_CODE.items()}

_MISMATCH_MARKERS = (
    "Expected all tensors to be on the same device",
    "should be the same or input should be a MKLDNN tensor",
    "and weight type (torch.",
    "indices should be either on cpu or on the same device",
    "Input and parameter tensors are not at the same device",
    "Expected a 'cuda' device type for generator",
    "but got cpu",  # autograd: "invalid gradient at index 0 - expected device cuda:0 but got cpu"
)
_NO_CUDA_MARKERS = (
    "Torch not compiled with CUDA enabled",
    "No CUDA GPUs are available",
    "Found no NVIDIA driver",
    "no CUDA-capable device",
    "CUDA driver initialization failed",
    "Cannot initialize CUDA without ATen_cuda library",
)
_NAME = re.compile(r"(?<![\w.'\"])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# An item of a container read on the line: `batch[0]`, `inputs["x"]`, `self.scales[i]` (a literal or one name).
_ITEM = re.compile(r"(?<![\w.'\"])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\[\s*(-?\d+|'[^'\\]*'|\"[^\"\\]*\"|[A-Za-z_]\w*)\s*\]")
# A tensor made from host data on the line (no name holds it): torch.from_numpy(a), torch.tensor(np_array).
_CONVERSION = re.compile(r"\b(?:from_numpy|as_tensor|tensor|Tensor|FloatTensor|LongTensor)\(")
# torch.cuda._lazy_init in a process forked after CUDA was initialised (the simulator raises the same).
_BAD_FORK = "Cannot re-initialize CUDA in forked subprocess"
# A frame of a traceback as text: a DataLoader re-raises a worker's exception with the worker's
# traceback in the message (ExceptionWrapper.reraise: "Caught RuntimeError in DataLoader worker
# process 0.\nOriginal Traceback (most recent call last):\n  File ..."), multiprocessing.Pool as
# the __cause__ (a RemoteTraceback).
_TEXT_FRAME = re.compile(
    r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\n]+)\n(?:    (?P<source>[^\n]*))?', re.M)
_LOADER_WORKER = re.compile(r"in DataLoader worker process \d+")
_LOSS_WEIGHTS = ("weight", "pos_weight")
# An op that reached the simulated device's own backend key without the simulator's Python layer: no
# kernel is registered there ("Could not run 'aten::_local_scalar_dense' with arguments from the
# 'simcuda' backend"), so the simulation, not the script, cannot go on.
_SIM_BACKEND = re.compile(r"Could not run '([\w:.]+)' with arguments from the '(?:simcuda|simmps|PrivateUse1)' backend")


def finding(cause: str, rule: str | None, where: dict | None, subject: dict | None = None) -> dict:
    out = {"cause": cause, "rule": rule, "rule_name": RULE_NAMES.get(rule) if rule is not None else None,
           "where": where}
    if subject is not None:
        out["subject"] = subject
    return out


def _holder(frame, lineno: int, name: str, value, rec):
    """The frame that binds ``value`` itself: while ``name`` is a parameter of the running function,
    the caller's frame and the name it holds the value by (the frames of torch between them skipped)."""
    while rec is not None and value is not None:
        code = frame.f_code
        argc = code.co_argcount + code.co_kwonlyargcount
        if name not in code.co_varnames[:argc]:
            break
        caller = frame.f_back
        while caller is not None and not rec.is_user_file(caller.f_code.co_filename):
            caller = caller.f_back
        held = None if caller is None else next((n for n, v in list(caller.f_locals.items()) if v is value), None)
        if held is None:
            break
        frame, lineno, name = caller, caller.f_lineno, held
    return frame, lineno, name


def subject(fr: "_Frame", name: str, kind: str, rec=None, device_tensor: str | None = None, value=None) -> dict:
    """The value a finding is about, and the scope that binds it: what ``cpu2gpu migrate`` needs to
    find where the value is bound (the loop header, the assignment, the attribute set in __init__)
    and to write the move there. ``kind``: batch | tensor | attribute | module."""
    frame, lineno, held = (fr.frame, fr.lineno, name) if kind == "attribute" else \
        _holder(fr.frame, fr.lineno, name, value, rec)
    code = frame.f_code
    out = {"name": held, "kind": kind, "file": fr.display(code.co_filename), "line": lineno, "func": code.co_name,
           "def_line": code.co_firstlineno if code.co_name != "<module>" else 0}
    if kind == "batch" and rec is not None:  # every batch still on the CPU here: one move at the loop head
        out["batches"] = sorted(n for n, v in frame.f_locals.items() if _is_cpu(v) and rec.is_batch(v))
    elif kind == "tensor":  # the CPU tensors of the frame: a loop that binds several moves them at once
        out["cpu_tensors"] = sorted(n for n, v in frame.f_locals.items() if _is_cpu(v))
    if isinstance(value, torch.Tensor) and value.is_leaf and value.requires_grad:
        out["leaf"] = True  # trained as it is: .to() would give a copy that is not a leaf
    if frame is not fr.frame:
        return out
    if kind == "attribute":
        owner = _plain_attribute(name, None, fr)
        out["owner_class"] = type(owner).__name__ if owner is not None else None
    source = device_tensor if device_tensor in fr.args else _device_argument(fr)
    if source is not None and "." not in source and source in fr.args:
        out["device_from"] = source  # a device tensor the function is given: `device=x.device`
    return out


def _statement_lines(code, lasti, lineno):
    """The lines of the failing expression (all of a call split over lines)."""
    end = lineno
    positions = getattr(code, "co_positions", None)  # Python 3.11+
    if positions is not None:
        try:
            pos = list(positions())[lasti // 2]
            if pos[0] is not None and pos[1] is not None and pos[0] <= lineno <= pos[1]:
                lineno, end = pos[0], pos[1]
        except (IndexError, ValueError):
            pass
    return range(lineno, min(end, lineno + 20) + 1)


class _Frame:
    def __init__(self, frame, lineno, display, lasti=0):
        self.frame = frame
        self.lineno = lineno
        self.file = frame.f_code.co_filename
        self.func = frame.f_code.co_name
        self.where = {"file": display(self.file), "line": lineno}
        self.display = display
        lines = _statement_lines(frame.f_code, lasti, lineno)
        self.text = " ".join(linecache.getline(self.file, n).split("#", 1)[0].strip() for n in lines)
        argc = frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount
        self.args = set(frame.f_code.co_varnames[:argc])
        self.owner = frame.f_locals.get("self")
        if self.owner is None and self.func.startswith("<") and frame.f_back is not None:
            self.owner = frame.f_back.f_locals.get("self")  # a comprehension inside a method

    def at(self) -> str:
        return f"{self.where['file']}:{self.lineno}"

    def names(self):
        """(dotted name, value) for each name on the line that resolves."""
        seen = set()
        for m in _NAME.finditer(self.text):
            dotted = m.group(0)
            parts = dotted.split(".")
            # also the prefixes: "self.rnn" of "self.rnn.weight"
            for k in range(1, len(parts) + 1):
                name = ".".join(parts[:k])
                if name in seen:
                    continue
                seen.add(name)
                ok, value = self._resolve(parts[:k])
                if ok:
                    yield name, value
        for m in _ITEM.finditer(self.text):
            expression = m.group(0)
            if expression in seen:
                continue
            seen.add(expression)
            ok, value = self._item(m.group(1), m.group(2))
            if ok:
                yield expression, value

    def _item(self, container: str, key: str):
        """The item of a plain list, tuple or dict (nothing of the user's runs to read it)."""
        ok, held = self._resolve(container.split("."))
        if not ok or type(held) not in (list, tuple, dict):
            return False, None
        if key[0] in "'\"":
            index: Any = key[1:-1]
        elif key.lstrip("-").isdigit():
            index = int(key)
        else:
            known, index = self._resolve([key])
            if not known or type(index) not in (int, str):
                return False, None
        try:
            return True, held[index]
        except (IndexError, KeyError, TypeError):
            return False, None

    def _resolve(self, parts):
        f = self.frame
        if parts[0] in f.f_locals:
            value = f.f_locals[parts[0]]
        elif parts[0] in f.f_globals:
            value = f.f_globals[parts[0]]
        else:
            return False, None
        for p in parts[1:]:
            if not isinstance(value, torch.nn.Module) and type(value).__module__ in ("builtins",):
                return False, None
            try:
                value = getattr(value, p)
            except Exception:
                return False, None
        return True, value


def _param_device(module):
    p = next(module.parameters(), None)
    if p is None:
        p = next(module.buffers(), None)
    return None if p is None else p.device.type


def _is_cpu(t):
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0


def _on_device(t):
    return isinstance(t, torch.Tensor) and t.device.type in ("cuda", "mps", "xpu")


def _plain_attribute(name, value, fr: _Frame):
    """'self.mask' -> (owner, 'mask') when it is a tensor that is neither a
    parameter nor a buffer of its module."""
    if "." not in name:
        return None
    owner_name, attr = name.rsplit(".", 1)
    ok, owner = fr._resolve(owner_name.split("."))
    if not ok or not isinstance(owner, torch.nn.Module):
        return None
    if attr in owner._parameters or attr in owner._buffers:
        return None
    if attr in owner.__dict__ and isinstance(owner.__dict__[attr], torch.Tensor):
        return owner
    return None


_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))


def _held_in_plain_container(owner, value):
    """The attribute of ``owner`` (a plain list, tuple or dict) that holds ``value``, if any."""
    if not isinstance(owner, torch.nn.Module):
        return None
    for attr, held in vars(owner).items():
        if attr in _MODULE_INTERNALS:
            continue  # _modules, _parameters, _buffers: where a module registers what it holds
        items = held.values() if isinstance(held, dict) else held if isinstance(held, (list, tuple)) else ()
        if any(item is value for item in items):
            return attr
    return None


def _bare_move(fr: _Frame, name: str):
    """(line, code) of a statement ``name.to(...)`` / ``name.cuda()`` alone, earlier in the function."""
    pattern = re.compile(rf"^\s*({re.escape(name)}\.(?:to|cuda)\(.*\))\s*(?:#.*)?$")
    for number in range(fr.frame.f_code.co_firstlineno, fr.lineno):
        match = pattern.match(linecache.getline(fr.file, number))
        if match:
            return number, match.group(1)
    return None


def _device_argument(fr: _Frame):
    """The name of an argument of the frame's function that is a device tensor."""
    for name in sorted(fr.args):
        if _on_device(fr.frame.f_locals.get(name)):
            return name
    return None


def _failing_module(tb):
    """The module whose own forward raised (a torch layer, below the user's frames)."""
    found = None
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, torch.nn.Module):
            found = owner
        tb = tb.tb_next
    return found


def _module_seen_on_device(rec, module) -> bool:
    r = rec.modules.get(id(module))
    return r is not None and r.ref() is module and r.device_calls > 0


def _same_data(value, operand) -> bool:
    """``value`` is the CPU tensor the failing op received, or the tensor it is a view of (``x`` for ``x[i]``)."""
    if operand is None or not isinstance(value, torch.Tensor):
        return False
    if value is operand:
        return True
    try:
        return value.untyped_storage().data_ptr() == operand.untyped_storage().data_ptr() \
            and value.device == operand.device
    except (RuntimeError, NotImplementedError):
        return False


def _frame_findings(fr: _Frame, rec, in_forward: bool, operand=None):
    """Culprits on one line: a list of (priority, finding). ``operand``: the CPU tensor the failing op was
    given, when the device knows it; the values that hold it come first among the CPU tensors."""
    out: list[tuple[float, Any]] = []  # (rank, a finding; rank 5: ("module", name, value, tensor, frame))
    held: list[str] = []  # CPU tensors the line reads through an object or a container: no name binds them
    values = list(fr.names())
    if operand is not None:
        # the operand's own name first (bound by a name, a move at its binding), then the rest in line order
        values.sort(key=lambda nv: not _same_data(nv[1], operand))
    device_tensor = next((n for n, v in values if _on_device(v)), None)
    for name, value in values:
        before = len(out)
        if isinstance(value, torch.nn.Module):
            if isinstance(value, torch.nn.modules.loss._Loss):
                for w in _LOSS_WEIGHTS:
                    buf = value._buffers.get(w)
                    if _is_cpu(buf):
                        out.append((0, finding(
                            f"the loss weight {name}.{w} ({type(value).__name__}) stayed on the CPU at {fr.at()}; "
                            f"move the criterion or its weight to the device",
                            "CG106", fr.where)))
            elif _param_device(value) == "cpu" and device_tensor:
                container = _held_in_plain_container(fr.owner, value)
                if container is not None:
                    out.append((0, finding(
                        f"{name} ({type(value).__name__}) is kept in the plain {type(vars(fr.owner)[container]).__name__} "
                        f"self.{container}, so .to(device) did not move it; it stayed on the CPU at {fr.at()} "
                        f"(use nn.ModuleList / nn.ModuleDict)", "CG109", fr.where)))
                elif isinstance(fr.owner, torch.nn.Module) and fr.owner is not value \
                        and not any(m is value for m in fr.owner.modules()):
                    out.append((0, finding(
                        f"{name} ({type(value).__name__}) is built inside {type(fr.owner).__name__}.{fr.func}() at "
                        f"{fr.at()}, with new CPU weights on every call; build it once in __init__",
                        "CG111", fr.where)))
                else:
                    out.append((5, ("module", name, value, device_tensor, fr)))
        elif _is_cpu(value):
            owner = _plain_attribute(name, value, fr)
            stale = _held_in_plain_container(fr.owner, value)
            if stale is not None and not any(value is b for b in fr.owner._buffers.values()):
                out.append((1, finding(
                    f"{name} is an old CPU copy of a buffer or parameter kept in the plain "
                    f"{type(vars(fr.owner)[stale]).__name__} self.{stale}: .to(device) replaced the buffer, not the "
                    f"copy, at {fr.at()}; read the buffer through its attribute", "CG114", fr.where)))
            elif owner is not None:
                out.append((1, finding(
                    f"{name} is a plain tensor attribute of {type(owner).__name__}, so .to(device) did not move it; "
                    f"it stayed on the CPU at {fr.at()} (register it with self.register_buffer)",
                    "CG105", fr.where, subject(fr, name, "attribute", rec))))
            elif rec.is_batch(value):
                out.append((2, finding(
                    f"{name} stayed on the CPU at {fr.at()}: a batch from the DataLoader loop was not moved to the device",
                    "CG103", fr.where, subject(fr, name, "batch", rec, value=value))))
            elif "." in name or "[" in name:
                if not in_forward and not _module_attribute(name, fr):
                    held.append(name)  # a data set's attribute, a container's item: moved where it is used
                continue
            elif name in fr.args:
                continue  # passed in: the caller's line names where it came from
            elif (bare := _bare_move(fr, name)) is not None:
                out.append((1, finding(
                    f"{name} stayed on the CPU at {fr.at()}: `{bare[1]}` at line {bare[0]} does not move it in place; "
                    f"write `{name} = {bare[1]}`", "CG110", fr.where)))
            elif not in_forward and name in fr.frame.f_locals and (source := _device_argument(fr)) is not None:
                out.append((3, finding(
                    f"{name} was created on the CPU in {fr.func}() at {fr.at()}, which works on device tensors; "
                    f"create it with device={source}.device", "CG104", fr.where,
                    subject(fr, name, "tensor", rec, source, value=value))))
            elif in_forward:
                out.append((3, finding(
                    f"{name} was created on the CPU in {type(fr.owner).__name__}.{fr.func}() at {fr.at()}; "
                    f"create it with device= (e.g. device=x.device)",
                    "CG104", fr.where, subject(fr, name, "tensor", rec, device_tensor, value=value))))
            else:
                out.append((4, finding(f"{name} stayed on the CPU at {fr.at()}", "CG102", fr.where,
                                       subject(fr, name, "tensor", rec, device_tensor, value=value))))
            if len(out) > before and _same_data(value, operand) and out[-1][0] in (1, 2, 3, 4):
                out[-1] = (out[-1][0] - 0.5, out[-1][1])  # the op's own CPU operand, before others of its rank
    on_device = device_tensor or next((n for n, v in values if isinstance(v, torch.nn.Module)
                                       and _param_device(v) not in (None, "cpu")), None)
    if held and on_device is not None:
        used = subject(fr, held[0], "use", rec, device_tensor)
        used["expressions"] = held
        out.append((3.9 if any(_same_data(v, operand) for n, v in values if n in held) else 4, finding(f"{', '.join(held)} stayed on the CPU at {fr.at()}, where {on_device} is on the "
                               f"device: moved where it is used", "CG102", fr.where, used)))
    source = device_tensor or _device_argument(fr)
    if not out and source is not None and _CONVERSION.search(fr.text):
        # made from host data on the line and never bound: `x.masked_fill(torch.from_numpy(mask), 0)`
        out.append((3, finding(f"a tensor made from host data at {fr.at()} stayed on the CPU; make it on the "
                               f"device ({source} is there)", "CG104", fr.where,
                               subject(fr, "", "conversion", rec, device_tensor))))
    return out


def _module_attribute(name: str, fr: _Frame) -> bool:
    """``self.fc.weight``, ``model.bias``: the module it belongs to is what the script forgot."""
    owner = name.split("[", 1)[0].rsplit(".", 1)[0] if "." in name.split("[", 1)[0] else None
    if owner is None:
        return False
    ok, value = fr._resolve(owner.split("."))
    return ok and isinstance(value, torch.nn.Module)


def _user_frames(tb, rec, display) -> list:
    frames = []
    while tb is not None:
        if rec.is_user_file(tb.tb_frame.f_code.co_filename):
            frames.append(_Frame(tb.tb_frame, tb.tb_lineno, display, tb.tb_lasti))
        tb = tb.tb_next
    return frames


def _optimizer_with_cpu_state(fr: _Frame):
    """The name of an optimizer on the line whose state is on the CPU and its parameters on the device."""
    for name, value in fr.names():
        if not isinstance(value, torch.optim.Optimizer):
            continue
        for param, state in value.state.items():
            if param.device.type in ("cuda", "mps", "xpu") and any(_is_cpu(v) for v in state.values()):
                return name
    return None


def _load_entry(tb) -> str | None:
    """How the failing deserialization began: "torch.load" when torch.load was
    called, "unpickle" when pickle met a tensor storage (its bytes are read by
    torch.storage._load_from_bytes, with no map_location anyone could pass)."""
    load_code = torch.serialization.load.__code__
    from_bytes = getattr(torch.storage, "_load_from_bytes", None)
    bytes_code = from_bytes.__code__ if from_bytes is not None else None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code is load_code:
            return "torch.load"
        if code is bytes_code:
            return "unpickle"
        tb = tb.tb_next
    return None


def _gpu_tensors_loaded(tb, at, where) -> dict:
    entry = _load_entry(tb)
    if entry == "torch.load":
        return finding(f"torch.load without map_location at {at} cannot read a GPU checkpoint on a machine "
                       f"without one; pass map_location=device", "CG202", where)
    if entry == "unpickle":
        return finding(f"the unpickling at {at} (pickle.load or the like) meets tensors that were pickled on a GPU, "
                       f"which a machine without one cannot read, and pickle takes no map_location; save them with "
                       f"torch.save and read them with torch.load(..., map_location=device), or pickle them from "
                       f"the CPU (.cpu())", None, where)
    return finding(f"tensors saved on a GPU were read at {at}, which a machine without one cannot do", None, where)


def _text_user_frame(text: str, rec):
    """(file, line, function, source) of the deepest user frame in a traceback given as text."""
    found = None
    for m in _TEXT_FRAME.finditer(text):
        if rec.is_user_file(m["file"]):
            found = m
    if found is None:
        return None
    file, line = found["file"], int(found["line"])
    source = (found["source"] or "").strip() or linecache.getline(file, line).strip()
    return file, line, found["func"].strip(), source


def _forked_cuda(exc, msg, tb, rec, display) -> dict:
    """CUDA used in a process forked after the parent initialised it: in a DataLoader worker, CG117."""
    cause = exc.__cause__
    loc = _text_user_frame(msg, rec) or (_text_user_frame(str(cause), rec) if cause is not None else None)
    if loc is None:
        frames = _user_frames(tb, rec, display)
        if frames:
            fr = frames[-1]
            loc = fr.file, fr.lineno, fr.func, fr.text
    where = {"file": display(loc[0]), "line": loc[1]} if loc else None
    at = f"{where['file']}:{where['line']}" if where else "an unknown line"
    if loc and not loc[2].startswith("<"):
        what = f"{_qualified(loc[0], loc[1], loc[2])}() at {at}"
    else:
        what = f"the code at {at}"
    if loc and loc[3]:
        what += f" (`{loc[3]}`)"
    if _LOADER_WORKER.search(msg):
        return finding(
            f"{what} does CUDA work in a DataLoader worker process (num_workers > 0), forked from the training "
            f"process after it initialised CUDA: CUDA cannot be initialised again in a forked process "
            f"(\"Cannot re-initialize CUDA in forked subprocess\"); let the workers return CPU tensors and move "
            f"the batch to the device in the training loop", "CG117", where)
    return finding(
        f"{what} uses CUDA in a process forked after CUDA was initialised, which CUDA refuses "
        f"(\"Cannot re-initialize CUDA in forked subprocess\"); start the processes with the 'spawn' start "
        f"method, or use CUDA only in the main process", None, where)


def _qualified(file: str, line: int, func: str) -> str:
    """`Class.func` when the def of `func` enclosing `line` is in a class body, else `func`."""
    def indent(text):
        return len(text) - len(text.lstrip())

    n = line
    while n > 1:
        n -= 1
        text = linecache.getline(file, n)
        if re.match(rf"\s*(?:async\s+)?def\s+{re.escape(func)}\b", text):
            depth = indent(text)
            while n > 1 and depth > 0:
                n -= 1
                text = linecache.getline(file, n)
                if text.strip() and indent(text) < depth:
                    match = re.match(r"\s*class\s+(\w+)", text)
                    return f"{match.group(1)}.{func}" if match else func
            return func
    return func


def explain(exc: BaseException, tb, rec, display) -> dict | None:
    """The cause of `exc`, or None when it is not a device problem we know."""
    msg = str(exc)
    if _BAD_FORK in msg:
        return _forked_cuda(exc, msg, tb, rec, display)
    if "can't optimize a non-leaf Tensor" in msg:
        frames = _user_frames(tb, rec, display)
        where = frames[-1].where if frames else None
        at = frames[-1].at() if frames else "an unknown line"
        return finding(f"the optimizer got a tensor that is not a leaf at {at}: nn.Parameter(...).to(device) "
                       f"returns a copy on the GPU, not the parameter; move the data first", "CG112", where)
    sim = _SIM_BACKEND.search(msg) if isinstance(exc, NotImplementedError) else None
    if sim is not None:
        frames = _user_frames(tb, rec, display)
        where = frames[-1].where if frames else None
        at = frames[-1].at() if frames else "an unknown line"
        op = sim.group(1)
        out = finding(f"the simulated device cannot run {op} on the path taken at {at}: a limit of the "
                      f"simulation, not a fault of the migration (run on a GPU to judge this script)", None, where)
        out["sim_limit"] = True
        return out
    tb_start = tb
    frames = _user_frames(tb, rec, display)
    deepest = frames[-1] if frames else None
    where = deepest.where if deepest else None
    at = deepest.at() if deepest else "an unknown line"

    if isinstance(exc, TypeError) and "device type tensor to numpy" in msg:
        numpy_subject = None
        if deepest is not None:
            code = deepest.frame.f_code
            numpy_subject = {"name": "", "kind": "numpy", "file": deepest.where["file"], "line": deepest.lineno,
                             "func": code.co_name, "def_line": code.co_firstlineno if code.co_name != "<module>" else 0}
            # what the line hands to NumPy or matplotlib from the device (with .detach() where it needs grad)
            on_device = [(n, v) for n, v in deepest.names() if _on_device(v)]
            numpy_subject["expressions"] = [n for n, _ in on_device]
            numpy_subject["grad"] = [n for n, v in on_device if v.requires_grad]
        return finding(f"a device tensor reached .numpy() at {at}; call .cpu() before .numpy()", "CG107", where,
                       numpy_subject)
    if "Attempting to deserialize object on a CUDA device" in msg:
        return _gpu_tensors_loaded(tb_start, at, where)
    if any(m in msg for m in _NO_CUDA_MARKERS):
        if torch.cuda.is_available():
            # The run has a GPU (the simulated one): what failed is a CUDA API the
            # simulation lacks, not a script that needs CUDA where there is none.
            first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
            return finding(f"the script called a CUDA API at {at} that the simulated device does not provide "
                           f"({first}); a limit of the simulation, not a fault of the script", None, where)
        return finding(f"the script requires CUDA at {at} and fails on a machine without a GPU; "
                       f"pick the device with torch.cuda.is_available()", "CG201", where)
    hidden = "Input and hidden tensors are not at the same device" in msg
    if not hidden and not any(m in msg for m in _MISMATCH_MARKERS):
        return None
    if "Expected a 'cuda' device type for generator" in msg:
        return finding(f"a CPU torch.Generator was used for a draw on the device at {at}; "
                       f"draw on the CPU with it and move the result (torch.randn(..., generator=g).to(device))",
                       "CG113", where)
    if deepest is not None and re.search(r"\.step\(", deepest.text):
        stale_state = _optimizer_with_cpu_state(deepest)
        if stale_state is not None:
            return finding(f"the optimizer {stale_state} holds state on the CPU while its parameters are on the "
                           f"device at {at}: it was built, or its state loaded, before the model was moved; "
                           f"move the model first", "CG203", where)

    layer = _failing_module(tb_start)
    if layer is not None and _param_device(layer) == "cpu":
        for fr in reversed(frames):
            owner = fr.owner
            if not isinstance(owner, torch.nn.Module) or owner is layer:
                continue
            container = _held_in_plain_container(owner, layer)
            if container is not None:
                return finding(
                    f"{type(layer).__name__} is kept in the plain {type(vars(owner)[container]).__name__} "
                    f"self.{container} of {type(owner).__name__}, so .to(device) did not move it; it stayed on the "
                    f"CPU at {fr.at()} (use nn.ModuleList / nn.ModuleDict)", "CG109", fr.where)
            if not any(m is layer for m in owner.modules()) and _module_seen_on_device(rec, owner):
                return finding(
                    f"{type(layer).__name__} is built inside {type(owner).__name__}.{fr.func}() at {fr.at()}, with "
                    f"new CPU weights on every call; build it once in __init__", "CG111", fr.where)
            break
    modules: list[Any] = []
    operand = getattr(exc, "cpu_operand", None)
    for depth, fr in enumerate(reversed(frames)):
        in_forward = isinstance(fr.owner, torch.nn.Module)
        found = _frame_findings(fr, rec, in_forward, operand)
        if hidden:
            found = [f for f in found if f[0] == 3] or found
        direct = sorted((f for f in found if f[0] < 5), key=lambda f: f[0])
        if direct:
            return direct[0][1]
        modules.extend(f[1] for f in found if f[0] == 5)
    if modules:
        # The outermost module on the CPU is the one the script forgot.
        _, name, module, tensor, fr = modules[-1]
        if _module_seen_on_device(rec, module):
            return finding(
                f"{name} ({type(module).__name__}) was moved back to the CPU and then called with device tensors "
                f"({tensor} is on cuda:0) at {fr.at()}; move the inputs too (e.g. {tensor}.cpu())",
                "CG108", fr.where)
        return finding(f"{name} ({type(module).__name__}) stayed on the CPU while {tensor} is on cuda:0 at "
                       f"{fr.at()}; move the model with .to(device)", "CG101", fr.where, subject(fr, name, "module", None, value=module))
    if hidden:
        return finding(f"an RNN hidden state was created on the CPU at {at}; create it with device=",
                       "CG104", where)
    return finding(f"a CPU tensor met a device tensor at {at}", None, where)
