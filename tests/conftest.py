from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# The one time limit of the tests that are not about time limits: it only stops a run that hangs,
# so that a hang fails the test instead of blocking the suite. It is far above what a busy
# machine takes (the slowest single run, the corpus's plain CPU runs, takes minutes at most), so
# no pass depends on it. Tests about timeouts (verify's hang fixture) set their own.
HANG_GUARD_S = 900


@pytest.fixture
def cli():
    """Run the click CLI in-process; returns (exit_code, stdout, stderr)."""
    from click.testing import CliRunner

    from cpu2gpu.cli import main

    def run(*args: str):
        try:
            runner = CliRunner(mix_stderr=False)  # click < 8.2
        except TypeError:
            runner = CliRunner()
        result = runner.invoke(main, list(args), catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    return run


@pytest.fixture
def python():
    return sys.executable


def once_per_run(tmp_path_factory, key: str, compute):
    """compute() once for the whole run, shared by the workers of `pytest -n`: a module fixture
    runs once per worker, and two workers may each get tests of the same module. The result must
    be JSON; the first worker computes it (the others wait on the lock) and leaves it in the run's
    temporary folder, which is new for every run."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return compute()
    shared = tmp_path_factory.getbasetemp().parent  # the run's folder, above each worker's own
    path = shared / f"{key}.json"
    with open(shared / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            path.write_text(json.dumps(compute()))
        return json.loads(path.read_text())


def pytest_collection_modifyitems(config, items):
    """Skip the `gpu` tests where there is no CUDA GPU, and always in CI. torch is imported only when
    such a test was collected: the static tests stay free of it."""
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked:
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        reason = "a gpu test: CI has no GPU"
    else:
        try:
            import torch
        except ImportError:
            reason = "a gpu test: torch is not installed"
        else:
            reason = "" if torch.cuda.is_available() else "a gpu test: no CUDA device here"
    if reason:
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=reason))
