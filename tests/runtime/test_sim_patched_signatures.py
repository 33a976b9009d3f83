"""The simulator's stand-ins for torch functions take the arguments torch's own take (found by mypy, issue 28)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime

# A fresh process: the simulator cannot be uninstalled. Prints one JSON object.
_SCRIPT = r"""
import json
import torch
from cpu2gpu.runtime.device import sim

sim.install()
out = {}
torch.set_default_device(device="cuda")  # torch's parameter is named `device`
out["keyword"] = str(torch.ones(1).device)
torch.set_default_device(None)
out["reset"] = str(torch.ones(1).device)
torch.set_default_device("cuda:0")
out["positional"] = str(torch.ones(1).device)
torch.set_default_device(None)
out["properties"] = torch.cuda.get_device_properties(0).name == torch.cuda.get_device_name()
out["rng_state"] = torch.equal(torch.cuda.get_rng_state(), torch.cuda.get_rng_state_all()[0])
out["initialized"] = torch.cuda.is_initialized()
print(json.dumps(out))
"""


def test_set_default_device_takes_its_argument_by_keyword(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"keyword": "cuda:0", "reset": "cpu", "positional": "cuda:0", "properties": True,
                   "rng_state": True, "initialized": True}


_SCRIPTED = r"""
import torch
from cpu2gpu.runtime.device import sim

sim.install()
import torch.distributed.optim  # scripts its functional optimizers at import


@torch.jit.script
def zeros_like_rows(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros(x.size(0)) + x.sum(1)


print(zeros_like_rows(torch.ones(2, 3)).tolist())
"""


def test_torchscript_sees_the_simulators_factories_as_torchs_ops(tmp_path):
    """The factories the simulator wraps stay TorchScript builtins: torch.distributed.optim (an RPC
    training script imports it) and a scripted function that calls torch.zeros compile."""
    script = tmp_path / "scripted.py"  # TorchScript reads the function's source from its file
    script.write_text(_SCRIPTED)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[3.0, 3.0]"
