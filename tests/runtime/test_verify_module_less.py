"""verify on a script that trains plain tensors with no nn.Module (SGD([w, b])): it trains on the
device when the optimizer's tensors are there, and the blame for one left on the CPU is CG102."""

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import FIXTURES  # noqa: E402

pytestmark = [pytest.mark.runtime, pytest.mark.slow]
SCRIPTS = FIXTURES / "scripts"


def test_module_less_training_is_judged_by_the_optimizers_tensors():
    migrated = verify(str(SCRIPTS / "33_no_module_leaves.expected.py"), device="sim",
                      against=str(SCRIPTS / "33_no_module_leaves.py"), cwd=str(SCRIPTS), jobs=1, max_steps=6)
    assert migrated["verdict"] == "pass", migrated["reasons"]
    device_run = next(r for r in migrated["runs"] if r["mode"] == "sim")
    assert device_run["device_forward_calls"] == 0 and device_run["trained_devices"] == ["cuda:0"]

    original = verify(str(SCRIPTS / "33_no_module_leaves.py"), device="sim", cwd=str(SCRIPTS), jobs=1, max_steps=6)
    assert original["verdict"] == "fail"
    assert [r["rule"] for r in original["reasons"]] == ["CG102"]
