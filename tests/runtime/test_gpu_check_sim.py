"""benchmarks/gpu_check.py --device sim on a few items: the check that a GPU machine runs, exercised here
with the simulated device in place of CUDA (its report's structure, sim-vs-sim agreement, the budget)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..conftest import HANG_GUARD_S, ROOT

pytest.importorskip("torch")

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
# One item of each part, the smallest: a bug that crashes, a mistake, a pair, a migration, a torchrun.
ONLY = ("*/18_lstm_hidden_state_in_forward/bug.py", "mistake_numpy", "verify:runtime/linreg_migrated.py",
        "migrate:migrate/generator_batches", "distributed:runtime/ddp/mlp_ddp.py", "gpu_tests")


def _check(tmp_path, *args):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "sim", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=str(tmp_path))
    return proc, json.loads(out.read_text())


def test_the_sim_mode_runs_one_item_of_each_part_and_agrees_with_itself(tmp_path):
    args = [a for pattern in ONLY for a in ("--only", pattern)]
    proc, rep = _check(tmp_path, "--jobs", "2", "--budget-s", str(HANG_GUARD_S), *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert rep["device"] == "sim" and rep["mode"].startswith("sim:") and "plumbing" in rep["mode"]
    assert rep["environment"]["torch"] and rep["environment"]["cuda_available"] is False
    assert list(rep["parts"]) == ["fidelity", "verify_migrate", "distributed", "gpu_tests"]
    assert rep["summary"] == {"items": 6, "ok": 6, "failed": 0, "errors": 0, "not_run": 0, "pending": 0}
    for part in rep["parts"].values():
        assert part["wall_s"] > 0 and part["failures"] == []
        assert all(i["status"] == "done" and i["wall_s"] > 0 for i in part["items"])

    fidelity = {i["script"]: i for i in rep["parts"]["fidelity"]["items"]}
    assert rep["parts"]["fidelity"]["disagreements"] == []
    lstm = fidelity["bugs/18_lstm_hidden_state_in_forward/bug.py"]
    assert lstm["agree"] and lstm["sim"]["outcome"] == lstm["device"]["outcome"] == "RNN hidden device"
    assert lstm["sim"]["verdict"] == "fail" and "CG104" in lstm["device"]["rules"]
    numpy = fidelity["runtime/mistake_numpy.py"]
    assert numpy["agree"] and numpy["device"]["outcome"] == "numpy of a device tensor"

    items = {i["name"]: i for i in rep["parts"]["verify_migrate"]["items"]}
    pair = items["verify:runtime/linreg_migrated.py"]
    assert pair["verdict"] == "pass" and pair["rc"] == 0
    [compared] = pair["comparisons"]
    assert compared["run"] == "migrated (sim)" and compared["within_gpu_rtol"] is True and compared["gpu_rtol"] == 2e-2
    migrated = items["migrate:migrate/generator_batches"]
    assert migrated["proven"] and migrated["rc"] == 0 and migrated["static_misses"][0].startswith("CG102 train.py")

    [ddp] = rep["parts"]["distributed"]["items"]
    assert ddp["verdict"] == "pass" and ddp["backend"] == "gloo" and ddp["steps_per_rank"] == [16]
    [tests] = rep["parts"]["gpu_tests"]["items"]
    assert "skipped" in tests["summary"]  # no CUDA here: the gpu tests skip themselves


def test_after_the_budget_the_items_are_recorded_as_not_run(tmp_path):
    proc, rep = _check(tmp_path, "--budget-s", "0", "--only", "bugs/18_", "--only", "linreg")
    assert proc.returncode == 1
    items = [i for part in rep["parts"].values() for i in part["items"]]
    assert len(items) >= 4 and all(i["status"] == "not run (budget)" for i in items)
    assert rep["summary"]["not_run"] == len(items)
