"""cpu2gpu verify --nproc N: a DDP script under torchrun, one instrumented child per rank.

The slow tier starts torchrun with 2 ranks on the CPU (gloo), ~10-30 s a run here. The fast tier
checks the refusals (no torchrun starts) and the judging of rank results made up here.
"""

import json
import os
import signal

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge import distributed  # noqa: E402
from cpu2gpu.runtime.report.report import to_json, to_text  # noqa: E402
from cpu2gpu.runtime.judge.runner import RunSpec  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

pytestmark = pytest.mark.runtime

RUN_TIMEOUT_S = 300  # a hang guard only: these runs take seconds


@pytest.fixture
def ddp_dir(fixtures_dir):
    return os.path.join(fixtures_dir, "ddp")


def run_nproc(ddp_dir, script, against=None, **kw):
    kw.setdefault("timeout", RUN_TIMEOUT_S)
    return verify(os.path.join(ddp_dir, script), against=os.path.join(ddp_dir, against) if against else None,
                  nproc=2, cwd=ddp_dir, **kw)


def the_ddp_run(report):
    return next(r for r in report["runs"] if r.get("distributed"))


def comparison(report, label):
    return next(c for c in report["comparisons"] if c["run"] == label)


# -- slow: torchrun ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_correct_ddp_migration_passes_with_equal_parameters_and_the_original_losses(ddp_dir):
    rep = run_nproc(ddp_dir, "mlp_ddp.py", "mlp_original.py")
    assert rep["verdict"] == "pass", to_text(rep)
    run = the_ddp_run(rep)
    assert run["label"] == "migrated (cpu, 2 ranks)" and run["status"] == "ok" and run["steps"] == 16
    d = run["distributed"]
    assert d["nproc"] == 2 and d["backend"] == "gloo" and d["steps_per_rank"] == [16, 16]
    assert d["ranks_trained"] == 2 and d["failed_rank"] is None
    assert d["params_equal"] is True and d["param_steps_compared"] == 16 and d["param_max_rel_diff"] == 0.0
    assert all(p["ddp_modules"] == 1 and p["distributed_samplers"] == 1 for p in d["ranks"])
    assert d["ranks"][0]["last_param_checksum"] == d["ranks"][1]["last_param_checksum"]
    assert d["wall_seconds"] > 0
    # The global batch is kept and the sampler does not shuffle: the mean over the ranks is the
    # original's loss, step by step, to rounding.
    c = comparison(rep, run["label"])
    assert c["method"] == "distributed" and c["ok"] and c["compared"] == 16 and c["rtol"] == 0.25
    assert c["max_rel_diff"] < 1e-5 and c["tail_rel_diff"] < 1e-5
    text = to_text(rep)
    assert "--nproc 2" in text and "parameters: equal on every rank after each of 16 steps" in text
    assert "steps per rank: 16, 16 (every rank trained)" in text
    data = json.loads(to_json(rep))
    entry = next(r for r in data["runs"] if r["label"] == run["label"])
    assert entry["distributed"]["params_equal"] is True and data["settings"]["nproc"] == 2


@pytest.mark.slow
def test_a_model_not_wrapped_in_ddp_fails_at_the_first_step_its_ranks_differ(ddp_dir):
    rep = run_nproc(ddp_dir, "mlp_ddp_not_wrapped.py", "mlp_original.py")
    assert rep["verdict"] == "fail"
    d = the_ddp_run(rep)["distributed"]
    assert d["steps_per_rank"] == [16, 16] and d["params_equal"] is False
    assert d["param_first_mismatch"]["step"] == 1 and d["param_first_mismatch"]["ranks"] == [0, 1]
    causes = [r["cause"] for r in rep["reasons"]]
    assert any("the ranks' parameters differ after step 1: ranks 0, 1" in c
               and "not wrapped in DistributedDataParallel" in c for c in causes), causes
    assert "parameters: differ after step 1 between ranks 0, 1" in to_text(rep)


@pytest.mark.slow
def test_a_rank_that_crashes_is_named_and_located(ddp_dir):
    rep = run_nproc(ddp_dir, "mlp_ddp_rank_crash.py")
    assert rep["verdict"] == "fail", to_text(rep)
    run = the_ddp_run(rep)
    d = run["distributed"]
    assert run["status"] == "error" and d["failed_rank"] == 1
    (reason,) = rep["reasons"]
    assert reason["cause"].startswith("rank 1 raised RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert reason["where"] == {"file": "mlp_ddp_rank_crash.py", "line": 26}
    assert d["ranks"][1]["status"] == "error" and d["ranks"][0]["status"] == "stopped"
    assert d["steps_per_rank"] == [2, 2] and d["params_equal"] is True  # equal until the crash
    assert "rank 0: stopped at mlp_ddp_rank_crash.py:29 after rank 1 failed" in to_text(rep)


@pytest.mark.slow
def test_max_steps_caps_every_rank_at_the_same_step(ddp_dir):
    rep = run_nproc(ddp_dir, "mlp_ddp.py", "mlp_original.py", max_steps=5)
    assert rep["verdict"] == "pass", to_text(rep)
    run = the_ddp_run(rep)
    assert run["status"] == "max_steps" and run["distributed"]["steps_per_rank"] == [5, 5]
    assert run["distributed"]["param_steps_compared"] == 5 and run["distributed"]["params_equal"]
    c = comparison(rep, run["label"])
    assert c["compared"] == 5 and c["max_rel_diff"] < 1e-5


@pytest.mark.slow
def test_a_shuffling_sampler_is_held_to_the_trend_and_rtol_sets_its_tolerance(ddp_dir):
    rep = run_nproc(ddp_dir, "mlp_ddp.py", "mlp_original.py", args=["--shuffle"])
    assert rep["verdict"] == "pass", to_text(rep)
    c = comparison(rep, the_ddp_run(rep)["label"])
    # Another order: the losses differ step by step, the end of the training agrees.
    assert c["max_rel_diff"] > 0.05 and c["tail_rel_diff"] <= 0.25 and c["same_direction"]
    # Judged anew with a tolerance below the difference: the same runs fail.
    from cpu2gpu.runtime.judge.verify import judge, plan

    specs = plan("mlp_ddp.py", ["--shuffle"], "mlp_original.py", "cpu", False, 2)
    tight = judge(specs, rep["runs"], rtol=c["tail_rel_diff"] / 2)
    assert tight["verdict"] == "fail"
    assert "the loss trend (mean over the ranks) differs from original (cpu)" in tight["reasons"][0]["cause"]


@pytest.mark.slow
def test_a_hang_is_stopped_at_the_timeout_with_every_rank_located(ddp_dir):
    rep = run_nproc(ddp_dir, "mlp_ddp_hang.py", timeout=15, keep=True)
    run = the_ddp_run(rep)
    try:
        assert rep["verdict"] == "fail" and run["status"] == "timeout"
        cause = rep["reasons"][0]["cause"]
        assert "did not finish within 15 s" in cause
        assert "rank 0 at mlp_ddp_hang.py:28" in cause and "rank 1 at mlp_ddp_hang.py:25" in cause
        pids = distributed._rank_pids(os.path.join(run["workdir"], "result.json"))
        assert len(pids) == 2
        for pid in pids:  # the whole torchrun is gone: no rank left behind
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        import shutil

        shutil.rmtree(run["workdir"], ignore_errors=True)


# -- fast: refusals and judging ----------------------------------------------------------------------


def _invoke(args):
    from click.testing import CliRunner

    from cpu2gpu.runtime.cli import verify as verify_cmd

    result = CliRunner().invoke(verify_cmd, args)
    return result.exit_code, result.output


@pytest.mark.parametrize("extra, message", [
    (["--device", "sim"], "--nproc runs on the CPU (gloo) or on N CUDA GPUs, not on --device sim"),
    (["--device", "cuda"], "--nproc 2 --device cuda: each rank needs its own GPU, and there are 0 here"),
])
def test_nproc_refuses_devices_it_cannot_run_on(ddp_dir, monkeypatch, extra, message):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    code, out = _invoke([os.path.join(ddp_dir, "mlp_ddp.py"), "--nproc", "2", *extra])
    assert code == 2 and out.strip() == f"cpu2gpu verify: {message}"


def test_nproc_refuses_a_notebook(fixtures_dir):
    nb = os.path.join(fixtures_dir, "notebooks", "mlp_migrated.ipynb")
    code, out = _invoke([nb, "--nproc", "2"])
    assert code == 2 and out.strip() == f"cpu2gpu verify: --nproc runs a script under torchrun, not a notebook: {nb}"


def test_nproc_below_two_is_a_usage_error(ddp_dir):
    code, out = _invoke([os.path.join(ddp_dir, "mlp_ddp.py"), "--nproc", "1"])
    assert code == 2 and "--nproc" in out


@pytest.mark.parametrize("missing, message", [
    ("is_available", "--nproc: this torch has no torch.distributed"),
    ("is_gloo_available", "--nproc: this torch has no gloo backend, which the ranks need on the CPU"),
])
def test_nproc_without_torch_distributed_or_gloo_is_one_line(ddp_dir, monkeypatch, missing, message):
    import torch.distributed as dist

    monkeypatch.setattr(dist, missing, lambda: False)
    code, out = _invoke([os.path.join(ddp_dir, "mlp_ddp.py"), "--nproc", "2"])
    assert code == 2 and out.startswith(f"cpu2gpu verify: {message}") and len(out.strip().splitlines()) == 1


def _rank(r, losses, checksums, *, status="ok", exc=None, finished_at=1, ddp=1):
    return {"mode": "cpu", "status": status, "exit_code": 0, "losses": losses, "steps": len(checksums),
            "backward_calls": len(losses), "step_times": [], "device_forward_calls": 0, "cpu_forward_calls": 3,
            "trained_devices": ["cpu"], "modules": [], "events": [], "exception": exc, "diagnosis": None,
            "device_rng": False, "finished_at": finished_at,
            "rank": {"rank": r, "process_group": {"backend": "gloo", "world_size": 2, "rank": r},
                     "ddp_modules": ddp, "distributed_samplers": 1, "shuffling_samplers": 0, "set_epoch_calls": 1,
                     "param_checksums": checksums}}


SPEC = RunSpec("migrated (cpu, 2 ranks)", "migrated", "train.py", "cpu", [], 2)


def test_merge_averages_the_losses_and_finds_the_first_step_the_parameters_differ():
    a = [[1.0, 2.0, 10], [1.5, 2.5, 10], [2.0, 3.0, 10]]
    b = [[1.0, 2.0, 10], [1.5, 2.5, 10], [2.5, 3.1, 10]]
    res = distributed.merge(SPEC, [_rank(0, [4.0, 2.0, 1.0], a, ddp=0), _rank(1, [2.0, 2.0, 3.0], b, ddp=0)])
    assert res["status"] == "ok" and res["losses"] == [3.0, 2.0, 2.0] and res["steps"] == 3
    d = res["distributed"]
    assert d["params_equal"] is False and d["param_steps_compared"] == 3
    assert d["param_first_mismatch"]["step"] == 3 and d["param_first_mismatch"]["ranks"] == [0, 1]
    (cause,) = distributed.reasons(res)
    assert cause.startswith("the ranks' parameters differ after step 3: ranks 0, 1")
    assert "not wrapped in DistributedDataParallel" in cause
    # Equal checksums, in rounding too: no reason.
    same = distributed.merge(SPEC, [_rank(0, [1.0], a[:1]), _rank(1, [1.0], a[:1])])
    assert same["distributed"]["params_equal"] is True and distributed.reasons(same) == []


def test_the_rank_that_failed_first_is_blamed_not_the_ones_torchrun_stopped():
    boom = {"type": "ValueError", "message": "bad batch", "file": "train.py", "line": 9, "source": "", "traceback": ""}
    gone = {"type": "RuntimeError", "message": "[pair.cc:553] Connection closed by peer [127.0.0.1]:1",
            "file": "train.py", "line": 12, "source": "", "traceback": ""}
    ranks = [_rank(0, [1.0], [[1, 1, 1]], status="error", exc=gone, finished_at=5),
             _rank(1, [1.0], [[1, 1, 1]], status="error", exc=boom, finished_at=9)]
    res = distributed.merge(SPEC, ranks)
    assert res["status"] == "error" and res["distributed"]["failed_rank"] == 1
    assert res["diagnosis"]["cause"] == "rank 1 raised ValueError: bad batch at train.py:9"
    assert [p["status"] for p in res["distributed"]["ranks"]] == ["stopped", "error"]


def test_the_trend_rule_judges_the_last_fifth_against_the_loss_scale():
    ref = {"losses": [5.0, 4.0, 3.0, 2.0, 1.0, 0.8, 0.6, 0.5, 0.45, 0.4]}
    near = {"losses": [6.0, 3.0, 3.5, 2.5, 1.2, 0.9, 0.5, 0.6, 0.5, 0.5], "distributed": {"nproc": 2}}
    c = distributed.compare(ref, near)
    # last fifths 0.425 vs 0.5, scale = how far the original fell (4.5 - 0.425): within 0.25
    assert c["ok"] and c["rtol"] == 0.25 and abs(c["tail_rel_diff"] - 0.075 / 4.075) < 1e-9
    flat = {"losses": [5.0] * 10, "distributed": {"nproc": 2}}
    assert not distributed.compare(ref, flat)["ok"]
    assert not distributed.compare(ref, near, rtol=0.01)["ok"]
    # Fewer steps (the per-rank batch kept): each run's own fifths, and a note.
    short = distributed.compare(ref, {"losses": [4.5, 1.5, 0.7, 0.5, 0.42], "distributed": {"nproc": 2}})
    assert short["ok"] and short["lengths"] == [10, 5] and "the ranks took 5 steps each" in short["note"]


def test_the_timeout_stops_ranks_torchrun_started_in_their_own_sessions(tmp_path, monkeypatch):
    """_stop signals the ranks by the pids they wrote, not through torchrun's process group."""
    import subprocess
    import sys
    import time

    monkeypatch.setattr(distributed, "STOP_GRACE_S", 0.5)
    result = str(tmp_path / "result.json")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    (tmp_path / "result.json.rank0.pid").write_text(str(child.pid))
    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    t0 = time.monotonic()
    distributed._stop(launcher, result)
    assert child.wait(timeout=10) == -signal.SIGTERM and launcher.poll() is not None
    assert time.monotonic() - t0 < distributed.STOP_GRACE_S + 5
