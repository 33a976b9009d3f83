"""The rewritten seeds run on the CPU fallback path and print what the originals print."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import FIXTURES, HANG_GUARD_S

pytest.importorskip("torch")

# The quick start's example in the default tier; the CNN (the longer runs) in the slow tier.
RUNNABLE = ["linear_regression", pytest.param("cnn_synthetic", marks=pytest.mark.slow)]


# The article's script sets no seed: seed torch the same way for both runs.
_SEEDED = "import runpy, sys, torch; torch.manual_seed(0); runpy.run_path(sys.argv[1], run_name='__main__')"


def _run(path, cwd):
    # CUDA hidden: this is the fallback every migrated script must survive.
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, "-c", _SEEDED, str(path)], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=HANG_GUARD_S)


@pytest.mark.parametrize("name", RUNNABLE)
def test_rewritten_seeds_print_the_same_losses(tmp_path, name):
    kinds = ("", ".expected")
    with ThreadPoolExecutor(max_workers=len(kinds)) as pool:
        original, migrated = pool.map(lambda kind: _run(FIXTURES / "seeds" / f"{name}{kind}.py", tmp_path), kinds)
    assert original.returncode == 0, original.stderr
    assert migrated.returncode == 0, migrated.stderr
    assert "oss" in original.stdout and original.stdout.count("\n") >= 8
    assert migrated.stdout == original.stdout
