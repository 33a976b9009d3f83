from __future__ import annotations

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
