"""cpu2gpu verify --device sim-mps: a simulated Apple GPU that refuses float64 as MPS does."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.verify import VerifyError, accelerator_available, verify  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime


def test_float64_fails_on_sim_mps_and_the_fix_passes(fixtures_dir):
    scripts = ("float64_bug.py", "float64_fixed.py", "linreg_mps.py")

    def one(script):
        return verify(os.path.join(fixtures_dir, script), device="sim-mps", cwd=fixtures_dir,
                      max_steps=5, timeout=HANG_GUARD_S)

    with ThreadPoolExecutor(3) as pool:
        bug, fixed, linreg = pool.map(one, scripts)
    assert bug["verdict"] == "fail"
    cause = bug["reasons"][0]["cause"]
    assert "float64" in cause and "MPS" in cause, cause
    assert fixed["verdict"] == "pass", fixed["reasons"]
    assert linreg["verdict"] == "pass", linreg["reasons"]
    run = linreg["runs"][0]
    assert run["mode"] == "sim-mps" and run["device_forward_calls"] > 0
    assert "mps:0" in run.get("param_devices", ["mps:0"])


@pytest.mark.skipif(accelerator_available("mps"), reason="a real Apple GPU is here")
def test_real_mps_is_refused_where_there_is_none(fixtures_dir):
    with pytest.raises(VerifyError, match="no mps device here"):
        verify(os.path.join(fixtures_dir, "linreg_mps.py"), device="mps", cwd=fixtures_dir)


def test_a_cuda_only_device_line_is_blamed_not_the_model(fixtures_dir):
    """linreg_migrated.py moves its model to torch.device("cuda" if torch.cuda.is_available() else "cpu"):
    on an Apple GPU that is the CPU. The cause is the device line, not a model left unmoved (CG101)."""
    report = verify(os.path.join(fixtures_dir, "linreg_migrated.py"), device="sim-mps", cwd=fixtures_dir,
                    max_steps=5, timeout=HANG_GUARD_S)
    assert report["verdict"] == "fail"
    [reason] = report["reasons"]
    assert reason["rule"] is None
    assert "device line picks only CUDA" in reason["cause"]
    assert "--device-style accelerator" in reason["cause"]
