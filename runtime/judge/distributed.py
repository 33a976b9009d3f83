"""``cpu2gpu verify --nproc N``: run a DDP script under torchrun, one instrumented child per rank,
and judge what only several processes show.

The parent side (no torch import at module level, as runner.py): it starts
``python -m torch.distributed.run --standalone --nproc-per-node N --module cpu2gpu.runtime
--distributed ...`` in one copy of the script's folder (the ranks share it, as they share a
folder under a real torchrun), reads each rank's result (``result.json.rank<R>``, see
distributed_child), and merges them into one result of the usual shape: the losses are the mean
over the ranks of each step's loss, the steps those of a rank. What the ranks show is kept under
``distributed`` and judged here:

- every rank trained (optimizer steps > 0), and all took the same number of steps;
- the ranks' parameters stayed equal: after each optimizer step every rank's checksum (float64 sum
  and sum of squares of the parameters its optimizer holds) equals rank 0's within PARAM_RTOL; the
  first step and the ranks that differ fail the run (a model not wrapped in DDP);
- with --against, the loss trajectory agrees with the single-process original by its trend
  (``compare``), since a DistributedSampler draws its own order.
"""

from __future__ import annotations

import glob
import json
import math
import os
import signal
import subprocess
import sys

from . import compare as cmp
from ..records import (Comparison, Diagnosis, DistributedSummary, ExceptionRecord, ParamAgreement, ParamMismatch,
                       RankSummary, RunResult, Where)
from ..sandbox import proctree
from .runner import RunSpec, Sandbox, failed_result

DEVICES = ("auto", "cpu", "cuda")  # --nproc runs on the CPU (gloo), or on N CUDA GPUs, one per rank
# Trend tolerance of the loss agreement with the original (--rtol overrides it): the mean loss of
# the last fifth of the steps within TREND_RTOL of the original's, relative to the larger of the
# original's last-fifth mean and how far its loss moved (see compare).
TREND_RTOL = 0.25
# The ranks' parameter checksums agree when |a - b| <= PARAM_RTOL * scale. DDP gives every rank the
# same averaged gradients (all-reduce), so they are equal to the bit in practice.
PARAM_RTOL = 1e-9
OK = ("ok", "max_steps")
STOP_GRACE_S = 10.0


class DistributedUnavailable(Exception):
    """A usage problem found before any run starts (exit 2)."""


def check(script: str, device: str, nproc: int, notebook: bool) -> None:
    """Refuse what --nproc cannot run, with a one-line reason."""
    if nproc < 2:
        raise DistributedUnavailable(f"--nproc {nproc}: give 2 or more processes")
    if notebook:
        raise DistributedUnavailable(f"--nproc runs a script under torchrun, not a notebook: {script}")
    if device not in DEVICES:
        raise DistributedUnavailable(f"--nproc runs on the CPU (gloo) or on N CUDA GPUs, not on --device {device}")
    import torch  # only for --nproc: the parent imports this module without torch (start-up time)

    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        raise DistributedUnavailable("--nproc: this torch has no torch.distributed "
                                     f"(torch {torch.__version__} was built without it)")
    if device in ("auto", "cpu") and not dist.is_gloo_available():
        raise DistributedUnavailable("--nproc: this torch has no gloo backend, which the ranks need on the CPU")
    if device == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count < nproc:
            raise DistributedUnavailable(f"--nproc {nproc} --device cuda: each rank needs its own GPU, "
                                         f"and there {'is' if count == 1 else 'are'} {count} here")


def modes(device: str, nproc: int) -> list:
    """The runs: cuda (one GPU per rank) where there are enough GPUs, and the CPU, the floor."""
    if device == "cpu":
        return ["cpu"]
    if device == "cuda":
        return ["cuda"]
    import torch  # only for --nproc: the parent imports this module without torch (start-up time)

    enough = torch.cuda.is_available() and torch.cuda.device_count() >= nproc
    return ["cuda", "cpu"] if enough else ["cpu"]


def label(mode: str, nproc: int) -> str:
    return f"migrated ({mode}, {nproc} ranks)"


# -- running ---------------------------------------------------------------------------------------


def run(spec: RunSpec, *, max_steps=None, seed=0, timeout=600.0, cwd=None, keep=False, show_output=False,
        threads=None, synthetic_data=False, clean_env=False, env_allow=(), on_progress=None) -> RunResult:
    """Run spec.script under torchrun with spec.nproc ranks; return the merged result."""
    nproc = spec.nproc
    box = Sandbox.make(spec.script, cwd, "cpu2gpu-verify-ddp-", spec.root, keep)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "--max-restarts", "0", "--module", "cpu2gpu.runtime", "--distributed",
           *box.child_args(spec, seed, max_steps, synthetic_data, on_progress is not None)]
    env = box.child_env(spec, clean_env, env_allow)  # on the CPU no GPU is seen, so the script takes gloo
    # The ranks share the cores this run was given (torchrun would otherwise set 1 and warn).
    env.setdefault("OMP_NUM_THREADS", str(max(1, (threads or os.cpu_count() or 1) // nproc)))

    # rank 0 speaks for the run; the end covers torchrun, the ranks' keepers and all they left
    proc, timed_out, wall = box.run_child(cmd, env, timeout, on_progress, box.progress + ".rank0",
                                          lambda proc: _stop(proc, box.result))

    ranks: list[RunResult] = []
    for r in range(nproc):
        path = f"{box.result}.rank{r}"
        res: RunResult | None = None
        if os.path.exists(path):
            try:
                with open(path) as f:
                    res = json.load(f)
                res["finished_at"] = os.stat(path).st_mtime_ns
            except (OSError, ValueError):
                res = None
        if res is None:
            res = failed_result(spec, "crashed", f"rank {r} exited without a result")
            res["finished_at"] = None
        ranks.append(res)
    result = merge(spec, ranks, timed_out=timed_out, timeout=timeout, returncode=proc.returncode)
    # every rank's refusals count (merge keeps rank 0's record)
    result["refused_writes"] = [w for res in ranks for w in res.get("refused_writes") or []]
    result["distributed"]["wall_seconds"] = wall
    return box.finish(result, proc, wall, show_output, keep, f"{spec.label} (torchrun, {nproc} ranks)")


def _rank_pids(result_path: str) -> list:
    pids = []
    for path in sorted(glob.glob(glob.escape(result_path) + ".rank*.pid")):
        try:
            with open(path) as f:
                pids.append(int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return pids


def _stop(proc: subprocess.Popen, result_path: str) -> None:
    """The timeout: SIGTERM to every rank (its keeper passes it on; each reports where it hung), torchrun
    then ends as its workers fail; after STOP_GRACE_S its whole family is killed."""
    pids = _rank_pids(result_path)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    if not pids:
        try:
            proc.send_signal(signal.SIGTERM)
        except OSError:
            pass
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is None:  # still there after the grace: the whole family goes
        proctree.kill_family(proc.pid)
        proc.wait()


# -- merging the ranks -------------------------------------------------------------------------------


# What a rank raises when another rank died under it: its peers' sockets closed mid-collective.
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing", "Broken pipe")


def _stopped_by_torchrun(res: RunResult) -> bool:
    """A rank stopped by a SIGTERM (torchrun's, after another rank failed, or the timeout's), or
    failed by the loss of a peer: not where the run went wrong."""
    exc = res.get("exception") or {}
    if res.get("status") != "error":
        return False
    return exc.get("type") == "TimedOut" or any(m in (exc.get("message") or "") for m in PEER_GONE)


def _culprit(ranks: list[RunResult], timed_out: bool) -> tuple[int, RunResult] | None:
    """The rank whose failure ended the run: the first to fail (by when its result was written)
    among those that were not stopped by torchrun (or by the timeout) after another one failed."""
    failed = [(r, res) for r, res in enumerate(ranks) if res["status"] not in OK]
    if not failed:
        return None
    own = [(r, res) for r, res in failed if not _stopped_by_torchrun(res)]
    if timed_out or not own:
        own = own or failed
    return min(own, key=lambda x: (x[1].get("status") == "crashed", x[1].get("finished_at") or 0, x[0]))


def merge(spec: RunSpec, ranks: list[RunResult], *, timed_out=False, timeout=None, returncode=None) -> RunResult:
    """One result of the usual shape for the whole torchrun, with the ranks under "distributed"."""
    nproc = len(ranks)
    base = ranks[0].copy()
    lengths = [len(r.get("losses") or []) for r in ranks]
    n = min(lengths) if lengths else 0
    mean_losses = [sum(r["losses"][i] for r in ranks) / nproc for i in range(n)]
    steps = [r.get("steps", 0) for r in ranks]
    culprit = _culprit(ranks, timed_out)

    status = "max_steps" if any(r["status"] == "max_steps" for r in ranks) else "ok"
    exception: ExceptionRecord | None = None
    diagnosis: Diagnosis | None = None
    if timed_out:
        status = "timeout"
        hung = [r for r, res in enumerate(ranks) if res["status"] not in OK]
        exc = (ranks[hung[0]].get("exception") or {}) if hung else {}
        where: Where | None = {"file": exc.get("file"), "line": exc.get("line")} if exc.get("file") else None
        at = f" at {where['file']}:{where['line']}" if where else ""
        places = []
        for r in hung:
            e = ranks[r].get("exception") or {}
            places.append(f"rank {r} at {e['file']}:{e['line']}" if e.get("file") else f"rank {r}")
        who = ", ".join(places) if hung else "torchrun"
        at = ""
        exception = {"type": "Timeout", "message": f"stopped after {timeout:g} s ({who}{at})", "file": exc.get("file"),
                     "line": exc.get("line"), "source": exc.get("source"), "traceback": exc.get("traceback", "")}
        diagnosis = {"cause": f"the ranks did not finish within {timeout:g} s and were stopped ({who}{at}); "
                              f"a rank that stops stepping while the others wait in an all-reduce hangs them",
                     "rule": None, "rule_name": None, "where": where}
    elif culprit is not None:
        r, res = culprit
        status = res["status"]
        exc = (res.get("exception") or {}).copy()
        if exc.get("message") is not None:
            exc["message"] = f"rank {r}: {exc['message']}"
        exception = exc or None
        diag = res.get("diagnosis")
        if diag:
            diagnosis = {**diag, "cause": f"rank {r}: {diag['cause']}"}
        elif exc.get("type") and status == "error":
            where = {"file": exc.get("file"), "line": exc.get("line")} if exc.get("file") else None
            at = f" at {exc['file']}:{exc['line']}" if where else ""
            diagnosis = {"cause": f"rank {r} raised {exc['type']}: {(res['exception'] or {}).get('message')}{at}",
                         "rule": None, "rule_name": None, "where": where}
        elif status == "exit":
            diagnosis = {"cause": f"rank {r}: the script exited with code {res.get('exit_code')}",
                         "rule": None, "rule_name": None, "where": None}
        else:
            diagnosis = {"cause": f"rank {r}: {exc.get('message') or status}", "rule": None, "rule_name": None,
                         "where": None}
    elif returncode not in (0, None):
        status = "crashed"
        exception = {"type": "crashed", "message": f"torchrun exited with code {returncode}", "file": None,
                     "line": None, "source": None, "traceback": ""}
        diagnosis = {"cause": f"torchrun exited with code {returncode} although every rank finished",
                     "rule": None, "rule_name": None, "where": None}

    events, seen = [], set()
    for res in ranks:
        for event in res.get("events", []):
            key = (event.get("kind"), event.get("module"))
            if key not in seen:
                seen.add(key)
                events.append(event)
    base.update({
        "mode": spec.mode, "status": status, "exit_code": culprit[1].get("exit_code") if culprit else 0,
        "losses": mean_losses, "steps": min(steps) if steps else 0,
        "device_forward_calls": sum(r.get("device_forward_calls", 0) for r in ranks),
        "cpu_forward_calls": sum(r.get("cpu_forward_calls", 0) for r in ranks),
        "trained_devices": sorted({d for r in ranks for d in r.get("trained_devices", ())}),
        "events": events, "exception": exception, "diagnosis": diagnosis,
        "device_rng": any(r.get("device_rng") for r in ranks),
        "distributed": summarize(ranks, culprit, timed_out),
    })
    if culprit is not None and "needs_data" in culprit[1]:
        base["needs_data"] = culprit[1]["needs_data"]
    base.pop("rank", None)
    base.pop("finished_at", None)
    return base


def params_agree(ranks: list[RunResult]) -> ParamAgreement:
    """Compare the ranks' parameter checksums after each step with rank 0's."""
    sums = [((r.get("rank") or {}).get("param_checksums") or []) for r in ranks]
    n = min((len(s) for s in sums), default=0)
    first: ParamMismatch | None
    first, max_rel = None, 0.0
    for i in range(n):
        ref = sums[0][i]
        for r in range(1, len(sums)):
            other = sums[r][i]
            rel = _checksum_rel(ref, other)
            max_rel = max(max_rel, rel)
            if first is None and rel > PARAM_RTOL:
                differ = [k for k in range(1, len(sums)) if _checksum_rel(ref, sums[k][i]) > PARAM_RTOL]
                first = {"step": i + 1, "ranks": [0, *differ],
                         "checksums": {str(k): sums[k][i][:2] for k in [0, *differ]}, "rel_diff": rel}
    return {"params_equal": first is None if n else None, "param_steps_compared": n,
            "param_max_rel_diff": max_rel, "param_first_mismatch": first, "param_rtol": PARAM_RTOL}


def _checksum_rel(a, b) -> float:
    """The larger relative difference of the sum and the sum of squares; the sum's is taken
    relative to sqrt(count * sum of squares), the most it can be, so that a sum near 0 does not
    make rounding noise look large."""
    (sa, qa, ca), (sb, qb, cb) = a[:3], b[:3]
    if ca != cb:
        return math.inf
    if not all(map(math.isfinite, (sa, qa, sb, qb))):
        return 0.0 if (sa, qa) == (sb, qb) or all(map(math.isnan, (sa, sb))) else math.inf
    q = max(abs(qa), abs(qb))
    rq = abs(qa - qb) / q if q else 0.0
    s = math.sqrt(max(ca, 1) * q)
    rs = abs(sa - sb) / s if s else 0.0
    return max(rq, rs)


def summarize(ranks: list[RunResult], culprit, timed_out: bool) -> DistributedSummary:
    """The distributed part of the result (JSON: the run's "distributed")."""
    per_rank: list[RankSummary] = []
    for r, res in enumerate(ranks):
        info = res.get("rank") or {}
        losses = res.get("losses") or []
        status = res["status"]
        if status == "error" and _stopped_by_torchrun(res) and not timed_out and culprit and culprit[0] != r:
            status = "stopped"  # torchrun (or the loss of its peer) ended it after the culprit failed
        exc = res.get("exception")
        per_rank.append({
            "rank": r, "status": status, "steps": res.get("steps", 0), "losses_recorded": len(losses),
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
            "process_group": info.get("process_group"), "ddp_modules": info.get("ddp_modules", 0),
            "distributed_samplers": info.get("distributed_samplers", 0),
            "shuffling_samplers": info.get("shuffling_samplers", 0), "set_epoch_calls": info.get("set_epoch_calls", 0),
            "exception": exc if res["status"] not in OK else None,
            "last_param_checksum": ((info.get("param_checksums") or [None])[-1]),
        })
    out: DistributedSummary = {"nproc": len(ranks), "launcher": "python -m torch.distributed.run --standalone",
           "backend": next((p["process_group"]["backend"] for p in per_rank if p["process_group"]), None),
           "steps_per_rank": [p["steps"] for p in per_rank],
           "ranks_trained": sum(1 for p in per_rank if p["steps"] > 0),
           "failed_rank": culprit[0] if culprit else None,
           "ranks": per_rank}
    out.update(params_agree(ranks))
    out["notes"] = _notes(per_rank)
    return out


def _notes(per_rank: list[RankSummary]) -> list:
    notes = []
    if per_rank and not any(p["ddp_modules"] for p in per_rank):
        notes.append("no DistributedDataParallel was built: nothing averages the ranks' gradients")
    if per_rank and not any(p["distributed_samplers"] for p in per_rank):
        notes.append("no DistributedSampler: unless the script shards the data itself, every rank reads all of it")
    elif any(p["shuffling_samplers"] for p in per_rank) and not any(p["set_epoch_calls"] for p in per_rank):
        notes.append("a shuffling DistributedSampler whose set_epoch() is never called: every epoch draws "
                     "the same order")
    return notes


# -- judging -----------------------------------------------------------------------------------------


def reasons(res: RunResult) -> list:
    """What fails a distributed run beyond what every run is judged on: (cause, where) pairs."""
    d = res.get("distributed")
    if not d or res["status"] not in OK:
        return []
    out = []
    if not any(p["process_group"] for p in d["ranks"]):
        out.append(f"no rank called torch.distributed.init_process_group: the {d['nproc']} ranks trained "
                   f"{d['nproc']} independent copies")
    else:
        sizes = {p["process_group"]["world_size"] for p in d["ranks"] if p["process_group"]}
        if sizes != {d["nproc"]}:
            out.append(f"the process group has world size {', '.join(map(str, sorted(sizes, key=str)))}, "
                       f"not the {d['nproc']} ranks torchrun started")
    idle = [p["rank"] for p in d["ranks"] if p["steps"] == 0]
    if idle:
        out.append(f"rank{'s' if len(idle) > 1 else ''} {', '.join(map(str, idle))} took no optimizer step")
    elif len(set(d["steps_per_rank"])) > 1:
        out.append("the ranks took different numbers of optimizer steps: "
                   + ", ".join(f"rank {p['rank']} {p['steps']}" for p in d["ranks"]))
    m = d.get("param_first_mismatch")
    if m:
        sums = ", ".join(f"rank {k} {v[0]:.9g}" for k, v in m["checksums"].items())
        cause = (f"the ranks' parameters differ after step {m['step']}: ranks {', '.join(map(str, m['ranks']))} "
                 f"(parameter sums {sums})")
        if not any(p["ddp_modules"] for p in d["ranks"]):
            cause += "; the model is not wrapped in DistributedDataParallel, so each rank trains its own copy"
        out.append(cause)
    return out


def _means(xs: list):
    k = max(1, len(xs) // 5)
    return sum(xs[:k]) / k, sum(xs[-k:]) / k, k


def compare(ref: RunResult, other: RunResult, rtol=None) -> Comparison:
    """The distributed run's losses (the mean over its ranks of each step's loss) against the
    original's, by their trend, since a DistributedSampler draws its own order: the mean of the last
    fifth of each run's losses (each over its own steps: a migration that keeps the per-rank batch
    takes N times fewer) within `rtol` (TREND_RTOL) of the original's, relative to the larger of the
    original's last-fifth mean and how far its loss moved from its first fifth's mean (compare.trend's
    scale), and the loss moving the same way in both (or the original's staying within 1%). The
    first fifths are compared too but not judged: the first batches drawn make them noisy. Also the
    step-by-step largest relative difference over the steps both ran, near rounding when the global
    batch is kept and the sampler does not shuffle."""
    tol = TREND_RTOL if rtol is None else rtol
    a, b = [x for x in ref["losses"]], [x for x in other["losses"]]
    n = min(len(a), len(b))
    step = cmp.step_by_step(a[:n], b[:n], tol) if n else {"max_rel_diff": None, "first_divergence": None}
    out: Comparison = {
        "method": "distributed", "compared": n, "rtol": tol, "max_rel_diff": step["max_rel_diff"] if n else None,
        "step_first_divergence": step["first_divergence"], "first_divergence": None,
        "lengths": [len(a), len(b)], "note": None}
    if not a or not b:
        out.update({"ok": True, "head_rel_diff": None, "tail_rel_diff": None})
        return out
    if not all(map(math.isfinite, a + b)):
        ok = all(map(math.isfinite, a)) == all(map(math.isfinite, b)) and not all(map(math.isfinite, a))
        out.update({"ok": ok, "head_rel_diff": None, "tail_rel_diff": None,
                    "note": "non-finite losses: " + ("in both runs" if ok else "in one run only")})
        if not ok:
            out["first_divergence"] = {"step": n, "reference": None, "value": None, "rel_diff": math.inf}
        return out
    rh, rt, rk = _means(a)
    oh, ot, ok_ = _means(b)
    scale = max(abs(rt), abs(rh - rt), 1e-12)
    head, tail = abs(oh - rh) / scale, abs(ot - rt) / scale
    same_way = (rt < rh) == (ot < oh) or abs(rt - rh) <= 0.01 * abs(rh) + cmp.ATOL
    out.update({"reference_first": rh, "reference_last": rt, "first": oh, "last": ot, "k": [rk, ok_],
                "scale": scale, "head_rel_diff": head, "tail_rel_diff": tail, "same_direction": same_way,
                "ok": same_way and tail <= tol})
    if len(a) != len(b):
        out["note"] = (f"the ranks took {len(b)} steps each, the original {len(a)}: the global batch differs "
                       f"(per-rank batch times {other.get('distributed', {}).get('nproc', 'N')}?); compared by "
                       f"the trend over each run's own steps")
    if not out["ok"]:
        out["first_divergence"] = {"step": len(b), "which": "last" if tail > tol else "direction",
                                   "reference": rt, "value": ot, "rel_diff": tail,
                                   "reference_first": rh, "first": oh}
    return out


def divergence_cause(c: Comparison, reference: str) -> str:
    d = c["first_divergence"] or {}
    if d.get("reference") is None:
        return f"the losses differ from {reference}: {c.get('note')}"
    if d.get("which") == "direction":
        return (f"the loss (mean over the ranks) moves from {d['first']:.6g} to {d['value']:.6g} (means of the first "
                f"and last fifth of the steps), {reference}'s from {d['reference_first']:.6g} to {d['reference']:.6g}")
    return (f"the loss trend (mean over the ranks) differs from {reference}: the mean of the last fifth of the "
            f"steps is {d['value']:.6g} against {d['reference']:.6g} (difference {d['rel_diff']:.2g} of the "
            f"original's loss scale > {c['rtol']:g})")
