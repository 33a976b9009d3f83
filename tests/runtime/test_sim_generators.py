"""Generators on the simulated device: what is the simulator's own (fixtures/runtime/sim_semantics.py checks
what real CUDA answers alike). An explicit device generator draws what a CPU generator seeded alike draws,
leaves the CPU generator's stream alone and is not counted as mirrored; the default device generator's
draws stay mirrored; with the default device on the GPU a DataLoader shuffles with one; MPS has them too."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime

# A fresh process: the simulator cannot be uninstalled. Prints one JSON object.
_CUDA = r"""
import json
import torch
from torch.utils.data import DataLoader
from cpu2gpu.runtime.device import sim

sim.install()
out = {}
gen = torch.Generator(device="cuda").manual_seed(1)
on_device = torch.randn(4, 3, device="cuda", generator=gen)
out["as_a_cpu_generator_seeded_alike"] = torch.equal(
    on_device.cpu(), torch.randn(4, 3, generator=torch.Generator().manual_seed(1)))
torch.manual_seed(0)
torch.rand(2)
torch.randn(3, device="cuda", generator=gen)
torch.empty(3, device="cuda").normal_(generator=gen)
after = torch.rand(2)
torch.manual_seed(0)
torch.rand(2)
out["cpu_stream_untouched"] = torch.equal(after, torch.rand(2))
out["mirrored_before_default"] = sim.mirrored()
torch.manual_seed(3)
by_default = torch.randn(3, device="cuda", generator=torch.cuda.default_generators[0])
torch.manual_seed(3)
out["default_generator_mirrored"] = torch.equal(by_default.cpu(), torch.randn(3))
out["mirrored_after_default"] = sim.mirrored()
torch.set_default_device("cuda")
shuffled = [[b.tolist() for b in DataLoader(list(range(8)), batch_size=4, shuffle=True,
                                            generator=gen.manual_seed(5))] for _ in range(2)]
out["loader_shuffles_on_the_device"] = shuffled[0] == shuffled[1] and sorted(sum(shuffled[0], [])) == list(range(8))
print(json.dumps(out))
"""

_MPS = r"""
import json
import torch
from cpu2gpu.runtime.device import sim

sim.install("mps")
gen = torch.Generator(device="mps").manual_seed(2)
drawn = torch.rand(3, device="mps", generator=gen)
try:
    torch.rand(3, generator=gen)
    refused = None
except RuntimeError as e:
    refused = str(e)
print(json.dumps({"device": str(gen.device), "drawn_on": str(drawn.device), "refused": refused}))
"""


def _run(script, cwd):
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_device_generators_draw_their_own_stream_and_the_default_stays_mirrored(tmp_path):
    out = _run(_CUDA, tmp_path)
    assert out == {"as_a_cpu_generator_seeded_alike": True, "cpu_stream_untouched": True,
                   "mirrored_before_default": 0, "default_generator_mirrored": True, "mirrored_after_default": 1,
                   "loader_shuffles_on_the_device": True}


def test_sim_mps_has_device_generators(tmp_path):
    out = _run(_MPS, tmp_path)
    assert out == {"device": "mps", "drawn_on": "mps:0",
                   "refused": "Expected a 'cpu' device type for generator but found 'mps'"}
