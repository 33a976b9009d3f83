"""Scalar reads of values on the simulated device (item, int, float, bool, tolist, __index__, format, a
new tensor built from a list that holds them) give what the same reads give on the CPU and never
reach the simulated backend's own kernels: a greedy decoder that builds its sentence from the
decoded 0-dim tensors (torch.tensor(decoded)) stopped there as a simulator limit."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import HANG_GUARD_S, ROOT  # noqa: E402

pytestmark = pytest.mark.runtime


def _run_child(examples: int) -> dict:
    # One fresh process for all the examples: the simulator is installed once and cannot be undone.
    proc = subprocess.run([sys.executable, "-m", "tests.runtime.scalar_reads_child", str(examples)],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_every_read_ran(out: dict) -> None:
    covered = set(out["covered"])
    assert len(out["sources"]) >= 10 and len(out["reads"]) >= 10
    assert {f"source:{s}" for s in out["sources"]} <= covered
    assert {f"read:{r}:ok" for r in out["reads"]} <= covered  # each read gave a value somewhere, not only errors


def test_scalar_reads_on_the_device_equal_the_cpu():
    """Every source (RNN/GRU/LSTM outputs and states, fused cells, Linear, embedding, arange, randn) with
    every read through a greedy decoder's chains, then compositions drawn by hypothesis."""
    _assert_every_read_ran(_run_child(40))


@pytest.mark.slow
def test_scalar_reads_on_the_device_equal_the_cpu_many():
    _assert_every_read_ran(_run_child(1500))


@pytest.mark.slow
def test_greedy_decoder_passes_on_the_simulated_device(fixtures_dir):
    report = verify(os.path.join(fixtures_dir, "greedy_decoder_migrated.py"), device="sim", cwd=fixtures_dir,
                    against=os.path.join(fixtures_dir, "greedy_decoder.py"), timeout=HANG_GUARD_S)
    assert report["verdict"] == "pass", report["reasons"]
