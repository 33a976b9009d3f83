"""The rewrite never breaks a script that ran (issue 29, item 1): modules without parameters, a
tensor made by a method that ``__init__`` calls before any layer exists, a helper given a module with
buffers only, a list of tensors. Each fixture under fixtures/runtime/never_break/ is rewritten as a
user would (its unsafe-fixes mark honoured); the rewrite prints on the CPU fallback exactly what the
original prints, and trains on the simulated GPU."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import FIXTURES
from ..test_fixtures import UNSAFE_MARK
from .test_corpus_scripts import _plain_batch

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

pytestmark = pytest.mark.runtime
NEVER_BREAK = FIXTURES / "runtime" / "never_break"
SCRIPTS = sorted(NEVER_BREAK.glob("*.py")) + sorted(NEVER_BREAK.glob("*/train.py"))


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory) -> dict[Path, Path]:
    """Each fixture's folder copied, the fixture rewritten in it as a user would (``cpu2gpu rewrite
    --in-place`` run in that folder, so that its sibling modules are read too)."""
    root = tmp_path_factory.mktemp("never_break")
    copies = {}
    for i, script in enumerate(SCRIPTS):
        folder = root / str(i)
        if script.parent == NEVER_BREAK:  # a script alone
            folder.mkdir()
            shutil.copy(script, folder / script.name)
        else:  # a script with the modules it imports
            shutil.copytree(script.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
        source = script.read_bytes()
        unsafe = ["--unsafe-fixes"] if UNSAFE_MARK in source else []
        subprocess.run([sys.executable, "-m", "cpu2gpu", "rewrite", "--in-place", *unsafe, script.name],
                       cwd=folder, check=True, capture_output=True)
        assert (folder / script.name).read_bytes() != source, f"{script.name}: the rewrite changed nothing"
        copies[script] = folder / script.name
    return copies


def test_the_rewrites_print_on_the_cpu_what_the_originals_print(rewritten):
    originals = list(rewritten)
    before = _plain_batch([str(p) for p in originals])
    after = _plain_batch([str(rewritten[p]) for p in originals])
    for script in originals:
        code, out, err = before[str(script)]
        assert code == 0, f"{script.name} does not run as it is:\n{err[-1500:]}"
        new_code, new_out, new_err = after[str(rewritten[script])]
        assert new_code == 0, f"{script.name}: the rewrite exits {new_code} on the CPU:\n{new_err[-1500:]}"
        assert new_out == out and "loss" in out, script.name


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(NEVER_BREAK).as_posix())
def test_the_rewrites_train_on_the_simulated_gpu(rewritten, script):
    migrated = rewritten[script]
    report = verify(str(migrated), against=str(script), device="sim", jobs=1, timeout=300,
                    cwd=str(migrated.parent), against_cwd=str(script.parent))
    assert report["verdict"] == "pass", report["reasons"]
