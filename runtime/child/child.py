"""The child process: set up the device, instrument torch, run the script, write the result.

One fresh process per run (the simulated device cannot be undone). The
result goes to a JSON file, not stdout: the script's own output stays its own.
"""

from __future__ import annotations

import argparse
import json
import linecache
import os
import random
import sys
import time
import traceback
from typing import cast

from . import distributed_child, notebookrun
from .notebookrun import is_notebook, program_file
from ..causes import downloads, missingpkg, needsdata
from ..records import Diagnosis, MissingPackage, RunResult
from ..sandbox import audithook, keeper
from ..tracing import progress, usercode

MODES = ("cpu", "sim", "cuda", "sim-mps", "mps", "xpu")


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m cpu2gpu.runtime")
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--result", required=True, help="where to write the JSON result")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", required=True, help="the temporary copy the script runs in")
    p.add_argument("--run-file", default=None,
                   help="JSON: orig_root (the folder copied), display_base, private (the run's own folder); "
                        "kept off the command line, which the script can read")
    p.add_argument("--orig-root", default=None, help="the folder that was copied (without --run-file)")
    p.add_argument("--display-base", default=None, help="report paths relative to this folder")
    p.add_argument("--synthetic-data", action="store_true",
                   help="replace known data sets by small deterministic stand-ins; report missing data")
    p.add_argument("--progress", default=None, help="append progress lines (JSON) to this file")
    p.add_argument("--perturb-last-bit", action="store_true",
                   help="perturb the last bit of every op's result (band.py): the original's second run")
    p.add_argument("--distributed", action="store_true",
                   help="one rank under torchrun (verify --nproc): per-rank files, parameter checksums")
    p.add_argument("--speed", action="store_true",
                   help="count what keeps the GPU idle, per training step (verify --speed: speed.counts)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    opts = p.parse_args(argv)
    # the run's own folder: the copy's grandparent (runner.Sandbox), unless the run file names it
    opts.private = os.path.dirname(os.path.dirname(os.path.realpath(opts.workdir)))
    opts.isolation = "auto"
    if opts.run_file:
        with open(opts.run_file) as f:
            run = json.load(f)
        opts.orig_root = run["orig_root"]
        opts.display_base = run.get("display_base")
        opts.private = run.get("private") or opts.private
        opts.isolation = run.get("isolation", "auto")
    if opts.orig_root is None:
        p.error("--run-file or --orig-root is required")
    return opts


def _displayer(workdir, orig_root, base):
    workdir = os.path.realpath(workdir)

    def display(path):
        real = os.path.realpath(path)
        if real.startswith(workdir + os.sep):
            real = os.path.join(orig_root, os.path.relpath(real, workdir))
        if base:
            rel = os.path.relpath(real, base)
            if not rel.startswith(".."):
                return rel
        return real

    return display


def _seed(seed: int) -> None:
    import torch  # after keeper.split (main), which must fork before torch starts threads

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy  # an optional package
    except ImportError:
        return
    numpy.random.seed(seed % 2**32)


def _module_names(namespace) -> dict:
    import torch  # after keeper.split (main), which must fork before torch starts threads

    names: dict[int, str] = {}
    for key, value in (namespace or {}).items():
        if isinstance(value, torch.nn.Module) and not key.startswith("__"):
            names.setdefault(id(value), key)
            for sub, m in value.named_modules():
                if sub:
                    names.setdefault(id(m), f"{key}.{sub}")
    return names


def _script_globals(tb, script):
    script = os.path.realpath(script)
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "<module>" and os.path.realpath(program_file(code.co_filename)) == script:
            return tb.tb_frame.f_globals
        tb = tb.tb_next
    return None


def _audit(rec, namespace):
    names = _module_names(namespace)
    modules = []
    for mid, r in rec.modules.items():
        if r.top_calls == 0 and not any(e["module_id"] == mid for e in rec.events):
            continue
        modules.append({
            "name": names.get(mid, r.cls), "class": r.cls, "calls": r.calls,
            "device_calls": r.device_calls, "cpu_calls": r.cpu_calls,
            "param_devices": sorted(r.param_devices), "input_devices": sorted(r.input_devices),
            "bound": r.bound,
        })
    events = []
    for e in rec.events:
        e = dict(e)
        e["module"] = names.get(e.pop("module_id"), e["module"])
        events.append(e)
    return modules, events


def _exception_record(exc, tb, rec, display):
    frames = traceback.extract_tb(tb)
    user = [f for f in frames if rec.is_user_file(f.filename)]
    last = user[-1] if user else (frames[-1] if frames else None)
    if isinstance(exc, SyntaxError) and rec.is_user_file(exc.filename or ""):  # raised before any user frame
        last = traceback.FrameSummary(exc.filename, exc.lineno or 1, "<module>", line=exc.text or "")
    msg = str(exc).replace("simcuda", "cuda").replace("simmps", "mps")
    return {
        "type": type(exc).__name__,
        "message": msg,
        "file": display(last.filename) if last else None,
        "line": last.lineno if last else None,
        "source": (last.line or "").strip() if last else None,
        "traceback": "".join(traceback.format_exception(type(exc), exc, tb)[-6:])[-4000:].replace("simcuda", "cuda").replace("simmps", "mps"),
    }


def main(argv=None) -> int:
    opts = parse(sys.argv[1:] if argv is None else argv)
    t0 = time.perf_counter()
    if opts.distributed:
        distributed_child.prepare(opts)
    # Before torch starts threads: the run is confined here, and its keeper stays outside (keeper.py).
    isolation_record = keeper.split(opts.private, opts.orig_root, opts.result + ".writes",
                                    kernel=opts.isolation != "audit-hook")
    # torch only now: keeper.split must fork before torch starts threads
    import torch

    # these import torch: after keeper.split too
    from . import harness
    from ..steps.stepcap import StopRun

    if opts.mode in ("sim", "sim-mps"):
        from ..device import sim  # imports torch: after keeper.split; and only for the simulated device

        sim.install("mps" if opts.mode == "sim-mps" else "cuda")
    elif opts.mode == "cpu":
        harness.hide_cuda()
    else:
        harness.strict_cuda()

    display = _displayer(opts.workdir, opts.orig_root, opts.display_base)
    rec = harness.Recorder(opts.workdir, opts.max_steps)
    harness.install(rec)
    if opts.perturb_last_bit:
        from ..steps import band  # imports torch: after keeper.split; and only for the perturbed run

        band.install()
    device_choice = None
    if opts.mode != "cpu":  # where the model should reach the device: did the script itself pick the CPU?
        from . import devicechoice  # imports torch: after keeper.split

        device_choice = devicechoice.DeviceChoice(rec.user_location, lambda: rec.steps > 0)
        devicechoice.install(device_choice)
    if opts.speed and opts.mode in ("sim", "cuda"):
        from ..speed import counts  # imports torch: after keeper.split; and only with --speed

        rec.speed = counts.install(opts.mode, rec.is_user_file, rec.is_batch)
    progress_writer = None
    if opts.progress:
        progress_writer = progress.install(opts.progress, rec)
    guard = audithook.install(opts.workdir, opts.orig_root)
    synthetic_setup = None
    if opts.synthetic_data:
        from ..standins import setup as synthetic  # imports torch: after keeper.split; and only with --synthetic-data

        synthetic_setup = synthetic.install()
    harness.stop_on_sigterm()
    rank_record = None
    if opts.distributed:
        rank_record = distributed_child.install(rec, opts, display)
    _seed(opts.seed)
    cuda_drew = harness.track_cuda_rng() if opts.mode == "cuda" else None

    script = os.path.abspath(opts.script)
    usercode.install(rec.is_user_file)  # the user's files compiled with the run's transforms
    if rec.cap is not None:
        from ..steps import cappedloops  # imports torch: after keeper.split

        cappedloops.install(rec.cap)
    sys.argv = [opts.script] + list(opts.args)
    sys.path[0] = os.path.dirname(script)

    status, exit_code, exception, diagnosis, namespace = "ok", 0, None, None, None
    needs_data = None
    missing_package = None  # a package the script imports that is not installed here
    stop_reason = None  # why --max-steps had to end the run (stepcap)
    t_script = time.perf_counter()
    rec.lines.start()
    try:
        if is_notebook(script):
            namespace = notebookrun.run(script)
        else:
            namespace = usercode.run_script(script)
    except StopRun as e:
        status = "max_steps"
        stop_reason = e.args[0] if e.args else None
        namespace = _script_globals(e.__traceback__, script)
    except SystemExit as e:
        code = e.code
        exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        status = "ok" if exit_code == 0 else "exit"
        namespace = _script_globals(e.__traceback__, script)
        if status == "exit":  # sys.exit in an `except FileNotFoundError` (or failed download) block
            where = _exception_record(e, e.__traceback__, rec, display)  # the line that exited
            needs_data = _needs_data(e, synthetic_setup, opts, display, where)
            if needs_data:
                status = "needs_data"
    except BaseException as e:  # the script's failure is the finding, not ours
        status = "error"
        tb = e.__traceback__
        exception = _exception_record(e, tb, rec, display)
        needs_data = _needs_data(e, synthetic_setup, opts, display, exception)
        if needs_data:
            status = "needs_data"
        else:
            missing_package = _missing_package(e, opts, exception)
        try:
            # only when the script failed: diagnose imports torch and the rules (the static engine: ~0.5 s)
            from ..causes.diagnose import explain

            diagnosis = cast("Diagnosis | None", explain(e, tb, rec, display))  # diagnose makes a plain dict
        except Exception as inner:
            diagnosis = {"cause": f"(diagnosis failed: {inner!r})", "rule": None, "rule_name": None, "where": None}
        namespace = _script_globals(tb, script)
    rec.lines.stop()
    harness.shut_down_workers(rec)
    t_end = time.perf_counter()
    if rec.speed is not None:
        rec.speed.stop()
    cap = None
    if rec.cap is not None:
        if status == "ok" and rec.cap.capped:
            status = "max_steps"  # capped, and the script still ran to its end
        cap = rec.cap.report(status, stop_reason, display)
    if progress_writer:
        progress_writer.write(end=True)

    cuda_queries = 0
    mirrored_draws = 0
    if opts.mode in ("sim", "sim-mps"):
        from ..device import sim  # imports torch: after keeper.split; and only for the simulated device

        device_rng = False  # the simulated device's draws come from the CPU generator (sim: mirrored)
        mirrored_draws = sim.mirrored()
        cuda_queries = sim.cuda_queries
    elif cuda_drew is not None:  # set exactly when opts.mode is "cuda"
        device_rng = cuda_drew()
    else:
        device_rng = False

    modules, events = _audit(rec, namespace)
    for m in modules:
        if m.get("bound"):
            m["bound"] = dict(m["bound"], file=display(m["bound"]["file"]))
    for ev in events:  # not `e`: the name of the except blocks' exceptions above
        if ev.get("where"):
            ev["where"] = {"file": display(ev["where"]["file"]), "line": ev["where"]["line"]}
    result: RunResult = {
        "mode": opts.mode,
        "status": status,
        "exit_code": exit_code,
        "losses": rec.losses,
        "steps": rec.steps,
        "step_kinds": rec.step_kinds,
        "backward_calls": rec.backward_calls,
        "step_times": rec.step_times(),
        "device_forward_calls": sum(r.device_calls for r in rec.modules.values()),
        "cpu_forward_calls": sum(r.cpu_calls for r in rec.modules.values()),
        "trained_devices": sorted(rec.trained_devices),
        "loaders": [{**loader, "file": display(loader["file"])} for loader in rec.loaders],
        "modules": modules,
        "events": events,
        "exception": exception,
        "diagnosis": diagnosis,
        "device_rng": device_rng,
        "mirrored_draws": mirrored_draws,
        "cuda_queries": cuda_queries,
        "seed": opts.seed,
        "script_seconds": t_end - t_script,
        "setup_seconds": t_script - t0,
        "torch": torch.__version__,
        "device_name": _device_label(opts.mode, torch),
        "cap": cap,
        "script_shown": display(script),
        "lines": rec.lines.by_file(display),
        "sources": _sources(rec.lines, display),
        "in_root": _in_root(rec.lines, display, opts.workdir),
        "isolation": isolation_record,
        "refused_writes": guard.refused,
    }
    if rec.speed is not None:
        result["speed"] = rec.speed.profile(display)
    if device_choice is not None and (device_choice.moved_to_cpu or device_choice.flags_off):
        result["device_choice"] = device_choice.report(display)
    if rank_record is not None:
        result["rank"] = rank_record.as_dict()
    if needs_data:  # a failed download, with or without --synthetic-data
        result["needs_data"] = needs_data
    if missing_package:
        result["missing_package"] = missing_package
    if synthetic_setup:
        from ..standins import setup as synthetic  # imports torch: after keeper.split; and only with --synthetic-data

        result["needs_data"] = needs_data
        result["synthetic"] = {"torchvision": synthetic_setup["torchvision"], "reason": synthetic_setup["reason"],
                               "made": synthetic.made()}
    tmp = opts.result + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, opts.result)
    return 0 if status in ("ok", "max_steps") else 1


def _sources(lines, display) -> dict:
    """{shown path: its text's lines} of each user file compiled (those that ran, a notebook's cells that did
    not): what the parent maps the original's lines onto the migrated files with (the rewrite adds and
    changes lines)."""
    out = {}
    for filename in lines.compiled:
        text = linecache.getlines(filename)
        if text:
            out[display(filename)] = [line.rstrip("\r\n") for line in text]
    return out


def _in_root(lines, display, workdir) -> dict:
    """{shown path: path inside the copied folder} of each user file compiled: how the parent pairs an
    original's files with the migrated ones when the two live in different folders."""
    root = os.path.realpath(workdir)
    return {display(f): os.path.relpath(os.path.realpath(f), root) for f in lines.compiled}


def _needs_data(exc, setup, opts, display, exception):
    """What the run was missing, as the user sees it, or None when it failed for another reason.
    A missing file counts under --synthetic-data only (`setup`); a failed download always does."""
    found = needsdata.find(exc, setup["tracker"]) if setup else None
    if found is None:
        found = downloads.find(exc)
    if found is None:
        return None
    out = {"path": found["path"], "what": found["what"], "exists": False, "where": None, "source": None}
    if found.get("download"):
        out["download"] = True
    if found["is_path"]:
        original, exists = needsdata.locate(found["path"], opts.workdir, opts.orig_root)
        out.update(path=display(original), exists=exists)
    if exception and exception.get("file"):
        out.update(where={"file": exception["file"], "line": exception["line"]}, source=exception.get("source"))
    return out


def _missing_package(exc, opts, exception) -> MissingPackage | None:
    """The package not installed here that the run imports, with the import's line, or None."""
    found = missingpkg.find(exc, opts.workdir)
    if found is None:
        return None
    where = {"file": exception["file"], "line": exception["line"]} if exception and exception.get("file") else None
    return cast("MissingPackage", dict(found, where=where, source=exception.get("source") if exception else None))


def _device_label(mode, torch):
    if mode == "cuda":
        try:
            return torch.cuda.get_device_name(0)
        except Exception:
            return "cuda"
    if mode == "sim":
        return "simulated cuda:0 (computes on the CPU)"
    if mode == "sim-mps":
        return "simulated mps:0 (computes on the CPU)"
    if mode in ("mps", "xpu"):
        return mode
    return "cpu"


def run_and_exit() -> None:
    try:
        code = main()
    except SystemExit as e:  # argparse
        code = e.code if isinstance(e.code, int) else 2
    except BaseException:
        traceback.print_exc()
        code = 3
    # The PrivateUse1 teardown can abort at interpreter exit: leave at once.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
