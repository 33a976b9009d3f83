"""verify on correct scripts: no false alarm, no false blame, and the simulated
device raises where CUDA raises (each script runs through the real verify)."""

import os
import textwrap

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.compare import step_by_step  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402
from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime
TIMEOUT = 180

HEADER = """\
import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
"""


def run_verify(tmp_path, body, name="train.py", against_body=None, **kw):
    script = tmp_path / name
    script.write_text(HEADER + textwrap.dedent(body))
    if against_body is not None:
        original = tmp_path / "original.py"
        original.write_text(HEADER + textwrap.dedent(against_body))
        kw["against"] = str(original)
    kw.setdefault("jobs", 1)
    kw.setdefault("timeout", TIMEOUT)
    return verify(str(script), cwd=str(tmp_path), **kw)


def run_of(report, label):
    return next(r for r in report["runs"] if r["label"] == label)


def explain(report):
    return report["reasons"], [(r["label"], r.get("exception")) for r in report["runs"]]


# -- 1. load_state_dict while a graph holds the weights ---------------------------

BEST_CHECKPOINT = """\
import copy

model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 1, 8, 8, device=device)
y = torch.randn(8, 1, device=device)
best, best_loss = None, float("inf")
for epoch in range(4):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    val_loss = nn.functional.mse_loss(model(x), y)  # autograd on: its graph holds the conv weight
    if val_loss.item() < best_loss:
        best_loss = val_loss.item()
        best = copy.deepcopy(model.state_dict())
model.load_state_dict(best)  # copied into the parameters in place
try:
    val_loss.backward()
except RuntimeError as e:
    assert "modified by an inplace operation" in str(e), e
else:
    raise AssertionError("a backward through weights loaded over passed")
"""


@pytest.mark.slow
def test_loading_the_best_checkpoint_while_a_graph_holds_the_weights(tmp_path):
    report = run_verify(tmp_path, BEST_CHECKPOINT, device="auto")
    assert report["verdict"] == "pass", explain(report)


STAYING_MOVES = """\
model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 1, 8, 8, device=device)
y = torch.randn(8, 1, device=device)
for step in range(3):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    model.to(device)  # again, between forward and backward: nothing moves
    loss.backward()
    opt.step()
head = model[2]
head.bias.data = torch.zeros(1, device=device)
assert float(head.bias.abs().sum()) == 0, "the .data assignment was lost"
"""


@pytest.mark.slow
def test_a_move_that_stays_on_the_device_and_a_data_assignment(tmp_path):
    report = run_verify(tmp_path, STAYING_MOVES, device="sim")
    assert report["verdict"] == "pass", explain(report)


# -- 2. format() of a 0-dim device tensor -----------------------------------------

FORMATTING = """\
model = nn.Linear(3, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 3, device=device), torch.randn(16, 1, device=device)
for step in range(2):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    value = loss.item()
    assert "{:.3f}".format(loss) == "{:.3f}".format(value)
    assert f"{loss:.2e}" == f"{value:.2e}" and f"{loss:>10.4f}" == f"{value:>10.4f}"
    assert f"{loss}" == str(value)  # no spec: the number too, as for torch.Tensor
    assert "%.3f" % loss == "%.3f" % value
    assert f"{loss.detach().long():d}" == str(int(value))
# What torch refuses on the CPU and on CUDA alike.
for refused in (lambda: f"{x:.2f}", lambda: f"{model.bias.sum(0, keepdim=True):.2f}", lambda: round(loss, 3)):
    try:
        refused()
    except TypeError:
        pass
    else:
        raise AssertionError("formatted what torch refuses")
"""


@pytest.mark.slow
def test_formatting_a_0dim_device_tensor_gives_its_number(tmp_path):
    report = run_verify(tmp_path, FORMATTING, device="sim")
    assert report["verdict"] == "pass", explain(report)


# -- 3. pickle.load is not torch.load -------------------------------------------------

PICKLED = """\
import pickle

model = nn.Linear(3, 1).to(device)
with open("weights.pkl", "wb") as f:
    pickle.dump(model.state_dict(), f)
with open("weights.pkl", "rb") as f:
    state = pickle.load(f)
model.load_state_dict(state)
model(torch.randn(2, 3, device=device)).sum().backward()
"""

TORCH_LOADED = """\
model = nn.Linear(3, 1).to(device)
torch.save(model.state_dict(), "weights.pt")
state = torch.load("weights.pt")
model.load_state_dict(state)
model(torch.randn(2, 3, device=device)).sum().backward()
"""


@pytest.mark.slow
def test_unpickled_gpu_tensors_are_not_blamed_on_torch_load(tmp_path):
    pickled = run_verify(tmp_path, PICKLED, name="pickled.py", device="sim")
    loaded = run_verify(tmp_path, TORCH_LOADED, name="loaded.py", device="sim")

    reason = pickled["reasons"][0]
    assert reason["rule"] != "CG202" and "torch.load without map_location" not in reason["cause"], reason
    assert "unpickling" in reason["cause"] and reason["where"]["line"] == HEADER.count("\n") + 7, reason
    # torch.load itself is still named, with its rule.
    reason = loaded["reasons"][0]
    assert reason["rule"] == "CG202" and "torch.load without map_location" in reason["cause"], reason


# -- 4. losses near zero: rounding noise is not a divergence ------------------------

LSTM_TO_NEAR_ZERO = """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 8, batch_first=True)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


x = torch.randn(16, 5, 3)
y = x.sum(dim=(1, 2)).unsqueeze(1)
x, y = x.to(device), y.to(device)
model = Net().to(device)
opt = torch.optim.Adam(model.parameters(), lr=0.1)
for step in range(40):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_rounding_noise_of_small_losses_passes(tmp_path):
    # The simulated fused LSTM cells sum in another order than the CPU's
    # LSTM: the last digits part, as on a GPU, once the loss is 1/500 of the first.
    report = run_verify(tmp_path, LSTM_TO_NEAR_ZERO, device="auto")
    assert report["verdict"] == "pass", explain(report)
    sim, cpu = run_of(report, "migrated (sim)")["losses"], run_of(report, "migrated (cpu)")["losses"]
    assert sim != cpu and cpu[-1] < cpu[0] / 100


REGRESSION = """\
x = torch.randn(32, 4)
y = x @ torch.randn(4, 1)
x, y = x.to(device), y.to(device)
model = nn.Linear(4, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr={lr})
for step in range(10):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
"""


@pytest.mark.slow
def test_a_real_divergence_still_fails(tmp_path):
    report = run_verify(tmp_path, REGRESSION.format(lr=0.1005), against_body=REGRESSION.format(lr=0.1),
                        device="sim")
    assert report["verdict"] == "fail", explain(report)
    assert "the losses part from original (cpu) at step 2" in report["reasons"][0]["cause"]


def test_tolerance_is_absolute_near_zero_and_relative_elsewhere():
    ref = [1.0, 0.1, 1e-2, 1e-4, 1e-6]
    noisy = [1.0, 0.1 * (1 + 2e-6), 1e-2, 1e-4 * (1 + 1e-3), 1e-6 * 1.5]
    assert step_by_step(ref, noisy, rtol=1e-5)["ok"]
    parted = list(ref)
    parted[1] = 0.1 * (1 + 1e-4)
    res = step_by_step(ref, parted, rtol=1e-5)
    assert not res["ok"] and res["first_divergence"]["step"] == 2
    assert not step_by_step(ref, [1.0, 0.1, 1e-2, 2e-4, 1e-6], rtol=1e-5)["ok"]
    assert step_by_step(ref, list(ref), rtol=0)["ok"]


# -- 5. the legacy torch.cuda.FloatTensor types ---------------------------------------

LEGACY_TYPES = """\
import numpy as np

cuda = torch.cuda.is_available()
Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
LongTensor = torch.cuda.LongTensor if cuda else torch.LongTensor
np.random.seed(0)
model = nn.Linear(4, 1)
if cuda:
    model.cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(16, 4)
for step in range(3):
    x = data.type(Tensor)
    valid = Tensor(16, 1).fill_(1.0)
    z = Tensor(np.random.normal(0, 1, (16, 4)))
    idx = LongTensor([0, 1])
    assert isinstance(x, Tensor) and isinstance(z, Tensor) and not isinstance(idx, Tensor)
    assert x.is_cuda == cuda and valid.is_cuda == cuda and x[idx].shape == (2, 4)
    opt.zero_grad()
    loss = ((model(x + 0 * z) - valid) ** 2).mean()
    loss.backward()
    opt.step()
assert x.type(torch.FloatTensor).device.type == "cpu"  # a CPU type is a CPU tensor
"""


@pytest.mark.slow
def test_legacy_cuda_tensor_types_picked_by_availability(tmp_path):
    report = run_verify(tmp_path, LEGACY_TYPES, device="sim")
    assert report["verdict"] == "pass", explain(report)
    assert not any(r["rule"] == "CG201" for r in report["reasons"])


def test_a_cuda_api_missing_on_a_gpu_run_is_not_blamed_on_the_script(monkeypatch):
    import torch

    from cpu2gpu.runtime.causes import diagnose

    class Recorder:
        def is_user_file(self, filename):
            return filename == __file__

    try:
        raise RuntimeError("Torch not compiled with CUDA enabled")
    except RuntimeError as e:
        exc = e
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the simulated device
    found = diagnose.explain(exc, exc.__traceback__, Recorder(), os.path.basename)
    assert found["rule"] is None and "simulated device does not provide" in found["cause"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the CPU fallback
    assert diagnose.explain(exc, exc.__traceback__, Recorder(), os.path.basename)["rule"] == "CG201"


# -- 6. in-place changes to what a backward still needs ---------------------------------

OPTIMIZER_BETWEEN_BACKWARDS = """\
G = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4)).to(device)
D = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(device)
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
fake = G(torch.randn(16, 4, device=device))
d_loss = D(fake).mean()
g_loss = -D(fake).mean()
opt_d.zero_grad()
d_loss.backward(retain_graph=True)
opt_d.step()  # changes D's weights in place, which g_loss's graph saved
opt_g.zero_grad()
g_loss.backward()
opt_g.step()
"""


@pytest.mark.slow
def test_a_step_between_forward_and_backward_raises_on_the_device_as_on_the_cpu(tmp_path):
    report = run_verify(tmp_path, OPTIMIZER_BETWEEN_BACKWARDS, device="auto")
    for label in ("migrated (sim)", "migrated (cpu)"):
        run = run_of(report, label)
        assert run["status"] == "error", (label, run["status"])
        assert "modified by an inplace operation" in run["exception"]["message"], run["exception"]
        assert run["exception"]["line"] == HEADER.count("\n") + 12


def test_an_op_the_simulator_cannot_run_is_its_limit_not_a_failed_migration(fixtures_dir):
    from cpu2gpu.runtime.report.report import to_text
    from cpu2gpu.runtime.judge.verify import verify as run_verify

    report = run_verify(os.path.join(fixtures_dir, "sim_limit.py"), device="sim", cwd=fixtures_dir,
                        timeout=900)
    assert report["verdict"] == "error"
    [reason] = report["reasons"]
    assert reason["sim_limit"] and reason["rule"] is None
    assert "aten::_local_scalar_dense" in reason["cause"] and "not a fault of the migration" in reason["cause"]
    assert "the simulated device cannot run this script" in to_text(report)


@pytest.mark.slow  # a verify child of each side
def test_a_script_that_shuffles_only_on_the_device_verifies_against_itself(fixtures_dir):
    script = os.path.join(fixtures_dir, "shuffles_on_the_device.py")
    report = verify(script, against=script, device="sim", cwd=fixtures_dir, timeout=HANG_GUARD_S)
    assert report["verdict"] == "pass", report["reasons"]
    [c] = [c for c in report["comparisons"] if c["run"] == "migrated (sim)"]
    assert c["method"] == "trend" and c["batching"]["line"] == 14, c
