"""Each DDP migration that `rewrite --distributed ddp` writes (fixtures/distributed/X.ddp.py, which the
static tests hold to the rewrite's output) trains under torchrun with 2 ranks on the CPU: every rank
steps, their parameters stay equal after every step, and the mean loss over the ranks follows the
one-process original's. The loader that does not shuffle (rnn) keeps the original's batches, so its
losses match step by step."""

from __future__ import annotations

import os

import pytest

from ..conftest import FIXTURES, HANG_GUARD_S

pytest.importorskip("torch")

from cpu2gpu.runtime.report.report import to_text  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

FOLDER = FIXTURES / "distributed"
MIGRATED = sorted(p.name[: -len(".ddp.py")] for p in FOLDER.glob("*.ddp.py"))


@pytest.mark.parametrize("name", MIGRATED)
def test_the_ddp_migration_passes_verify_nproc_2(name):
    report = verify(str(FOLDER / f"{name}.ddp.py"), against=str(FOLDER / f"{name}.py"), nproc=2,
                    cwd=str(FOLDER), timeout=HANG_GUARD_S)
    assert report["verdict"] == "pass", to_text(report)
    run = next(r for r in report["runs"] if r.get("distributed"))
    ranks = run["distributed"]
    assert ranks["ranks_trained"] == 2 and ranks["params_equal"] is True
    assert ranks["param_steps_compared"] == run["steps"] > 0
    assert all(rank["ddp_modules"] == 1 and rank["distributed_samplers"] == 1 for rank in ranks["ranks"])
    compared = next(c for c in report["comparisons"] if c.get("method") == "distributed")
    if name == "rnn":  # no shuffle, the global batch kept: the same batches as the original
        assert compared["max_rel_diff"] < 1e-5


def test_the_fixture_list():
    assert MIGRATED == ["cnn", "resume", "rnn", "trainer", "validation"]
    assert os.path.exists(FOLDER / "refused_stream.py")
