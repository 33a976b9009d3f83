"""On a real CUDA GPU: verify and migrate with --device cuda, as the simulated device runs them elsewhere.

The `gpu` marker skips these where CUDA is absent and always in CI (tests/conftest.py); on a GPU
machine: `pytest -m gpu tests/runtime/test_gpu.py`. benchmarks/gpu_check.py runs them with the rest of
its check of the simulator against the device.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.compare import RTOL  # noqa: E402
from cpu2gpu.runtime.judge.migrate import migrate  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import FIXTURES, HANG_GUARD_S  # noqa: E402

pytestmark = [pytest.mark.runtime, pytest.mark.slow, pytest.mark.gpu]

RUNTIME = FIXTURES / "runtime"
BUGS = FIXTURES / "bugs"


def _run(report: dict, mode: str) -> dict:
    return next(r for r in report["runs"] if r.get("mode") == mode or r["label"] == f"migrated ({mode})")


def test_a_migrated_fixture_passes_verify_on_cuda_within_the_gpu_tolerance():
    rep = verify(str(RUNTIME / "linreg_migrated.py"), against=str(RUNTIME / "linreg_original.py"), device="cuda",
                 cwd=str(RUNTIME), max_steps=20, timeout=HANG_GUARD_S)
    assert rep["verdict"] == "pass", (rep["reasons"], [r.get("exception") for r in rep["runs"]])
    run = _run(rep, "cuda")
    assert run["status"] in ("ok", "max_steps") and run["device_forward_calls"] > 0 and run["steps"] == 20
    [compared] = [c for c in rep["comparisons"] if c["run"] == run["label"]]
    assert compared["method"] == "step" and compared["max_rel_diff"] <= RTOL["cuda"], compared


@pytest.mark.parametrize("case, rule, words", [
    ("18_lstm_hidden_state_in_forward", "CG104", "Input and hidden tensors are not at the same device"),
    ("09_cpu_generator_randn_on_device", "CG113", "Expected a 'cuda' device type for generator but found 'cpu'"),
])
def test_a_bug_fixture_fails_on_cuda_with_the_error_the_simulator_gives_and_its_rule(case, rule, words):
    script = BUGS / case / "bug.py"
    rep = verify(str(script), device="cuda", cwd=str(script.parent), max_steps=8, timeout=HANG_GUARD_S)
    assert rep["verdict"] == "fail"
    run = _run(rep, "cuda")
    assert run["status"] == "error" and words in run["exception"]["message"], run.get("exception")
    assert rule in [r.get("rule") for r in rep["reasons"]], rep["reasons"]


def test_migrate_proves_a_fixture_on_cuda(tmp_path):
    """generator_batches: the static pass moves the model only; a round on the device finds the batches
    of the loop over a generator and moves them at its head."""
    folder = tmp_path / "generator_batches"
    shutil.copytree(FIXTURES / "migrate" / "generator_batches", folder)
    result = migrate(str(folder / "train.py"), cwd=str(folder), device="cuda", max_steps=5, timeout=HANG_GUARD_S)
    assert result["proven"], (result["ending"], result["rounds"])
    assert [(m["rule"], m["file"]) for m in result["static_misses"]] == [("CG102", "train.py")]
    device_run = _run(result["verify"], "cuda")
    assert device_run["device_forward_calls"] > 0
    assert Path(folder / "train.py").read_text() == (FIXTURES / "migrate" / "generator_batches" / "train.py").read_text()
