from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


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
