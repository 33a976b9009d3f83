"""Plan the runs of one verification, run them, compare them, and reach a verdict."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, cast

from . import compare as cmp
from . import distributed, reach
from ..child.notebookrun import is_notebook
from ..speed import findings, gpus
from ..records import (BandMeasure, Comparison, Coverage, DeviceChoiceRecord, Divergence, MissingPackage, NeededData,
                       Reason, RunResult, SpeedReport, VerifiedRun, VerifyReport, Where)
from .runner import RunSpec, run

DEVICES = ("auto", "cuda", "cpu", "sim", "sim-mps", "mps", "xpu")
DEVICE_MODES = ("cuda", "sim", "sim-mps", "mps", "xpu")  # the runs that must train on the device
SPEED_MODES = ("sim", "cuda")  # the runs verify --speed counts in
OK = ("ok", "max_steps")


def device_run(report: Mapping[str, Any]) -> VerifiedRun | None:
    """The migrated script's run on the device (simulated or real)."""
    return next((r for r in report["runs"] if r["role"] == "migrated" and r["mode"] != "cpu"), None)


def cpu_run(report: Mapping[str, Any]) -> VerifiedRun | None:
    """The migrated script's run with CUDA hidden: the CPU fallback."""
    return next((r for r in report["runs"] if r["role"] == "migrated" and r["mode"] == "cpu"), None)


def cpu_fallback_ok(report: Mapping[str, Any]) -> bool:
    """The migrated copy, with CUDA hidden, ran and gave the original's losses."""
    run = cpu_run(report)
    if run is None or run["status"] not in OK:
        return False
    return not any(r["run"] == run["label"] for r in report["reasons"])
NEEDS_DATA = "needs_data"  # a run's status: it stopped on data that is not here (--synthetic-data)


class VerifyError(Exception):
    """A usage problem: no verdict can be reached (exit 2)."""


def cuda_available() -> bool:
    import torch  # only to look for a GPU: the parent imports this module without torch (start-up time)

    return bool(torch.cuda.is_available())


def accelerator_available(kind: str) -> bool:
    """A real Apple (mps) or Intel (xpu) GPU here."""
    import torch  # only to look for a GPU: the parent imports this module without torch (start-up time)

    if kind == "mps":
        return bool(torch.backends.mps.is_available())
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def plan(script: str, args: list, against: str | None, device: str, has_cuda: bool, nproc=None,
         with_cpu: bool = False) -> list:
    if nproc:  # the migrated script under torchrun, nproc ranks a run; the original as always
        specs = [RunSpec("original (cpu)", "original", against, "cpu", list(args))] if against else []
        return specs + [RunSpec(distributed.label(m, nproc), "migrated", script, m, list(args), nproc)
                        for m in distributed.modes(device, nproc)]
    if device == "cuda" and not has_cuda:
        raise VerifyError("--device cuda: no CUDA GPU here; use --device sim to simulate one")
    if device == "auto":
        modes = ["cuda" if has_cuda else "sim", "cpu"]
    else:
        modes = [device] + (["cpu"] if with_cpu and device != "cpu" else [])
    specs = []
    if against:
        specs.append(RunSpec("original (cpu)", "original", against, "cpu", list(args)))
    for m in modes:
        specs.append(RunSpec(f"migrated ({m})", "migrated", script, m, list(args)))
    return specs


def _reason(spec: RunSpec, cause: str, rule=None, rule_name=None, where=None) -> Reason:
    return {"run": spec.label, "cause": cause, "rule": rule, "rule_name": rule_name, "where": where}


def _run_failure(spec: RunSpec, res: RunResult) -> Reason:
    diag = res.get("diagnosis")
    if diag:
        return _reason(spec, diag["cause"], diag.get("rule"), diag.get("rule_name"), diag.get("where"))
    exc = res.get("exception") or {}
    if res["status"] == "exit":
        return _reason(spec, f"the script exited with code {res.get('exit_code')}")
    where: Where | None = {"file": exc.get("file"), "line": exc.get("line")} if exc.get("file") else None
    at = f" at {exc['file']}:{exc['line']}" if where else ""
    return _reason(spec, f"the script raised {exc.get('type')}: {exc.get('message')}{at}", where=where)


def _no_step_cause(spec: RunSpec, res: RunResult) -> str:
    cause = (f"no training step ran in the {spec.mode} run (0 optimizer steps): "
             f"nothing shows that the script trains on the device")
    if res.get("cpu_forward_calls"):
        cause += f"; its {res['cpu_forward_calls']} module calls ran on the CPU"
    return cause


def _cpu_chosen_cause(spec, choice: DeviceChoiceRecord) -> str:
    """The model was moved, to the CPU the script chose (a flag not given, a device line without the GPU)."""
    first = choice["moved_to_cpu"][0]
    cause = (f"no module ran on the device in the {spec.mode} run: the script moved its model to the CPU, "
             f"the device it chose (.to() at {first['file']}:{first['line']})")
    flags = choice.get("flags_off") or []
    if flags:
        options = " or ".join(f["option"] for f in flags)
        helps = "; ".join(f"{f['option']}: {f['help']}" for f in flags if f["help"])
        cause += f"; its option {options} picks the accelerator and was not given" + (f" ({helps})" if helps else "")
        given = " ".join([spec.script, *map(str, spec.args), flags[0]["option"]])
        cause += f": pass it to the script (cpu2gpu verify {given})"
    else:
        cause += "; make the script's device pick the accelerator (cpu2gpu check reports a device that is the CPU " \
                 "always as CG205)"
    return cause


def judge(specs: list, results: list[RunResult], rtol=None, band_values: list | None = None) -> VerifyReport:
    reasons: list[Reason] = []
    comparisons: list[Comparison] = []
    errors: list[Reason] = []
    by_label = dict(zip((s.label for s in specs), results))
    original = next((res for spec, res in zip(specs, results) if spec.role == "original"), None)

    for spec, res in zip(specs, results):
        if res["status"] == NEEDS_DATA:
            continue  # not a finding about the migration: reported below, as its own verdict
        if res.get("missing_package"):  # the environment's, not the migration's: no verdict here
            errors.append(_missing_package_reason(spec, res["missing_package"]))
            continue
        if res["status"] not in OK:
            failure = _run_failure(spec, res)
            limit = bool((res.get("diagnosis") or {}).get("sim_limit"))  # the simulator's, not the script's
            if limit:
                failure["sim_limit"] = True
            (errors if spec.role == "original" or limit else reasons).append(failure)
        elif spec.mode in DEVICE_MODES and res["device_forward_calls"] == 0 \
                and not any(d != "cpu" for d in res.get("trained_devices", ())):
            if not res.get("steps") and original is not None and original["status"] in OK \
                    and not original.get("steps") and not original.get("losses"):
                # the original trains nowhere here either (its data, its options): there is nothing to prove
                errors.append({**_reason(spec, "the original trains nowhere here either (0 optimizer steps in "
                                               "its run): there is no training to compare"), "idle_original": True})
            elif not res.get("steps"):
                # Nothing trained, so nothing shows where the model is: a rule blamed here could be false.
                reasons.append(_reason(spec, _no_step_cause(spec, res)))
            elif not res.get("modules") and res.get("trained_devices"):
                reasons.append(_reason(  # no module at all: the optimizer trains plain tensors
                    spec, f"the tensors the optimizer trains stayed on the CPU in the {spec.mode} run",
                    "CG102", "tensor-not-moved"))
            elif spec.mode in ("sim-mps", "mps") and res.get("cuda_queries"):
                # the model was moved to what the device line picked: the CPU, on a machine without CUDA
                reasons.append(_reason(
                    spec, f"no module ran on the device in the {spec.mode} run: the device line picks only CUDA "
                          f"(torch.cuda.is_available() is False on an Apple GPU), so the script ran on the CPU; "
                          f"pick the accelerator instead: cpu2gpu rewrite --device-style accelerator"))
            elif (res.get("device_choice") or {}).get("moved_to_cpu"):
                reasons.append(_reason(spec, _cpu_chosen_cause(spec, res["device_choice"])))
            else:
                reasons.append(_reason(
                    spec, f"no module ran on the device in the {spec.mode} run: the model (and its inputs) "
                          f"were never moved to the GPU", "CG101", "model-not-moved"))
        for e in res.get("events", []):
            if e["kind"] == "non-leaf-parameter" and spec.mode in DEVICE_MODES:
                reasons.append(_reason(
                    spec, f"{e['module']} holds a tensor computed from a parameter (nn.Parameter(...).to(device)): "
                          f"it is not registered and never trained", "CG112", "parameter-moved-at-creation",
                    e.get("where")))
            if e["kind"] == "cpu-input-to-device-module" and res["status"] in OK:
                w = e.get("where") or {}
                at = f" at {w['file']}:{w['line']}" if w.get("file") else ""
                reasons.append(_reason(spec, f"a CPU tensor reached {e['module']}, which is on the device{at}",
                                       "CG102", "tensor-not-moved", e.get("where")))
        if spec.nproc:  # every rank trained, the same steps, the ranks' parameters stayed equal
            reasons.extend(_reason(spec, cause) for cause in distributed.reasons(res))

    ref_spec = _reference_spec(specs)
    ref = by_label.get(ref_spec.label) if ref_spec else None
    if ref_spec is not None and ref is not None and ref["status"] in OK:  # ref is None without a ref_spec
        for spec, res in zip(specs, results):
            if spec is ref_spec or res["status"] not in OK:
                continue
            c = distributed.compare(ref, res, rtol) if spec.nproc else cmp.compare(ref, res, rtol, band_values)
            c.update({"run": spec.label, "reference": ref_spec.label})
            comparisons.append(c)
            if not ref["losses"]:
                c["note"] = "no loss was recorded (no .backward() call): nothing to compare"
                continue
            if spec.nproc:  # by the trend: a DistributedSampler draws its own order
                if not c["ok"]:
                    reasons.append(_reason(spec, distributed.divergence_cause(c, ref_spec.label)))
                continue
            if len(ref["losses"]) != len(res["losses"]) or ref["steps"] != res["steps"]:
                reasons.append(_reason(
                    spec, f"it recorded {len(res['losses'])} losses in {res['steps']} steps, "
                          f"{ref_spec.label} {len(ref['losses'])} in {ref['steps']}"))
            if not c["ok"]:
                d = cast(Divergence, c["first_divergence"])  # set where the runs part
                if c["method"] == "step":
                    cause = (f"the losses part from {ref_spec.label} at step {d['step']}: {d['value']:.6g} against "
                             f"{d['reference']:.6g} (relative difference {d['rel_diff']:.2g} > "
                             f"{d.get('tolerance', c['rtol']):.2g}, the tolerance at that step"
                             + (f", {c['band']['factor']:g} x the band the original's own rounding makes"
                                if (c.get("band") or {}).get("max") else "") + ")")
                else:
                    cause = (f"the loss trend differs from {ref_spec.label}: it ends near {d['value']:.6g} "
                             f"against {d['reference']:.6g}")
                reasons.append(_reason(spec, cause))

    coverage: list[Coverage] = []
    unproven: list[Reason] = []
    if ref_spec is not None and ref is not None and ref["status"] in OK:
        for spec, res in zip(specs, results):
            if spec is ref_spec or spec.role != "migrated" or spec.nproc or res["status"] not in OK:
                continue
            cov = reach.reached(ref, res)
            if cov is None:
                continue
            cov.update({"run": spec.label, "reference": ref_spec.label})
            coverage.append(cov)
            if cov["missing_count"]:
                unproven.append({**_reason(
                    spec, f"{cov['missing_count']} of the {cov['ran']} lines that {ref_spec.label} ran did not run in "
                          f"{spec.label}, so they are not proven: {_missing_lines(cov)}",
                    where={"file": cov["missing"][0]["file"], "line": cov["missing"][0]["line"]}), "unproven": True})
    for spec, res in zip(specs, results):
        stop = _cap_stop(res) if spec.role == "migrated" else None
        if stop is not None:
            unproven.append({**_reason(spec, stop, where=((res["cap"] or {}).get("stopped_at") or None)),
                             "unproven": True})

    needs = needed_data(specs, results)
    data_reasons = [_reason(spec_of(specs, n["runs"][0]), f"needs data: {n['path']}{_hint(n, results)}",
                            where=n.get("where")) for n in needs]
    verdict = ("error" if errors else "fail" if reasons else "needs-data" if needs
               else "unproven" if unproven else "pass")
    return {"verdict": verdict, "reasons": errors + reasons + data_reasons + unproven, "comparisons": comparisons,
            "needs_data": needs, "coverage": coverage}


def _reference_spec(specs: list) -> RunSpec | None:
    """The run the others are held to: the original, else the CPU run of the migrated script."""
    return next((s for s in specs if s.role == "original"), None) or next((s for s in specs if s.mode == "cpu"), None)


def _parts_by_rounding(report: VerifyReport) -> bool:
    """Whether a step-by-step comparison failed: then the original's own sensitivity to rounding decides."""
    return any(c["method"] == "step" and not c["ok"] for c in report["comparisons"])


def _measure_band(specs: list, results: list[RunResult], run_one) -> BandMeasure | None:
    """Run the reference again with the last bit of every op's result perturbed (band.py); its divergence from the
    reference, step by step, is the band. None when there is no reference that ran."""
    from ..steps import band  # band imports torch, which the parent loads only when a band is measured

    ref_spec = _reference_spec(specs)
    if ref_spec is None:
        return None
    ref = results[specs.index(ref_spec)]
    if ref["status"] not in OK or not ref["losses"]:
        return None
    twin = RunSpec(f"{ref_spec.label} again, last bits perturbed", "band", ref_spec.script, "cpu",
                   list(ref_spec.args), cwd=ref_spec.cwd, perturbed=True)
    res = run_one(twin)
    values = band.measure(ref["losses"], res["losses"]) if res["status"] in OK else []
    return {"run": twin.label, "status": res["status"], "values": values, "max": max(values, default=None)}


def _missing_lines(c: Coverage) -> str:
    shown = [f"{m['file']}:{m['line']}" + (f" ({m['source'][:60]})" if m["source"] else "") for m in c["missing"][:3]]
    more = c["missing_count"] - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _cap_stop(res: RunResult) -> str | None:
    """Why a run capped by --max-steps proves nothing after a line: the cap had to end the run there."""
    cap = res.get("cap") or {}
    if res["status"] not in OK or cap.get("ended") not in ("loop", "ceiling"):
        return None
    at = cap.get("stopped_at") or {}
    place = f"{at['file']}:{at['line']}" if at.get("file") else "the cap"
    why = ("a step that no loop of the script's own code drives" if cap["ended"] == "loop"
           else f"training that went on for more than {cap['ceiling']} steps after the cap")
    return (f"the capped run had to stop at {place} ({why}): the code after it never ran, so it is not proven; "
            f"more steps (--max-steps) or none let it run")


def _missing_package_reason(spec: RunSpec, missing: MissingPackage) -> Reason:
    where = missing.get("where")
    at = f" at {where['file']}:{where['line']}" if where else ""
    reason = _reason(spec, f"the script imports `{missing['name']}`, which is not installed here "
                           f"(pip install {missing['pip']}){at}", where=where)
    reason["missing_package"] = missing["name"]
    return reason


def _hint(needed: NeededData, results: list[RunResult]) -> str:
    """A failed download without the stand-ins: they may replace it (a known data set's download)."""
    synthetic = any(r.get("synthetic") for r in results)
    return " (or run with --synthetic-data)" if needed.get("download") and not synthetic else ""


def spec_of(specs: list, label: str) -> RunSpec:
    return next(s for s in specs if s.label == label)


def needed_data(specs: list, results: list[RunResult]) -> list[NeededData]:
    """The data the runs stopped on, one entry per path, with the runs that needed it."""
    by_path: dict[str, NeededData] = {}
    for spec, res in zip(specs, results):
        nd = res.get("needs_data")
        if res["status"] != NEEDS_DATA or not nd:
            continue
        entry = by_path.setdefault(nd["path"], {**nd, "runs": []})
        entry["runs"].append(spec.label)
    return list(by_path.values())


def _read_notebook(path: str) -> None:
    """A file that is not a notebook is a usage error, found before any run starts."""
    # only for a notebook: the static engine takes ~0.25 s to import, which verifying a script does not need
    from cpu2gpu.engine import SourceError
    from cpu2gpu.notebooks.cells import load

    try:
        with open(path, "rb") as f:
            load(f.read())
    except (OSError, SourceError) as error:
        raise VerifyError(f"{path}: {getattr(error, 'message', error)}") from None


def verify(script: str, args=(), *, against=None, device="auto", max_steps=None, seed=0, timeout=600.0,
           jobs=None, rtol=None, cwd=None, keep=False, show_output=False, synthetic_data=False,
           clean_env=False, env_allow=(), progress=None, nproc=None, with_cpu=False, against_cwd=None,
           reference=None, reference_band=None, root=None, device_flag=None, speed=False,
           gpu=None) -> VerifyReport:
    """Run `script` (and `against`) as planned; return the whole report as data.
    `progress` (a progressview.ProgressView) is told of each run as it goes.
    `nproc` (>= 2): run `script` under torchrun with that many ranks (judge/distributed.py).
    `with_cpu`: the CPU fallback run as well, whatever the device. `against_cwd`: the folder the
    original runs from (default `cwd`). `reference`: the original's result from an earlier
    verification of the same original, reused instead of running it again (migrate's rounds);
    `reference_band`: that verification's measured band (its "band"), likewise. `root`: the folder the
    migrated runs copy (migrate's draft, whose project markers were not copied), else chosen. `device_flag`:
    the script's opt-in GPU flag (a migration.deviceflags.DeviceFlag), given to the runs on a device only.
    `speed`: count what keeps the GPU idle in the device run, and estimate it for `gpu` (a name speed.gpus
    knows; None: its default): the report's "speed"."""
    for path in filter(None, (script, against)):
        if not os.path.isfile(path):
            raise VerifyError(f"no such file: {path}")
        if is_notebook(path):
            _read_notebook(path)
    if device not in DEVICES:
        raise VerifyError(f"unknown device {device!r}")
    if nproc is not None:
        try:
            distributed.check(script, device, nproc, is_notebook(script))
        except distributed.DistributedUnavailable as e:
            raise VerifyError(str(e)) from None
    try:
        card = gpus.named(gpu) if speed or gpu else None
    except KeyError:
        raise VerifyError(f"unknown GPU {gpu!r}: one of " + ", ".join(g.name for g in gpus.GPUS.values())) from None
    if device in ("mps", "xpu") and not accelerator_available(device):
        other = "--device sim-mps to simulate one" if device == "mps" else "--device sim to simulate a GPU"
        raise VerifyError(f"--device {device}: no {device} device here; use {other}")
    has_cuda = cuda_available() if device in ("auto", "cuda") and not nproc else False
    specs = plan(script, list(args), against, device, has_cuda, nproc, with_cpu)
    for spec in specs:
        if spec.role == "original" and against_cwd is not None:
            spec.cwd = against_cwd
        if spec.role == "migrated":
            spec.root = root
            if device_flag is not None and spec.mode != "cpu":
                spec.args = spec.args + list(device_flag.args)
                spec.env = dict(device_flag.env)
            spec.speed = card is not None and spec.mode in SPEED_MODES and not spec.nproc
    if jobs is None:
        jobs = max(1, min(len(specs), (os.cpu_count() or 1) // 2))

    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None

    if progress:
        progress.start(script, device, specs, max_steps)

    def one(spec: RunSpec) -> RunResult:
        if spec.role == "original" and reference is not None:
            return reference
        on_progress = (lambda line: progress.update(spec.label, line)) if progress else None
        if progress:
            progress.begin(spec.label)
        run_one = distributed.run if spec.nproc else run  # under torchrun, or one process
        res = run_one(spec, max_steps=max_steps, seed=seed, timeout=timeout, cwd=spec.cwd or cwd, keep=keep,
                  show_output=show_output, threads=threads, synthetic_data=synthetic_data,
                  clean_env=clean_env, env_allow=tuple(env_allow), on_progress=on_progress)
        if progress:
            progress.done(spec.label, res)
        return res

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, specs))
    out = judge(specs, results, rtol)
    measured = reference_band
    if measured is None and rtol is None and _parts_by_rounding(out):
        measured = _measure_band(specs, results, one)
    if measured is not None and measured.get("values"):
        out = judge(specs, results, rtol, measured["values"])
    if measured is not None:
        out["band"] = measured
    out["runs"] = [{**r, "label": s.label, "role": s.role, "script": s.script} for s, r in zip(specs, results)]
    out["settings"] = {"script": script, "against": against, "args": list(args), "device": device,
                       "max_steps": max_steps, "seed": seed, "timeout": timeout, "jobs": jobs,
                       "synthetic_data": synthetic_data, "clean_env": clean_env, "env_allow": list(env_allow),
                       "nproc": nproc}
    if device_flag is not None:
        out["settings"]["device_flag"] = device_flag.shown()
    if card is not None:
        out["settings"]["speed"] = card.key
        out["speed"] = speed_section(specs, results, card)
    return out


def speed_section(specs: list, results: list[RunResult], card: gpus.Gpu) -> SpeedReport:
    """verify --speed's section: from the first run that counted (the device run), else why there is none."""
    for spec, res in zip(specs, results):
        profile = res.get("speed")
        if spec.speed and profile:
            return findings.report(spec.label, profile, card)
    device_runs = [spec for spec in specs if spec.speed]
    note = ("no run on a device: --speed counts in the run on the simulated device or a CUDA GPU (--device sim, "
            "cuda or auto)" if not device_runs else
            f"{device_runs[0].label} recorded no counts (it did not run to a training step)")
    return {"gpu": card.name, "causes": [], "counts": None, "estimate": None, "summary": note, "note": note,
            "omits": findings.OMITS}
