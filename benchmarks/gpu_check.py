"""Does the simulated CUDA device agree with a real GPU? One command that answers in minutes.

    python3 benchmarks/gpu_check.py --out gpu_check.json              # on a machine with one CUDA GPU
    python3 benchmarks/gpu_check.py --device sim --out gpu_check.json  # here: the same plumbing, sim in place of CUDA

Every figure of verify and migrate rests on the simulated device (runtime/device/). This runs, on one
real GPU and within a time budget, what shows whether that rests on rock:

  fidelity        every fixture with a known verdict (the bug reports' bug.py and fixed.py, the runtime
                  mistakes, the other failing and passing runtime fixtures), verified on the simulated
                  device and on real CUDA: a run the simulator refuses must be refused by CUDA with the
                  same kind of error (error_kind), a run it lets through must run on CUDA; and
                  sim_semantics.py, the simulator's own checks, run against real CUDA with the
                  simulator left out.
  verify_migrate  `cpu2gpu verify --device cuda --against ORIGINAL` of the runtime fixtures' migrations
                  and of two rewritten projects, and `cpu2gpu migrate --device cuda` of the migrate
                  fixtures: the verdicts, and whether the device's losses lie within the GPU tolerance
                  (runtime/judge/compare.py RTOL["cuda"]) of the CPU original's.
  distributed     DDP migrations under torchrun with one rank: nccl on the GPU.
  gpu_tests       the `gpu`-marked tests (tests/runtime/test_gpu.py).
  speed           (--speed, a command of its own, one item at a time: its step times are the host's)
                  for each script of fixtures/speed: `migrate --speed --in-place` of a copy, then `verify
                  --speed` of the plain script, of the speed-edited one and of the hand-tuned twin: the
                  measured step (the device run's median, the first step left out), the estimated one for
                  the card this runs on (--gpu-name, H100 by default), the speed-up of --speed over the
                  plain migration and against the tuned twin, and the estimate's error. The issue's goal:
                  1.3x or more over the plain migration, within 1.05x of the tuned one, the estimate within
                  30% of the measured step.

Items run in parallel (--jobs), each in child processes (the CLI, as a user runs it); one that fails is
recorded and the others go on. After --budget-s seconds the items not started are recorded as
"not run (budget)", and the runs still going are stopped. The JSON report (--out) is rewritten after
every item, so an interrupted check still leaves what it found.

With --device sim the simulated device stands in for CUDA everywhere: the fidelity part then compares
the simulator with itself and agrees by construction. That proves the plumbing of this script on a
machine without a GPU, nothing about the simulator (the report's "mode" says so).

This module imports neither torch nor the runtime at import time (the static tests import error_kind).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
RUNTIME = FIXTURES / "runtime"

BUDGET_S = 420.0  # the whole check; a GPU command may take 10 minutes, with the install before it
RUN_TIMEOUT_S = 240.0  # one verify run's hang guard (--timeout of the CLI), within the budget
GRACE_S = 20.0  # after the budget, how long a stopped CLI call may take to end its runs
FIDELITY_STEPS = 8  # as tests/runtime/test_bugs_verify.py: the bugs crash in the first steps
PARTS = ("fidelity", "verify_migrate", "distributed", "gpu_tests", "speed")
SPEED = FIXTURES / "speed"
SPEED_SCRIPTS = ("loader_bound", "sync_bound", "copy_bound", "already_fast")
SPEED_STEPS = 20  # every step of the speed fixtures (2 epochs of 10 batches)

# -- what kind of error: the same kind on both devices is agreement --------------------------------

RAN = "ran"  # the run ended without an exception (or at --max-steps)
SIM_LIMIT = "simulator limit"  # an op the simulator cannot run: real CUDA must run it

MISMATCH, NUMPY, INDEX, GENERATOR, RNN_HIDDEN, FLOAT64_MPS, FORKED, OTHER = (
    "device mismatch", "numpy of a device tensor", "index device", "generator device", "RNN hidden device",
    "float64 on mps", "CUDA in a forked worker", "other")
KINDS = (MISMATCH, NUMPY, INDEX, GENERATOR, RNN_HIDDEN, FLOAT64_MPS, FORKED, OTHER)

# Checked in this order: the specific refusals before the general mismatch, whose words some of them share.
_KIND_PATTERNS = (
    (NUMPY, re.compile(r"can't convert (cuda|mps|xpu|privateuseone)(:\d+)? device type tensor to numpy")),
    (INDEX, re.compile(r"indices should be either on cpu or on the same device as the indexed tensor")),
    (GENERATOR, re.compile(r"Expected a '(cuda|mps|xpu)' device type for generator but found '\w+'")),
    (RNN_HIDDEN, re.compile(r"Input and hidden tensors are not at the same device")),
    (FLOAT64_MPS, re.compile(r"Cannot convert a MPS Tensor to float64|MPS framework doesn't support float64")),
    (FORKED, re.compile(r"Cannot re-initialize (CUDA|MPS|XPU) in forked subprocess")),
    (MISMATCH, re.compile(
        r"Expected all tensors to be on the same device"
        r"|found at least two devices"
        r"|Input and parameter tensors are not at the same device"
        r"|Expected object of device type \w+ but got device type \w+"
        r"|is on (cpu|cuda:\d+|mps:\d+), different from other tensors on"
        r"|Tensor for argument #\d+ '\w+' is on CPU, but expected (it )?to be on GPU"
        r"|'lengths' argument should be a 1D CPU int64 tensor, but got 1D (cuda|mps)")),
)
# A conv or linear layer's own form: only a device mismatch when one side is on the device and the
# other not (torch.cuda.HalfTensor against torch.cuda.FloatTensor is a dtype mismatch).
_INPUT_WEIGHT = re.compile(r"Input type \(torch\.((?:cuda\.|mps\.)?)\w+\) and weight type \(torch\.((?:cuda\.|mps\.)?)\w+\)")


def error_kind(message: Optional[str]) -> str:
    """The kind of a run's error, from its message: one of KINDS. The simulator words its refusals as
    CUDA does, so one classifier reads both."""
    text = message or ""
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(text):
            return kind
    m = _INPUT_WEIGHT.search(text)
    if m and bool(m.group(1)) != bool(m.group(2)):
        return MISMATCH
    return OTHER


def migrated_run(report: Optional[dict]) -> Optional[dict]:
    """The run of the migrated script on the device (the first migrated run of a verify report)."""
    if not report:
        return None
    return next((r for r in report.get("runs", []) if r.get("role") == "migrated"), None)


def outcome(report: Optional[dict]) -> str:
    """What the migrated run did: RAN, the kind of its error, SIM_LIMIT, or its status (timeout, exit...)."""
    run = migrated_run(report)
    if run is None or report is None:
        return "no result"
    status = run.get("status")
    if status in ("ok", "max_steps"):
        return RAN
    if any(r.get("sim_limit") for r in report.get("reasons") or ()):
        return SIM_LIMIT
    if status == "error":
        return error_kind((run.get("exception") or {}).get("message"))
    return str(status)


def agrees(sim: str, device: str) -> bool:
    """The simulator's outcome and the device's agree: the same kind of refusal, or both ran. An op the
    simulator cannot run is its own limit, and the device must run it."""
    if sim == SIM_LIMIT:
        return device == RAN
    return sim == device


# -- the items -----------------------------------------------------------------------------------------


class OutOfBudget(Exception):
    """The budget ended before this step of an item could start (or while it ran: stopped)."""


@dataclass
class Context:
    device: str  # "cuda", or "sim" standing in for it
    deadline: float  # time.monotonic() at which the budget ends
    scratch: Path
    env: dict

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def run_timeout(self) -> float:
        left = self.remaining()
        if left <= 1.0:
            raise OutOfBudget()
        return max(5.0, min(RUN_TIMEOUT_S, left))

    def folder(self, name: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=re.sub(r"\W+", "_", name)[:40] + "-", dir=self.scratch))
        return path


@dataclass
class Item:
    part: str
    name: str
    run: Callable[[Context], dict]


def _stop(proc: subprocess.Popen) -> None:
    """Ctrl-C to the CLI (verify and migrate end every process they started), then kill what is left."""
    for sig, wait in ((signal.SIGINT, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def cli(ctx: Context, args: list, cwd: Path, env: Optional[dict] = None) -> dict:
    """`cpu2gpu ARGS` in a child, as a user runs it (JSON on stdout): its exit code, data and time."""
    ctx.run_timeout()  # raises OutOfBudget when no time is left to start it
    cmd = [sys.executable, "-m", "cpu2gpu", *args]
    t0 = time.monotonic()
    # Not from the repository root: there `python -m` would import ./cpu2gpu, which lacks the runtime.
    proc = subprocess.Popen(cmd, cwd=str(cwd), env=env or ctx.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=ctx.remaining() + GRACE_S)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise OutOfBudget(f"stopped by the budget after {time.monotonic() - t0:.0f} s: cpu2gpu {' '.join(args)}")
    try:
        data = json.loads(out) if out.strip() else None
    except ValueError:
        data = None
    res = {"command": "cpu2gpu " + " ".join(args), "rc": proc.returncode, "cli_s": round(time.monotonic() - t0, 2)}
    if data is None or proc.returncode not in (0, 1, 3):
        res["stderr_tail"] = err[-1500:]
    return dict(res, data=data)


def _exception(run: Optional[dict]) -> Optional[dict]:
    exc = (run or {}).get("exception")
    if not exc:
        return None
    return {"type": exc.get("type"), "message": (exc.get("message") or "")[:300], "file": exc.get("file"),
            "line": exc.get("line")}


def _side(res: dict, device: str) -> dict:
    """One verify of a fidelity fixture, for the report."""
    data = res.pop("data")
    run = migrated_run(data)
    return dict(res, device=device, outcome=outcome(data), verdict=(data or {}).get("verdict"),
                status=(run or {}).get("status"), rules=[r.get("rule") for r in (data or {}).get("reasons") or ()],
                exception=_exception(run))


def fidelity(script: Path, max_steps: int = FIDELITY_STEPS) -> Item:
    def go(ctx: Context) -> dict:
        sides = {}
        for side, device in (("sim", "sim"), ("device", ctx.device)):
            # The simulator sees no GPU, as on the machines it stands in for one: a CUDA tensor that escaped
            # it would raise there instead of computing on the GPU unseen.
            env = dict(ctx.env, CUDA_VISIBLE_DEVICES="") if device == "sim" else ctx.env
            res = cli(ctx, ["verify", script.name, "--device", device, "--max-steps", str(max_steps),
                            "--timeout", str(int(ctx.run_timeout())), "--output-format", "json", "-q"],
                      cwd=script.parent, env=env)
            sides[side] = _side(res, device)
        sim, dev = sides["sim"], sides["device"]
        agree = agrees(sim["outcome"], dev["outcome"])
        return {"script": str(script.relative_to(FIXTURES)), "sim": sim, "device": dev, "agree": agree,
                "same_verdict": sim["verdict"] == dev["verdict"], "ok": agree}

    return Item("fidelity", f"fidelity:{script.relative_to(FIXTURES)}", go)


# sim_semantics.py without the simulator: its checks then speak of real CUDA. TF32 is off, as in verify's
# children (runtime/child/harness.py).
_SEMANTICS_ON_CUDA = r"""
import runpy, sys, types
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
import cpu2gpu.runtime.device as device
stand_in = types.ModuleType("cpu2gpu.runtime.device.sim")
stand_in.install = lambda *args, **kwargs: None
stand_in.mirrored = lambda: 0  # no draws mirrored from the CPU: the real device draws its own
sys.modules["cpu2gpu.runtime.device.sim"] = device.sim = stand_in
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
# The checks of sim_semantics.py that a real GPU answers otherwise, by design: not disagreements.
SEMANTICS_ON_CUDA_DIFFER = {
    "device draws are counted as mirrored": "the simulator's own counter (a stand-in answers 0 on real CUDA)",
    "dropout on the device draws the CPU's mask": "the simulator mirrors the CPU's draws; CUDA draws its own",
    "randn on the device draws the CPU's numbers": "the simulator mirrors the CPU's draws; CUDA draws its own",
    "torch.load of a CUDA checkpoint without map_location": "raises only where CUDA is absent; a GPU loads it",
}
_NUMERIC = "autograd and "  # 1e-6 of the CPU: the simulator's kernels are the CPU's, a GPU's are not


def semantics() -> Item:
    script = RUNTIME / "sim_semantics.py"

    def go(ctx: Context) -> dict:
        cmd = [sys.executable, "-c", _SEMANTICS_ON_CUDA, str(script)] if ctx.device == "cuda" \
            else [sys.executable, str(script)]
        timeout = ctx.run_timeout()
        t0 = time.monotonic()
        try:
            out = subprocess.run(cmd, cwd=str(script.parent), env=ctx.env, capture_output=True, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"ok": False, "stopped": "timeout", "wall_s": round(time.monotonic() - t0, 2)}
        checks = 0
        failed: list = []  # checks the device answers otherwise than the simulator
        differ: list = []  # checks a GPU answers otherwise by design
        for line in out.stdout.splitlines():
            m = re.match(r"(ok|FAIL) ([^:]+)(?:: (.*))?$", line)
            if not m:
                continue
            checks += 1
            if m.group(1) == "FAIL":
                name = m.group(2)
                why = SEMANTICS_ON_CUDA_DIFFER.get(name) if ctx.device == "cuda" else None
                if ctx.device == "cuda" and name.startswith(_NUMERIC):
                    why = "rounding: a GPU sums in other orders than the CPU (verify holds it to RTOL['cuda'])"
                entry = {"name": name, "why": (m.group(3) or "")[:300], "expected_on_a_gpu": why}
                (differ if why else failed).append(entry)
        return {"script": str(script.relative_to(FIXTURES)), "rc": out.returncode, "checks": checks,
                "disagreements": failed, "expected_differences": differ, "wall_s": round(time.monotonic() - t0, 2),
                "stderr_tail": out.stderr[-1500:] if out.returncode and not failed else "",
                "ok": checks > 0 and not failed}

    return Item("fidelity", f"fidelity:{script.relative_to(FIXTURES)} (its checks against the device)", go)


def _gpu_rtol() -> float:
    from cpu2gpu.runtime.judge.compare import RTOL

    return RTOL["cuda"]


def _comparisons(data: Optional[dict]) -> list:
    """Each comparison with the original, and whether its largest step-wise difference lies within the
    GPU tolerance (None where the runs are compared by trend: other random numbers, not rounding)."""
    rtol = _gpu_rtol()
    out = []
    for c in (data or {}).get("comparisons") or ():
        rel = c.get("max_rel_diff")
        out.append({"run": c.get("run"), "method": c.get("method"), "ok": c.get("ok"), "compared": c.get("compared"),
                    "max_rel_diff": rel, "rtol": c.get("rtol"), "gpu_rtol": rtol,
                    "within_gpu_rtol": None if rel is None else rel <= rtol,
                    "first_divergence": c.get("first_divergence")})
    return out


def _verdict(data: Optional[dict]) -> dict:
    runs = [{"label": r.get("label"), "status": r.get("status"), "steps": r.get("steps"),
             "device_forward_calls": r.get("device_forward_calls"), "wall_s": r.get("wall_seconds"),
             "exception": _exception(r)} for r in (data or {}).get("runs") or ()]
    return {"verdict": (data or {}).get("verdict"), "reasons": [r.get("cause") for r in (data or {}).get("reasons") or ()],
            "runs": runs, "comparisons": _comparisons(data)}


def verify_pair(migrated: Path, original: Path, max_steps: int = 10, extra: tuple = (), expected: str = "pass") -> Item:
    def go(ctx: Context) -> dict:
        res = cli(ctx, ["verify", migrated.name, "--against", original.name, "--device", ctx.device,
                        "--max-steps", str(max_steps), "--timeout", str(int(ctx.run_timeout())),
                        "--output-format", "json", "-q", *extra], cwd=migrated.parent)
        got = _verdict(res.pop("data"))
        return dict(res, **got, expected=expected, ok=got["verdict"] == expected)

    return Item("verify_migrate", f"verify:{migrated.relative_to(FIXTURES)}", go)


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.expected.py"))
    return target


def verify_project(project: Path, entry: str, max_steps: int = 6) -> Item:
    """The tool's own rewrite of a whole project (not its expected files), verified against the original."""
    def go(ctx: Context) -> dict:
        folder = ctx.folder(project.name)
        original, migrated = _copy(project, folder / "original"), _copy(project, folder / "migrated")
        rewrite = cli(ctx, ["rewrite", "--in-place", "."], cwd=migrated)
        rewrite.pop("data")
        res = cli(ctx, ["verify", entry, "--against", str(original / entry), "--device", ctx.device,
                        "--max-steps", str(max_steps), "--timeout", str(int(ctx.run_timeout())),
                        "--output-format", "json", "-q"], cwd=migrated)
        got = _verdict(res.pop("data"))
        return dict(res, **got, rewrite=rewrite, expected="pass", ok=got["verdict"] == "pass")

    return Item("verify_migrate", f"verify-project:{project.relative_to(FIXTURES)}", go)


def migrate(folder: Path, entry: str, expected_rc: int = 0) -> Item:
    def go(ctx: Context) -> dict:
        work = _copy(folder, ctx.folder(folder.name) / folder.name)
        res = cli(ctx, ["migrate", entry, "--device", ctx.device, "--max-steps", "5",
                        "--timeout", str(int(ctx.run_timeout())), "--output-format", "json", "-q"], cwd=work)
        data = res.pop("data") or {}
        misses = [f"{m.get('rule')} {m.get('file')}:{m.get('line')} ({m.get('how')})"
                  for m in data.get("static_misses") or ()]
        final = _verdict(data.get("verify"))
        return dict(res, proven=data.get("proven"), ending=data.get("ending"), rounds=len(data.get("rounds") or ()),
                    static_misses=misses, taken_back=len(data.get("taken_back") or ()),
                    cannot_run=data.get("cannot_run"), verify=final, expected_rc=expected_rc,
                    ok=res["rc"] == expected_rc)

    return Item("verify_migrate", f"migrate:{folder.relative_to(FIXTURES)}", go)


def _copy_file(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


def _measured(ctx: "Context", script: Path, gpu: str) -> dict:
    """verify --speed of one script: its device run's median step (the first left out) and the estimate."""
    res = cli(ctx, ["verify", script.name, "--device", ctx.device, "--speed", "--gpu", gpu, "--max-steps",
                    str(SPEED_STEPS), "--timeout", str(int(ctx.run_timeout())), "--output-format", "json", "-q"],
              cwd=script.parent)
    data = res.pop("data") or {}
    run = migrated_run(data) or {}
    times = sorted((run.get("step_times") or [])[1:])
    measured = times[len(times) // 2] if times else None
    estimate = (data.get("speed") or {}).get("estimate") or {}
    estimated = estimate.get("step_s")
    return dict(res, verdict=data.get("verdict"), measured_step_s=measured, estimated_step_s=estimated,
                idle_fraction=estimate.get("idle_fraction"),
                causes=[c.get("kind") for c in (data.get("speed") or {}).get("causes") or ()],
                estimate_error=(abs(estimated - measured) / measured) if measured and estimated else None)


def speed(name: str, gpu: str = "H100") -> Item:
    def go(ctx: Context) -> dict:
        base = ctx.folder(f"speed-{name}")
        plain = _copy_file(SPEED / f"{name}.py", base / "plain" / f"{name}.py")
        edited = _copy_file(SPEED / f"{name}.py", base / "edited" / f"{name}.py")
        res = cli(ctx, ["migrate", edited.name, "--device", ctx.device, "--speed", "--gpu", gpu, "--in-place",
                        "--max-steps", "5", "--timeout", str(int(ctx.run_timeout())), "--output-format", "json",
                        "-q"], cwd=edited.parent)
        story = (res.pop("data") or {}).get("speed") or {}
        variants = {"plain": plain, "speed": edited}
        if (SPEED / f"{name}_tuned.py").is_file():
            variants["tuned"] = _copy_file(SPEED / f"{name}_tuned.py", base / "tuned" / f"{name}.py")
        runs = {label: _measured(ctx, path, gpu) for label, path in variants.items()}
        step = {label: r["measured_step_s"] for label, r in runs.items()}
        speedup = step["plain"] / step["speed"] if step.get("plain") and step.get("speed") else None
        vs_tuned = step["speed"] / step["tuned"] if step.get("speed") and step.get("tuned") else None
        return dict(res, edits=[f"{e.get('kind')} {e.get('line')}: {e.get('edit')}" for e in story.get("edits") or ()],
                    not_edited=[f"{e.get('cause')} {e.get('line')}: {e.get('why')}" for e in story.get("not_edited") or ()],
                    runs=runs, speedup=speedup, speed_over_tuned=vs_tuned,
                    ok=all(r["verdict"] == "pass" for r in runs.values()) and res["rc"] == 0)

    return Item("speed", f"speed:{name}", go)


def distributed(folder: Path, script: str, original: str) -> Item:
    """One rank under torchrun: nccl on the GPU (gloo on the CPU in sim mode). verify's CLI takes
    --nproc 2 or more, so the runs are composed from verify's own parts, as verify composes them."""
    def go(ctx: Context) -> dict:
        from cpu2gpu.runtime.judge import distributed as ddp
        from cpu2gpu.runtime.judge.runner import RunSpec, run
        from cpu2gpu.runtime.judge.verify import judge

        mode = "cuda" if ctx.device == "cuda" else "cpu"
        specs = [RunSpec("original (cpu)", "original", str(folder / original), "cpu", []),
                 RunSpec(ddp.label(mode, 1), "migrated", str(folder / script), mode, [], 1)]
        timeout = ctx.run_timeout()
        t0 = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda s: (ddp.run if s.nproc else run)(s, timeout=timeout, cwd=str(folder)),
                                    specs))
        report = judge(specs, results)
        report["runs"] = [dict(r, label=s.label, role=s.role, script=s.script) for s, r in zip(specs, results)]
        d = results[1].get("distributed") or {}
        got = _verdict(report)
        return dict(got, mode=mode, backend=d.get("backend"), steps_per_rank=d.get("steps_per_rank"),
                    ranks_trained=d.get("ranks_trained"), params_equal=d.get("params_equal"),
                    wall_s=round(time.monotonic() - t0, 2), expected="pass", ok=got["verdict"] == "pass",
                    note="verify --nproc takes 2 or more; one GPU here, so its runs (runner.run, distributed.run, "
                         "judge) are composed with one rank")

    return Item("distributed", f"distributed:{(folder / script).relative_to(FIXTURES)}", go)


def gpu_tests() -> Item:
    def go(ctx: Context) -> dict:
        # -P and --import-mode=append: the installed cpu2gpu (with its runtime) before the repository's
        # source folder, which lacks it.
        cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=append",
               "-m", "gpu", "-rs", "tests/runtime/test_gpu.py"]
        t0 = time.monotonic()
        try:
            out = subprocess.run(cmd, cwd=str(ROOT), env=ctx.env, capture_output=True, text=True,
                                 timeout=ctx.run_timeout())
        except subprocess.TimeoutExpired:
            return {"ok": False, "stopped": "timeout", "wall_s": round(time.monotonic() - t0, 2)}
        lines = out.stdout.strip().splitlines()
        summary = lines[-1] if lines else ""
        ok = out.returncode == 0 or (ctx.device != "cuda" and out.returncode == 5)
        return {"command": " ".join(cmd[1:]), "rc": out.returncode, "summary": summary,
                "tail": "\n".join(lines[-25:])[-3000:] if out.returncode not in (0, 5) else "",
                "wall_s": round(time.monotonic() - t0, 2), "ok": ok}

    return Item("gpu_tests", "gpu_tests:tests/runtime/test_gpu.py", go)


# Runtime fixtures with a known verdict beyond the bug reports and the mistakes (the pairs' migrations
# run in verify_migrate; here each runs alone, on both devices).
KNOWN_VERDICT = ("after_training_bug.py", "after_training_fixed.py", "worker_cuda_bug.py", "worker_cuda_fixed.py",
                 "float64_bug.py", "float64_fixed.py", "rnn_migrated.py", "linreg_migrated.py", "cnn_migrated.py",
                 "dropout_migrated.py", "manual_steps/tutorial_bug.py", "device_choice/always_cpu.py",
                 "device_choice/opt_in_flag.py", "proven/seq2seq_missed.py")
# migrated -> original pairs whose names do not say so
FIXED_PAIRS = (("after_training_fixed.py", "after_training_original.py"),
               ("worker_cuda_fixed.py", "worker_cuda_original.py"))
MAX_STEPS = {"cnn_migrated.py": 6, "dropout_migrated.py": 30}  # as tests/runtime/test_verify.py
PAIR_OPTIONS = {"synthetic/mnist_migrated.py": ("--synthetic-data",)}
PAIR_VERDICT = {"proven/swallowed_migrated.py": "unproven"}  # its report's lines fail silently on the device
NOT_PAIRS = ("synthetic/npy_migrated.py",)  # needs its own data file: needs-data by design
MIGRATE_ENTRIES = ("train.py", "fit.py")  # the script of each fixtures/migrate/ folder
MIGRATE_RC = {"original_fails": 3}  # the original fails on its own: cannot be judged (exit 3); the others proven
MIGRATE_PROJECTS = (("loader_from_function", "main.py"), ("trainer_package", "run.py"))
VERIFY_PROJECTS = (("flat_siblings", "main.py"), ("trainer_class", "main.py"))
DISTRIBUTED = ((RUNTIME / "ddp", "mlp_ddp.py", "mlp_original.py"), (FIXTURES / "distributed", "cnn.ddp.py", "cnn.py"),
               (FIXTURES / "distributed", "rnn.ddp.py", "rnn.py"))


def fidelity_scripts() -> list:
    bugs = sorted(p for case in sorted((FIXTURES / "bugs").iterdir()) for p in (case / "bug.py", case / "fixed.py")
                  if p.is_file())
    mistakes = sorted(RUNTIME.glob("mistake_*.py"))
    return bugs + mistakes + [RUNTIME / name for name in KNOWN_VERDICT if (RUNTIME / name).is_file()]


def verify_pairs() -> list:
    pairs = [(m, m.with_name(m.name.replace("_migrated.py", "_original.py")))
             for m in sorted(RUNTIME.glob("**/*_migrated.py"))]
    pairs += [(RUNTIME / a, RUNTIME / b) for a, b in FIXED_PAIRS]
    return [(m, o) for m, o in pairs if m.is_file() and o.is_file() and str(m.relative_to(RUNTIME)) not in NOT_PAIRS]


def migrate_fixtures() -> list:
    found = []
    for folder in sorted(p for p in (FIXTURES / "migrate").iterdir() if p.is_dir()):
        entry = next((name for name in MIGRATE_ENTRIES if (folder / name).is_file()), None)
        if entry:
            found.append((folder, entry))
    return found


def all_items() -> list:
    """Every item, in the order they start: the few one-off items, then the fidelity items and the
    verify/migrate items side by side (two of the first for one of the second, the long migrations
    early in theirs), so that a budget that ends early cuts both parts alike, not one whole."""
    first = [semantics(), gpu_tests()] + [distributed(folder, script, original) for folder, script, original in DISTRIBUTED]
    runs = [migrate(folder, entry, MIGRATE_RC.get(folder.name, 0)) for folder, entry in migrate_fixtures()]
    runs += [migrate(FIXTURES / "projects" / name, entry) for name, entry in MIGRATE_PROJECTS]
    runs += [verify_project(FIXTURES / "projects" / name, entry) for name, entry in VERIFY_PROJECTS]
    runs += [verify_pair(m, o, MAX_STEPS.get(m.name, 10), PAIR_OPTIONS.get(str(m.relative_to(RUNTIME)), ()),
                         PAIR_VERDICT.get(str(m.relative_to(RUNTIME)), "pass")) for m, o in verify_pairs()]
    return first + interleave([fidelity(p) for p in fidelity_scripts()], runs, 2)


def speed_items(gpu: str) -> list:
    """The speed part: its own command (--speed), one item at a time, since its step times are the host's."""
    return [speed(name, gpu) for name in SPEED_SCRIPTS]


def interleave(many: list, few: list, ratio: int) -> list:
    """`ratio` of `many`, then one of `few`, until both are used up."""
    out: list = []
    while many or few:
        out += many[:ratio] + few[:1]
        many, few = many[ratio:], few[1:]
    return out


def select(items: list, only: list, limit: Optional[int]) -> list:
    """The items whose name contains (or matches, as a glob) one of `only`; at most `limit` of each part."""
    if only:
        items = [i for i in items if any(p in i.name or fnmatch.fnmatchcase(i.name, p) for p in only)]
    if limit is not None:
        counts: dict = {}
        kept = []
        for i in items:
            counts[i.part] = counts.get(i.part, 0) + 1
            if counts[i.part] <= limit:
                kept.append(i)
        items = kept
    return items


# -- running them, and the report ------------------------------------------------------------------------

_ENVIRONMENT = r"""
import json, os, platform
import torch
cuda = torch.cuda.is_available()
dist = torch.distributed.is_available()
info = {"python": platform.python_version(), "torch": torch.__version__, "cuda_available": cuda,
        "cuda_version": torch.version.cuda, "device_count": torch.cuda.device_count() if cuda else 0,
        "cpu_count": os.cpu_count()}
for key, get in (("device_name", lambda: torch.cuda.get_device_name(0) if cuda else None),
                 ("nccl", lambda: bool(dist and torch.distributed.is_nccl_available())),
                 ("nccl_version", lambda: str(torch.cuda.nccl.version()) if cuda and dist else None)):
    try:
        info[key] = get()
    except Exception as e:  # an extra that fails is said, not fatal
        info[key] = f"unknown ({type(e).__name__}: {e})"
print(json.dumps(info))
"""


def environment(env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", _ENVIRONMENT], capture_output=True, text=True, env=env, cwd="/",
                         timeout=300)
    if out.returncode:
        return {"error": out.stderr[-1500:]}
    return json.loads(out.stdout)


def mode_line(device: str, info: dict) -> str:
    if device == "cuda":
        return f"cuda: the simulated device against real CUDA ({info.get('device_name')})"
    return ("sim: the simulated device stands in for CUDA; the fidelity part compares sim with sim and agrees by "
            "construction, which proves only the plumbing of this check, not the simulator")


class Report:
    """The report as it grows; written after every item, so that a check cut short leaves what it found."""

    def __init__(self, out: Path, head: dict, items: list):
        self.out = out
        self.lock = threading.Lock()
        self.head = head
        self.results: dict = {i.name: {"name": i.name, "status": "pending"} for i in items}
        self.parts = {i.name: i.part for i in items}
        self.t0 = time.monotonic()

    def record(self, name: str, result: dict) -> None:
        with self.lock:
            self.results[name] = dict({"name": name}, **result)
            self.write()

    def data(self) -> dict:
        parts: dict = {}
        for name, res in self.results.items():
            part = parts.setdefault(self.parts[name], {"items": []})
            part["items"].append(res)
        for part in parts.values():
            items = part["items"]
            done = [r for r in items if "started_s" in r]
            part["wall_s"] = round(max((r["ended_s"] for r in done), default=0) -
                                   min((r["started_s"] for r in done), default=0), 2)
            part["counts"] = _counts(items)
            part["failures"] = [r["name"] for r in items if r["status"] == "done" and not r.get("ok")]
        fid = parts.get("fidelity")
        if fid:
            fid["disagreements"] = [_disagreement(r) for r in fid["items"] if r["status"] == "done" and not r.get("ok")]
            fid["verdict_differences"] = [r["name"] for r in fid["items"] if r.get("same_verdict") is False]
        every = [r for part in parts.values() for r in part["items"]]
        return dict(self.head, wall_s=round(time.monotonic() - self.t0, 2), summary=_counts(every),
                    parts={p: parts[p] for p in PARTS if p in parts})

    def write(self) -> None:
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.data(), indent=1, default=str) + "\n")
        os.replace(tmp, self.out)


def _counts(items: list) -> dict:
    out = {"items": len(items), "ok": 0, "failed": 0, "errors": 0, "not_run": 0, "pending": 0}
    for r in items:
        if r["status"] == "done":
            out["ok" if r.get("ok") else "failed"] += 1
        elif r["status"] == "error":
            out["errors"] += 1
        elif r["status"].startswith(("not run", "stopped")):
            out["not_run"] += 1
        else:
            out["pending"] += 1
    return out


def _disagreement(r: dict) -> dict:
    if "sim" in r:
        return {"script": r["script"], "sim": r["sim"]["outcome"], "device": r["device"]["outcome"],
                "device_exception": r["device"].get("exception"), "sim_exception": r["sim"].get("exception")}
    return {"script": r.get("script"), "checks": r.get("disagreements")}


def run_item(item: Item, ctx: Context, report: Report) -> None:
    start = time.monotonic()
    base = {"part": item.part, "started_s": round(start - report.t0, 2)}
    if ctx.remaining() <= 1.0:
        report.record(item.name, {"part": item.part, "status": "not run (budget)"})
        return
    try:
        result = dict(base, status="done", **item.run(ctx))
    except OutOfBudget as e:
        result = dict(base, status="stopped (budget)", note=str(e) or "the budget ended during this item")
    except Exception as e:  # one item's failure is recorded; the others go on
        result = dict(base, status="error", error=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc()[-3000:])
    result["ended_s"] = round(time.monotonic() - report.t0, 2)
    result["wall_s"] = round(time.monotonic() - start, 2)  # the whole item (a CLI call's own: its "cli_s")
    report.record(item.name, result)


def child_env(device: str) -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")  # many children at once (runner.py keeps a value that is set)
    env.setdefault("PYTHONHASHSEED", "0")
    if device != "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ""  # sim mode touches no GPU, even on a machine that has one
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "sim"), default="cuda")
    ap.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    ap.add_argument("--budget-s", type=float, default=BUDGET_S)
    ap.add_argument("--jobs", type=int, default=max(2, (os.cpu_count() or 2) // 2),
                    help="items at once (default: half the cores)")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="only the items whose name contains PATTERN (or matches it as a glob); repeatable")
    ap.add_argument("--limit", type=int, default=None, help="at most N items of each part")
    ap.add_argument("--list", action="store_true", help="print the items' names and exit")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--speed", action="store_true",
                    help="the speed part instead of the others: fixtures/speed timed one item at a time (--jobs 1)")
    ap.add_argument("--gpu-name", default="H100", help="with --speed, the card the estimates are for (speed.gpus)")
    opts = ap.parse_args(argv)

    if opts.speed:
        opts.jobs = 1
    items = select(speed_items(opts.gpu_name) if opts.speed else all_items(), opts.only, opts.limit)
    if opts.list:
        print("\n".join(i.name for i in items))
        return 0
    started = time.monotonic()
    env = child_env(opts.device)
    os.environ.update({k: env[k] for k in ("OMP_NUM_THREADS", "PYTHONHASHSEED")})  # the in-process runs too
    if opts.device != "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    info = environment(env)
    head = {"mode": mode_line(opts.device, info), "device": opts.device, "environment": info,
            "budget_s": opts.budget_s, "jobs": opts.jobs, "only": opts.only, "limit": opts.limit,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    report = Report(opts.out, head, items)
    if opts.device == "cuda" and not info.get("cuda_available"):
        report.head["error"] = "no CUDA device here (use --device sim to exercise the check without one)"
        report.write()
        print(report.head["error"], file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    ctx = Context(opts.device, started + opts.budget_s, scratch, env)
    report.write()
    try:
        with ThreadPoolExecutor(max(1, opts.jobs)) as pool:
            list(pool.map(lambda item: run_item(item, ctx, report), items))
    finally:
        report.write()
        if not opts.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    data = report.data()
    print(summary_text(data))
    return 0 if all(p["counts"]["ok"] == p["counts"]["items"] for p in data["parts"].values()) else 1


def summary_text(data: dict) -> str:
    env = data.get("environment") or {}
    lines = [data["mode"], f"torch {env.get('torch')}, {env.get('device_name') or 'no GPU'}, "
                           f"{data['wall_s']:.0f} s of a {data['budget_s']:.0f} s budget"]
    for name, part in data["parts"].items():
        c = part["counts"]
        lines.append(f"{name}: {c['ok']}/{c['items']} ok, {c['failed']} failed, {c['errors']} errors, "
                     f"{c['not_run']} not run ({part['wall_s']:.0f} s)")
        for failed in part["failures"]:
            lines.append(f"  not ok: {failed}")
    for d in (data["parts"].get("fidelity") or {}).get("disagreements", ()):
        lines.append(f"  disagreement: {json.dumps(d, default=str)[:400]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
