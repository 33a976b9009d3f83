"""Turn the first exception of a run into a cause in the user's terms.

Runs in the child, while the failing frames are still alive: it reads the
names on the failing lines of the user's code, looks them up in those frames
and says which one stayed on the CPU, and which static rule would have caught
it (the CG codes of ``cpu2gpu check``). What shows each rule's mistake and the
words of its cause are the rule's own (its runtime side, cpu2gpu.rules.runtimeside);
the frames (frames.py), the values in them (values.py) and the culprit on a
line (culprits.py) are read here.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from cpu2gpu.rules.runtimeside import DEVICE_MISMATCH

from .culprits import declared, finding, found, frame_findings, shows, subject
from .frames import qualified, text_user_frame, user_frames
from .values import (failing_module, held_in_plain_container, load_entry, module_seen_on_device, on_device,
                     optimizer_with_cpu_state, param_device)

# What shows each rule's failure in the exception itself, as the rules declare it.
FORKED_CUDA = declared("CG117", "loader-worker")  # its markers: CUDA in any forked process; its pattern: a loader's
NON_LEAF = declared("CG112", "non-leaf")
NUMPY = declared("CG107", "numpy")
GPU_CHECKPOINT = declared("CG202", "torch-load")  # its markers: any load of GPU tensors; torch.load's is CG202
NO_CUDA = declared("CG201", "no-cuda")
CPU_GENERATOR = declared("CG113", "generator")
RNN_HIDDEN = declared("CG104", "hidden")
# An op that reached the simulated device's own backend key without the simulator's Python layer: no
# kernel is registered there ("Could not run 'aten::_local_scalar_dense' with arguments from the
# 'simcuda' backend"), so the simulation, not the script, cannot go on.
SIM_BACKEND = re.compile(r"Could not run '([\w:.]+)' with arguments from the '(?:simcuda|simmps|PrivateUse1)' backend")


def gpu_tensors_loaded(tb, at, where) -> dict:
    """Tensors saved on a GPU, read where there is none: by torch.load (CG202), or by pickle."""
    entry = load_entry(tb)
    if entry == "torch.load":
        return found("CG202", "torch-load", where, at=at)
    if entry == "unpickle":
        return finding(f"the unpickling at {at} (pickle.load or the like) meets tensors that were pickled on a GPU, "
                       f"which a machine without one cannot read, and pickle takes no map_location; save them with "
                       f"torch.save and read them with torch.load(..., map_location=device), or pickle them from "
                       f"the CPU (.cpu())", None, where)
    return finding(f"tensors saved on a GPU were read at {at}, which a machine without one cannot do", None, where)


def forked_cuda(exc, msg, tb, rec, display) -> dict:
    """CUDA used in a process forked after the parent initialised it: in a DataLoader worker, CG117."""
    cause = exc.__cause__
    loc = text_user_frame(msg, rec) or (text_user_frame(str(cause), rec) if cause is not None else None)
    if loc is None:
        frames = user_frames(tb, rec, display)
        if frames:
            fr = frames[-1]
            loc = fr.file, fr.lineno, fr.func, fr.text
    where = {"file": display(loc[0]), "line": loc[1]} if loc else None
    at = f"{where['file']}:{where['line']}" if where else "an unknown line"
    if loc and not loc[2].startswith("<"):
        what = f"{qualified(loc[0], loc[1], loc[2])}() at {at}"
    else:
        what = f"the code at {at}"
    if loc and loc[3]:
        what += f" (`{loc[3]}`)"
    if shows(FORKED_CUDA, exc, msg):
        return found("CG117", "loader-worker", where, what=what)
    return finding(
        f"{what} uses CUDA in a process forked after CUDA was initialised, which CUDA refuses "
        f"(\"Cannot re-initialize CUDA in forked subprocess\"); start the processes with the 'spawn' start "
        f"method, or use CUDA only in the main process", None, where)


def explain(exc: BaseException, tb, rec, display) -> dict | None:
    """The cause of `exc`, or None when it is not a device problem we know."""
    msg = str(exc)
    if any(m in msg for m in FORKED_CUDA.markers):
        return forked_cuda(exc, msg, tb, rec, display)
    if shows(NON_LEAF, exc, msg):
        frames = user_frames(tb, rec, display)
        where = frames[-1].where if frames else None
        at = frames[-1].at() if frames else "an unknown line"
        return found("CG112", "non-leaf", where, at=at)
    sim = SIM_BACKEND.search(msg) if isinstance(exc, NotImplementedError) else None
    if sim is not None:
        frames = user_frames(tb, rec, display)
        where = frames[-1].where if frames else None
        at = frames[-1].at() if frames else "an unknown line"
        op = sim.group(1)
        out = finding(f"the simulated device cannot run {op} on the path taken at {at}: a limit of the "
                      f"simulation, not a fault of the migration (run on a GPU to judge this script)", None, where)
        out["sim_limit"] = True
        return out
    tb_start = tb
    frames = user_frames(tb, rec, display)
    deepest = frames[-1] if frames else None
    where = deepest.where if deepest else None
    at = deepest.at() if deepest else "an unknown line"

    if shows(NUMPY, exc, msg):
        numpy_subject = None
        if deepest is not None:
            code = deepest.frame.f_code
            numpy_subject = {"name": "", "kind": "numpy", "file": deepest.where["file"], "line": deepest.lineno,
                             "func": code.co_name, "def_line": code.co_firstlineno if code.co_name != "<module>" else 0}
            # what the line hands to NumPy or matplotlib from the device (with .detach() where it needs grad)
            handed = [(n, v) for n, v in deepest.names() if on_device(v)]
            numpy_subject["expressions"] = [n for n, _ in handed]
            numpy_subject["grad"] = [n for n, v in handed if v.requires_grad]
        return found("CG107", "numpy", where, numpy_subject, at=at)
    if any(m in msg for m in GPU_CHECKPOINT.markers):
        return gpu_tensors_loaded(tb_start, at, where)
    if shows(NO_CUDA, exc, msg):
        if torch.cuda.is_available():
            # The run has a GPU (the simulated one): what failed is a CUDA API the
            # simulation lacks, not a script that needs CUDA where there is none.
            first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
            return finding(f"the script called a CUDA API at {at} that the simulated device does not provide "
                           f"({first}); a limit of the simulation, not a fault of the script", None, where)
        return found("CG201", "no-cuda", where, at=at)
    if shows(CPU_GENERATOR, exc, msg):  # a device mismatch too, told by its own words
        return found("CG113", "generator", where, at=at)
    hidden = shows(RNN_HIDDEN, exc, msg)
    if not hidden and not any(m in msg for m in DEVICE_MISMATCH):
        return None
    if deepest is not None and re.search(r"\.step\(", deepest.text):
        stale_state = optimizer_with_cpu_state(deepest)
        if stale_state is not None:
            return found("CG203", "optimizer-state", where, optimizer=stale_state, at=at)

    layer = failing_module(tb_start)
    if layer is not None and param_device(layer) == "cpu":
        for fr in reversed(frames):
            owner = fr.owner
            if not isinstance(owner, torch.nn.Module) or owner is layer:
                continue
            container = held_in_plain_container(owner, layer)
            if container is not None:
                return found("CG109", "failing-layer", fr.where, type=type(layer).__name__,
                             container_type=type(vars(owner)[container]).__name__, container=container,
                             owner=type(owner).__name__, at=fr.at())
            if not any(m is layer for m in owner.modules()) and module_seen_on_device(rec, owner):
                return found("CG111", "built-in-method", fr.where, layer=type(layer).__name__,
                             owner=type(owner).__name__, func=fr.func, at=fr.at())
            break
    modules: list[Any] = []
    operand = getattr(exc, "cpu_operand", None)
    for depth, fr in enumerate(reversed(frames)):
        in_forward = isinstance(fr.owner, torch.nn.Module)
        culprits = frame_findings(fr, rec, in_forward, operand)
        if hidden:
            culprits = [f for f in culprits if f[0] == 3] or culprits
        direct = sorted((f for f in culprits if f[0] < 5), key=lambda f: f[0])
        if direct:
            return direct[0][1]
        modules.extend(f[1] for f in culprits if f[0] == 5)
    if modules:
        # The outermost module on the CPU is the one the script forgot.
        _, name, module, tensor, fr = modules[-1]
        if module_seen_on_device(rec, module):
            return found("CG108", "moved-back", fr.where, name=name, type=type(module).__name__, tensor=tensor,
                         at=fr.at())
        return found("CG101", "module", fr.where, subject(fr, name, "module", None, value=module), name=name,
                     type=type(module).__name__, tensor=tensor, at=fr.at())
    if hidden:
        return found("CG104", "hidden", where, at=at)
    return finding(f"a CPU tensor met a device tensor at {at}", None, where)
