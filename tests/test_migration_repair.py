"""cpu2gpu.migration: where a value a run located is bound, and the edit written there (static, no torch)."""

from __future__ import annotations

import pytest

from cpu2gpu.migration import Evidence, repair, rule_fix

SCRIPT = b'''import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)
        self.mask = torch.ones(2)

    def forward(self, x):
        h = torch.zeros(x.shape[0], 2)
        return self.fc(x) * self.mask + h


def train(model, loader, device):
    for i, (x, y) in enumerate(loader):
        out = model(x)


model = Net()
a, b = torch.randn(3), torch.randn(3)
noise = torch.randn(4, 2)
print(model(noise).numpy())
'''


@pytest.mark.parametrize("evidence, line, expected", [
    (Evidence("CG103", "batch", "x", 17, "train", 15, ("x", "y")), 16,
     b"    for i, (x, y) in enumerate(loader):\n        x, y = x.to(device), y.to(device)\n"),
    (Evidence("CG105", "attribute", "self.mask", 12, "forward", 10), 8,
     b'        self.register_buffer("mask", torch.ones(2), persistent=False)\n'),
    (Evidence("CG104", "tensor", "h", 12, "forward", 10, device_from="x"), 11,
     b"        h = torch.zeros(x.shape[0], 2, device=x.device)\n"),
    (Evidence("CG101", "module", "model", 23, "<module>", 0), 20, b"model = Net().to(device)\n"),
    (Evidence("CG102", "tensor", "a", 23, "<module>", 0), 21,
     b"a, b = torch.randn(3), torch.randn(3)\na = a.to(device)\n"),
    (Evidence("CG102", "tensor", "noise", 23, "<module>", 0), 22, b"noise = torch.randn(4, 2).to(device)\n"),
    (Evidence("CG107", "numpy", "", 23, "<module>", 0), 23, b"print(model(noise).cpu().numpy())\n"),
])
def test_the_edit_goes_to_the_binding(evidence, line, expected):
    fixed = repair(SCRIPT, evidence)
    assert fixed is not None
    assert fixed.line == line
    assert expected in fixed.data
    compile(fixed.data, "fixed.py", "exec")


def test_a_file_without_a_device_gets_the_rewrites_device_line():
    fixed = repair(SCRIPT, Evidence("CG101", "module", "model", 23, "<module>", 0))
    assert fixed is not None
    assert b'import torch\n\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n' in fixed.data


def test_a_function_given_a_device_uses_it():
    fixed = repair(SCRIPT, Evidence("CG103", "batch", "x", 17, "train", 15, ("x",)))
    assert fixed is not None and b"x = x.to(device)" in fixed.data
    assert b"torch.device(" not in fixed.data  # train() has its own device parameter


def test_the_files_device_variable_is_reused():
    data = SCRIPT.replace(b"import torch\n", b"import torch\ndev0 = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n", 1)
    fixed = repair(data, Evidence("CG101", "module", "model", 24, "<module>", 0))
    assert fixed is not None and b"model = Net().to(dev0)\n" in fixed.data


def test_a_parameter_is_left_to_the_caller():
    assert repair(SCRIPT, Evidence("CG102", "tensor", "loader", 17, "train", 15)) is None


def test_an_unknown_name_changes_nothing():
    assert repair(SCRIPT, Evidence("CG102", "tensor", "nowhere", 23, "<module>", 0)) is None
    assert repair(b"def broken(:\n", Evidence("CG102", "tensor", "x", 1)) is None


# -- what a run locates that no name binds ------------------------------------------------------

PLOTS = b'''import numpy as np
import matplotlib.pyplot as plt
import torch


def show(x, pred, errors):
    plt.plot(x, pred)
    plt.hist(errors.data.numpy())
    print(np.asarray(pred[:3]), np.ptp(pred - 1))
'''


@pytest.mark.parametrize("line, expressions, grad, expected", [
    (7, ("pred",), (), b"    plt.plot(x, pred.cpu())\n"),
    (7, ("pred",), ("pred",), b"    plt.plot(x, pred.detach().cpu())\n"),
    (8, ("errors", "errors.data"), (), b"    plt.hist(errors.data.cpu().numpy())\n"),
    (9, ("pred",), (), b"    print(np.asarray(pred[:3].cpu()), np.ptp((pred - 1).cpu()))\n"),
])
def test_a_device_tensor_given_to_numpy_or_matplotlib_is_copied_to_the_host(line, expressions, grad, expected):
    fixed = repair(PLOTS, Evidence("CG107", "numpy", "", line, "show", 6, expressions=expressions, grad=grad))
    assert fixed is not None and fixed.how == "host"
    assert expected in fixed.data
    assert fixed.data.count(b".cpu()") == expected.count(b".cpu()")  # x, a CPU array there, is left alone


USES = b'''import torch

from regions import RegionSales

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
sales = RegionSales()
net = torch.nn.Linear(5, 1).to(device)
loss = torch.nn.functional.mse_loss(net(sales.features, sales.groups), sales.targets)
held = {"x": sales.features, "y": sales.targets}
print(net(held["x"]).sub(held['y']).abs().mean(), len(held["x"]))
'''


def test_an_objects_tensor_attributes_are_moved_where_they_meet_the_device():
    fixed = repair(USES, Evidence("CG102", "use", "sales.features", 8,
                                  expressions=("sales.features", "sales.groups", "sales.targets")))
    assert fixed is not None
    assert (b"loss = torch.nn.functional.mse_loss(net(sales.features.to(device), sales.groups.to(device)), "
            b"sales.targets.to(device))\n") in fixed.data
    assert fixed.data.count(b"device = torch.device(") == 1  # the file's device is reused


def test_a_containers_items_are_moved_where_they_are_arguments():
    fixed = repair(USES, Evidence("CG102", "use", 'held["x"]', 10, expressions=('held["x"]', 'held["y"]')))
    assert fixed is not None
    # what Python's own len() and print() read needs no device
    assert b"""print(net(held["x"].to(device)).sub(held['y'].to(device)).abs().mean(), len(held["x"]))""" \
        in fixed.data


FORWARD = b'''import numpy as np
import torch


class Attention(torch.nn.Module):
    def attend(self, q, k):
        n = q.shape[1]
        scores = (q @ k.transpose(1, 2)).masked_fill(torch.from_numpy(np.triu(np.ones((n, n), dtype=bool), 1)), -1e9)
        return scores * torch.tensor(np.linspace(1.0, 2.0, n), dtype=torch.float32)
'''


@pytest.mark.parametrize("line, expected", [
    (8, b"masked_fill(torch.from_numpy(np.triu(np.ones((n, n), dtype=bool), 1)).to(k.device), -1e9)\n"),
    (9, b"return scores * torch.tensor(np.linspace(1.0, 2.0, n), dtype=torch.float32, device=k.device)\n"),
])
def test_a_tensor_made_from_numpy_in_a_method_is_made_on_the_inputs_device(line, expected):
    fixed = repair(FORWARD, Evidence("CG104", "conversion", "", line, "attend", 6, device_from="k"))
    assert fixed is not None
    assert expected in fixed.data
    assert b"torch.device(" not in fixed.data  # the input's device, not a new device line


LEAVES = b'''import torch

x, y = torch.randn(20, 3), torch.randn(20, 1)
params = {"w": torch.randn(3, 1, requires_grad=True), "b": torch.zeros(1, requires_grad=True)}
scale = torch.ones(1).requires_grad_()
opt = torch.optim.SGD(list(params.values()) + [scale], lr=0.1)
bias, gain = torch.zeros(1, requires_grad=True), torch.ones(1, requires_grad=True)
'''


def test_the_leaves_an_optimizer_trains_are_made_on_the_device():
    fixed = repair(LEAVES, Evidence("CG102", "trained", "", 0))
    assert fixed is not None
    assert (b'params = {"w": torch.randn(3, 1, requires_grad=True, device=device), '
            b'"b": torch.zeros(1, requires_grad=True, device=device)}\n') in fixed.data
    assert b"x, y = torch.randn(20, 3), torch.randn(20, 1)\n" in fixed.data  # not trained: left to the run
    assert b".to(" not in fixed.data


def test_a_located_leaf_gets_device_on_its_factory_never_a_copy():
    data = LEAVES.replace(b"opt = torch.optim.SGD(list(params.values()) + [scale], lr=0.1)\n",
                          b"w = torch.randn(3, 1, requires_grad=True)\nout = x @ w\n")
    fixed = repair(data, Evidence("CG102", "tensor", "w", 8, leaf=True))
    assert fixed is not None and b"w = torch.randn(3, 1, requires_grad=True, device=device)\n" in fixed.data
    # bound by unpacking a call: no factory to give a device, and a .to() copy would not be trained
    assert repair(data, Evidence("CG102", "tensor", "bias", 8, leaf=True)) is None
    assert repair(data + b"u, v = make()\n", Evidence("CG102", "tensor", "u", 10, leaf=True)) is None


def test_an_unpacking_moves_every_cpu_tensor_it_binds():
    fixed = repair(LEAVES, Evidence("CG102", "tensor", "x", 6, batches=("x", "y", "scale")))
    assert fixed is not None
    assert b"x, y = torch.randn(20, 3), torch.randn(20, 1)\nx, y = x.to(device), y.to(device)\n" in fixed.data


STALE = b'''import torch


class Standardized(torch.nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        center = torch.tensor(mean)
        scale = torch.tensor(std)
        self.register_buffer("center", center)
        self.register_buffer("scale", scale)
        self.stats = [center, scale]

    def forward(self, x):
        return (x - self.stats[0]) / self.stats[1]
'''


def test_a_list_of_the_buffers_locals_gets_cg114s_fix():
    fixed = rule_fix(STALE, "model.py", "CG114", 14)
    assert fixed is not None
    assert b"        return (x - self.center) / self.scale\n" in fixed.data
    assert b"        self.stats = [self.center, self.scale]\n" in fixed.data
    # a list of other locals is no alias of the buffers: nothing to do
    assert rule_fix(STALE.replace(b"[center, scale]", b"[mean, std]"), "model.py", "CG114", 14) is None


@pytest.mark.parametrize("source, shown", [
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--cuda', action='store_true')\nargs = p.parse_args()\n"
     "dev = 'cuda' if args.cuda else 'cpu'\n", "--cuda"),
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('-g', '--use-gpu', action='store_true', default=False)\n"
     "opt = p.parse_args()\nprint(opt.use_gpu)\n", "--use-gpu"),
    ("import os\nUSE_CUDA = os.environ.get('USE_CUDA') == '1'\n", "USE_CUDA=1"),
])
def test_a_scripts_opt_in_gpu_flag_is_found(source, shown):
    from cpu2gpu.migration.deviceflags import opt_in_flag

    flag = opt_in_flag(source.encode())
    assert flag is not None and flag.shown() == shown


@pytest.mark.parametrize("source", [
    # the opposite flag, a flag on by default, a flag the code never reads, a flag about something else
    "import argparse\np = argparse.ArgumentParser()\np.add_argument('--no-cuda', action='store_true')\nargs = p.parse_args()\n"
    "print(args.no_cuda)\n",
    "import argparse\np = argparse.ArgumentParser()\np.add_argument('--cuda', action='store_true', default=True)\n"
    "args = p.parse_args()\nprint(args.cuda)\n",
    "import argparse\np = argparse.ArgumentParser()\np.add_argument('--cuda', action='store_true')\np.parse_args()\n",
    "import argparse\np = argparse.ArgumentParser()\np.add_argument('--gpu-stats', action='store_true')\nargs = p.parse_args()\n"
    "print(args.gpu_stats)\n",
])
def test_no_opt_in_flag_where_there_is_none(source):
    from cpu2gpu.migration.deviceflags import opt_in_flag

    assert opt_in_flag(source.encode()) is None


TRY_NEXT = b'''import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(3, 1)


def train(steps):
    data_iter = iter(loader)
    for i in range(steps):
        try:
            x, y = next(data_iter)
        except StopIteration:
            data_iter = iter(loader)
            x, y = next(data_iter)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
'''


def test_a_batch_bound_in_a_try_and_its_except_is_moved_after_both():
    """The last binding before the use is the except branch's, which the first step never runs: the move
    goes after the try statement, once, for both paths."""
    fixed = repair(TRY_NEXT, Evidence("CG103", "batch", "x", 16, func="train", def_line=8, batches=("x", "y")))
    assert fixed is not None and fixed.how == "unpack"
    assert "            x, y = next(data_iter)\n        x, y = x.to(device), y.to(device)\n        loss =" \
        in fixed.data.decode()
    assert fixed.data.decode().count(".to(device)") == 2


AFTER_LOOP = b'''import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(TensorDataset(torch.randn(8, 1, 4, 4), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 1)).to(device)
for features, targets in loader:
    break
probas = model(features[0, None])
'''


def test_a_loop_target_used_after_the_loop_is_moved_in_the_loops_body():
    """`for features, targets in loader: break` and then `model(features[0, None])`: the value after the loop
    is the last one the loop bound, so the move goes at the top of its body (before the break)."""
    fixed = repair(AFTER_LOOP, Evidence("CG103", "batch", "features", 9, batches=("features", "targets")))
    assert fixed is not None and fixed.how == "loop"
    assert "for features, targets in loader:\n    features, targets = features.to(device), targets.to(device)\n" \
           "    break\n" in fixed.data.decode()
