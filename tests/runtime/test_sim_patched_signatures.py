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
from cpu2gpu.runtime import sim

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
