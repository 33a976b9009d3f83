"""A script whose own device choice is the CPU (an opt-in flag not given, a device that is the CPU
always) moved its model: the verdict names that choice and the flag, not CG101 ("never moved")."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime


def test_the_scripts_own_choice_of_the_cpu_is_named_with_its_flag(fixtures_dir):
    folder = os.path.join(fixtures_dir, "device_choice")

    def one(script, args):
        return verify(os.path.join(folder, script), args, device="sim", cwd=folder, timeout=HANG_GUARD_S)

    scripts = ["opt_in_flag.py", "opt_in_flag.py", "always_cpu.py", "never_moved_saved_on_cpu.py"]
    with ThreadPoolExecutor(2) as pool:
        no_flag, with_flag, always, saved = pool.map(one, scripts, [[], ["--cuda"], [], []])

    assert no_flag["verdict"] == "fail"
    [reason] = no_flag["reasons"]
    assert reason["rule"] is None, reason  # the model was moved: not CG101
    assert "moved its model to the CPU" in reason["cause"] and "opt_in_flag.py:18" in reason["cause"]
    assert "--cuda picks the accelerator and was not given (--cuda: train on the GPU)" in reason["cause"]
    assert "opt_in_flag.py --cuda" in reason["cause"]

    assert with_flag["verdict"] == "pass", with_flag["reasons"]

    assert always["verdict"] == "fail"
    [reason] = always["reasons"]
    assert reason["rule"] is None and "always_cpu.py:8" in reason["cause"] and "CG205" in reason["cause"], reason

    # a copy to the CPU after training (to save it) is no choice of device: the model was never moved
    assert saved["verdict"] == "fail"
    [reason] = saved["reasons"]
    assert reason["rule"] == "CG101", reason
