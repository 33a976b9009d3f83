"""The device style: the torch floor a project declares, `--device-style`, `device-style`, and the
device setups a script may already have (no second one is added)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cpu2gpu import rewrite_source
from cpu2gpu.cli import main
from cpu2gpu.rewrite.fixes import ACCELERATOR_DEVICE
from cpu2gpu.analysis.torchfloor import StyleError, read_floor, requirement_floor, resolve_style

SCRIPT = "import torch\nmodel = torch.nn.Linear(2, 1)\nprint(model(torch.randn(3, 2)))\n"
ACCELERATOR_LINE = f"device = {ACCELERATOR_DEVICE}"
CUDA_LINE = 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'


@pytest.mark.parametrize("requirement,floor", [
    ("torch>=2.1", (2, 1)),
    ("torch==1.13.1", (1, 13, 1)),
    ("torch~=2.0", (2, 0)),
    ("torch >= 2.6.0+cu121", (2, 6, 0)),
    ('torch[opt]>=2.7,<3; python_version > "3.8"', (2, 7)),
    ("torch==2.6.*", (2, 6)),
    ("Torch>=2.6", (2, 6)),
    ("torch", None),
    ("torch<3", None),
    ("torchvision>=0.20", None),
    ("torch-geometric==2.0", None),
    ("torch @ https://example.org/torch.whl", None),
])
def test_requirement_floor(requirement, floor):
    assert requirement_floor(requirement) == floor


def test_floor_from_pyproject_dependencies(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["numpy", "torch>=2.6"]\n')
    assert read_floor(tmp_path).version == (2, 6)


def test_floor_from_poetry(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.poetry.dependencies]\npython = "^3.10"\ntorch = "^2.1"\n')
    assert read_floor(tmp_path).version == (2, 1)


def test_floor_from_requirements_files_the_lowest_counts(tmp_path):
    (tmp_path / "requirements.txt").write_text("# pinned\nnumpy\ntorch>=2.7  # new\n")
    (tmp_path / "requirements-old.txt").write_text("-r requirements.txt\ntorch==1.13.1\n")
    floor = read_floor(tmp_path)
    assert floor.version == (1, 13, 1) and floor.source.endswith("requirements-old.txt")


def test_floor_from_setup_cfg(tmp_path):
    (tmp_path / "setup.cfg").write_text("[options]\ninstall_requires =\n    numpy\n    torch~=2.0\n")
    assert read_floor(tmp_path).requirement == "torch~=2.0"


def test_no_floor(tmp_path):
    (tmp_path / "requirements.txt").write_text("torch\nnumpy>=1\n")
    assert read_floor(tmp_path) is None


def test_resolve_style(tmp_path):
    assert resolve_style("cuda", tmp_path) == "cuda"
    assert resolve_style("auto", tmp_path) == "cuda"  # no floor declared
    assert resolve_style("accelerator", tmp_path) == "accelerator"
    (tmp_path / "requirements.txt").write_text("torch>=2.6\n")
    assert resolve_style("auto", tmp_path) == "accelerator"
    (tmp_path / "requirements.txt").write_text("torch>=2.1\n")
    assert resolve_style("auto", tmp_path) == "cuda"
    with pytest.raises(StyleError, match="2.6"):
        resolve_style("accelerator", tmp_path)


def _rewrite(tmp_path, *args, pyproject=None, requirements=None):
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    if requirements is not None:
        (tmp_path / "requirements.txt").write_text(requirements)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return CliRunner().invoke(main, ["rewrite", *args, str(script)])


def test_cli_accelerator_style(tmp_path):
    result = _rewrite(tmp_path, "--device-style", "accelerator")
    assert result.exit_code == 0 and ACCELERATOR_LINE in result.output


def test_cli_default_style_is_cuda(tmp_path):
    result = _rewrite(tmp_path)
    assert result.exit_code == 0 and CUDA_LINE in result.output


def test_cli_refuses_accelerator_below_the_floor(tmp_path):
    result = _rewrite(tmp_path, "--device-style", "accelerator", requirements="torch==1.13.1\n")
    assert result.exit_code == 2
    message = result.output.strip()
    assert "\n" not in message and "torch==1.13.1" in message and "2.6" in message


@pytest.mark.parametrize("requirement,line", [("torch>=2.6\n", ACCELERATOR_LINE), ("torch>=2.1\n", CUDA_LINE)])
def test_cli_auto(tmp_path, requirement, line):
    result = _rewrite(tmp_path, "--device-style", "auto", requirements=requirement)
    assert result.exit_code == 0 and line in result.output


def test_config_device_style(tmp_path):
    pyproject = '[project]\nname = "p"\ndependencies = ["torch>=2.6"]\n[tool.cpu2gpu]\ndevice-style = "auto"\n'
    result = _rewrite(tmp_path, pyproject=pyproject)
    assert result.exit_code == 0 and ACCELERATOR_LINE in result.output
    # the option overrides the configuration
    result = _rewrite(tmp_path, "--device-style", "cuda")
    assert result.exit_code == 0 and CUDA_LINE in result.output


def test_config_refusal_and_bad_values(tmp_path):
    result = _rewrite(tmp_path, pyproject='[project]\nname = "p"\ndependencies = ["torch>=2.0"]\n'
                                          '[tool.cpu2gpu]\ndevice-style = "accelerator"\n')
    assert result.exit_code == 2 and "torch>=2.0" in result.output
    result = _rewrite(tmp_path, pyproject='[tool.cpu2gpu]\ndevice-style = "mps"\n')
    assert result.exit_code == 2 and "device-style" in result.output
    result = _rewrite(tmp_path, pyproject='[tool.cpu2gpu]\ndevice-style = "cuda"\ndevice-expression = "x"\n')
    assert result.exit_code == 2


CUDA_CALLS = "import torch\nmodel = torch.nn.Linear(2, 2)\ntorch.cuda.synchronize()\n"


def _check(tmp_path, *args, pyproject=None):
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    script = tmp_path / "train.py"
    script.write_text(CUDA_CALLS)
    return CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "json", *args, str(script)])


def test_check_applies_the_configured_style(tmp_path):
    """check reports what rewrite would do: with the accelerator style configured, the torch.cuda call
    of a script being migrated is CG206; with the default style it is not."""
    def messages(result):
        return {f["code"]: f["message"] for f in json.loads(result.output)}

    assert list(messages(_check(tmp_path))) == ["CG204"]
    pyproject = '[project]\nname = "p"\ndependencies = ["torch>=2.6"]\n[tool.cpu2gpu]\ndevice-style = "auto"\n'
    found = messages(_check(tmp_path, pyproject=pyproject))
    assert sorted(found) == ["CG204", "CG206"]
    assert "torch.accelerator.is_available()" in found["CG204"]  # the guard the fix writes
    assert list(messages(_check(tmp_path, "--device-style", "cuda"))) == ["CG204"]


def test_check_refuses_a_style_below_the_floor(tmp_path):
    result = _check(tmp_path, "--device-style", "accelerator",
                    pyproject='[project]\nname = "p"\ndependencies = ["torch>=2.0"]\n')
    assert result.exit_code == 2 and "torch>=2.0" in result.output and "2.6" in result.output


def test_stdin_takes_the_style(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["rewrite", "--device-style", "accelerator", "-"], input=SCRIPT)
    assert result.exit_code == 0 and ACCELERATOR_LINE in result.output


def test_torch_alias_in_the_accelerator_setup():
    out = rewrite_source(SCRIPT.replace("torch", "th").replace("import th", "import torch as th"),
                         device_expression=ACCELERATOR_DEVICE)
    assert "device = th.accelerator.current_accelerator() if th.accelerator.is_available() else th.device" in out


# A script that picks its device in any of these ways is device-aware: the model it forgot to move
# goes to *its* device, and no second device setup is added, in either style.
DEVICE_FORMS = {
    "accelerator": "device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() "
                   "else torch.device('cpu')\n",
    "accelerator-bare": "device = torch.accelerator.current_accelerator()\n",
    "mps": "device = torch.device('mps' if torch.backends.mps.is_available() else 'cpu')\n",
    "cuda-mps-cpu": "device = 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() "
                    "else 'cpu'\n",
    "xpu": "device = torch.device('xpu' if torch.xpu.is_available() else 'cpu')\n",
    "default-device": "device = torch.get_default_device()\n",
    "accelerate": "from accelerate import Accelerator\naccelerator = Accelerator()\ndevice = accelerator.device\n",
    "lightning": "import lightning as L\nfabric = L.Fabric()\ndevice = fabric.device\n",
    "lightning-fabric": "from lightning.fabric import Fabric\nfabric = Fabric()\ndevice = fabric.device\n",
}


@pytest.mark.parametrize("expression", [None, ACCELERATOR_DEVICE], ids=["cuda-style", "accelerator-style"])
@pytest.mark.parametrize("form", DEVICE_FORMS.values(), ids=DEVICE_FORMS.keys())
def test_existing_device_gets_no_second_setup(form, expression):
    source = "import torch\n" + form + "model = torch.nn.Linear(2, 1)\nx = torch.randn(3, 2).to(device)\nprint(model(x))\n"
    out = rewrite_source(source, device_expression=expression)
    assert "model = torch.nn.Linear(2, 1).to(device)" in out
    assert "torch_device" not in out and "is_available() else torch.device(\"cpu\")" not in out
    assert out.count("device =") == source.count("device =")


def test_cg206_targets_newer_than_the_style_floor_need_unsafe_fixes():
    """The accelerator style is allowed from torch 2.6, but torch.accelerator.set_device_index came in
    2.7 and the memory functions in 2.9: their fixes are unsafe, and the message says the version."""
    from cpu2gpu import check_source

    source = ("import torch\nfrom torch import accelerator\ntorch.cuda.synchronize()\ntorch.cuda.set_device(0)\n"
              "if torch.cuda.is_available():\n    print(torch.cuda.memory_allocated())\n")
    messages = [f.message for f in check_source(source, select=["CG206"])]
    assert len(messages) == 3 and not messages[0].endswith("+)")
    assert messages[1].endswith("(PyTorch 2.7+)") and messages[2].endswith("(PyTorch 2.9+)")
    safe = rewrite_source(source)
    assert "torch.accelerator.synchronize()" in safe and "torch.cuda.set_device(0)" in safe
    unsafe = rewrite_source(source, unsafe_fixes=True)
    assert "torch.accelerator.set_device_index(0)" in unsafe and "torch.accelerator.memory_allocated()" in unsafe
