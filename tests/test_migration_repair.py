"""cpu2gpu.migration: where a value a run located is bound, and the edit written there (static, no torch)."""

from __future__ import annotations

import pytest

from cpu2gpu.migration import Evidence, repair

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
