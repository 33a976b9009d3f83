"""The command line: output formats, exit codes, errors that lose nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .conftest import FIXTURES, ROOT

SEED = FIXTURES / "seeds" / "linear_regression.py"
CPU_SCRIPT = "import torch\nmodel = torch.nn.Linear(1, 1)\nmodel(torch.ones(1))\n"
CLEAN_SCRIPT = (
    "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
    "model = torch.nn.Linear(1, 1).to(device)\nmodel(torch.ones(1, device=device))\n"
)


def test_check_text_output_and_exit_code(cli):
    code, out, _ = cli("check", str(SEED))
    assert code == 1
    lines = out.splitlines()
    assert f"{SEED}:25:9: CG101 [*] module `model` is used but never moved to the device" in lines
    assert lines[-1].startswith("Found 4 findings (4 fixable")


def test_check_clean_file_exits_zero(cli, tmp_path):
    path = tmp_path / "ok.py"
    path.write_text(CLEAN_SCRIPT)
    code, out, _ = cli("check", str(path))
    assert (code, out.strip()) == (0, "All checks passed!")


def test_check_json_fields(cli):
    code, out, _ = cli("check", "--output-format", "json", str(SEED))
    assert code == 1
    data = json.loads(out)
    assert {tuple(sorted(d)) for d in data} == {tuple(sorted(
        ["path", "line", "column", "end_line", "end_column", "code", "name", "message", "fix_available"]))}
    model = next(d for d in data if d["code"] == "CG101")
    # model = LinearRegression(input_dim, output_dim): the call spans columns 9..48, end exclusive.
    assert (model["path"], model["line"], model["column"], model["end_line"], model["end_column"]) == (
        str(SEED), 25, 9, 25, 9 + len("LinearRegression(input_dim, output_dim)"))
    assert model["name"] == "model-not-moved" and model["fix_available"] is True


def test_columns_count_characters_not_bytes(cli, tmp_path):
    path = tmp_path / "wide.py"
    path.write_text("import torch\nmodel = torch.nn.Linear(1, 1)\nétiquette = 1; model(torch.ones(1))\n", encoding="utf-8")
    _, out, _ = cli("check", "--output-format", "json", str(path))
    ones = next(d for d in json.loads(out) if d["code"] == "CG102")
    assert (ones["line"], ones["column"]) == (3, len("étiquette = 1; model(") + 1)


def test_select_and_ignore(cli):
    _, out, _ = cli("check", "--output-format", "json", "--select", "CG10", "--ignore", "CG102", str(SEED))
    assert sorted({d["code"] for d in json.loads(out)}) == ["CG101", "CG108"]


def test_noqa_suppresses_one_line(cli, tmp_path):
    path = tmp_path / "noqa.py"
    path.write_text("import torch\nmodel = torch.nn.Linear(1, 1)  # noqa: CG101\nmodel(torch.ones(1))\n"
                    "other = torch.nn.Linear(1, 1)\nother(torch.zeros(1))\n")
    _, out, _ = cli("check", "--output-format", "json", str(path))
    # The model kept on the CPU keeps its input there too; the other one still moves.
    assert [(d["code"], d["line"]) for d in json.loads(out)] == [("CG101", 4), ("CG102", 5)]
    code, out, _ = cli("rewrite", str(path))
    assert "Linear(1, 1).to(device)  # noqa" not in out and "torch.ones(1, device=device)" not in out
    assert "torch.zeros(1, device=device)" in out


def test_syntax_error_is_reported_and_the_rest_processed(cli, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"import torch\ndef f(:\n    pass\n")
    good = tmp_path / "good.py"
    good.write_text(CPU_SCRIPT)
    code, out, err = cli("check", str(broken), str(good))
    assert code == 2
    assert err.strip().splitlines() == [f"{broken}:2:7: error: syntax error: invalid syntax"]
    assert f"{good}:2:9: CG101" in out
    code, _, err = cli("rewrite", "--in-place", str(broken), str(good))
    assert code == 2 and str(broken) in err
    assert broken.read_bytes() == b"import torch\ndef f(:\n    pass\n"
    assert "Linear(1, 1).to(device)" in good.read_text()


def test_missing_file_is_an_error(cli, tmp_path):
    code, _, err = cli("check", str(tmp_path / "nope.py"))
    assert code == 2 and "no such file" in err


def test_folder_walk_skips_files_without_torch(cli, tmp_path):
    (tmp_path / "plain.py").write_text("def f(:\n")  # no torch: not even parsed
    (tmp_path / "train.py").write_text(CPU_SCRIPT)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("")
    (tmp_path / ".venv" / "lib.py").write_text(CPU_SCRIPT)
    (tmp_path / "__pycache__").mkdir()
    code, out, err = cli("check", "--output-format", "json", str(tmp_path))
    assert code == 1 and err == ""
    assert {d["path"] for d in json.loads(out)} == {str(tmp_path / "train.py")}


def test_rewrite_diff_writes_nothing(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    code, out, _ = cli("rewrite", str(path))
    assert code == 0
    assert out.startswith(f"--- {path}\n+++ {path}\n")
    assert "+model = torch.nn.Linear(1, 1).to(device)" in out
    assert path.read_text() == CPU_SCRIPT


def test_rewrite_in_place_then_check_is_clean(cli, tmp_path):
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    os.chmod(path, 0o751)
    assert cli("rewrite", "--check", str(path))[0] == 1
    assert cli("rewrite", "--in-place", str(path))[0] == 0
    assert os.stat(path).st_mode & 0o777 == 0o751
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # no temp file left behind
    assert cli("rewrite", "--check", str(path))[0] == 0
    assert cli("check", str(path))[0] == 0


def test_rewrite_keeps_crlf_line_endings(cli, tmp_path):
    path = tmp_path / "crlf.py"
    path.write_bytes(CPU_SCRIPT.replace("\n", "\r\n").encode())
    cli("rewrite", "--in-place", str(path))
    data = path.read_bytes()
    assert b"device = torch.device" in data and data.count(b"\n") == data.count(b"\r\n")


def test_rules_command_lists_the_catalog(cli):
    code, out, _ = cli("rules")
    assert code == 0
    from cpu2gpu.rules import ALL_RULES

    assert [line.split()[0] for line in out.splitlines()] == [r.code for r in ALL_RULES]


def test_config_in_pyproject(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.cpu2gpu]\nignore = ["CG102"]\n')
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    _, out, _ = cli("check", "--output-format", "json", str(path))
    assert [d["code"] for d in json.loads(out)] == ["CG101"]


def test_module_entry_point_and_no_torch_import(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['cpu2gpu', 'check', {str(path)!r}]\n"
        "try:\n    runpy.run_module('cpu2gpu', run_name='__main__')\n"
        "except SystemExit as exit:\n    code = exit.code\n"
        "print('torch' in sys.modules, code)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert result.stdout.splitlines()[-1] == "False 1", result.stderr


def test_torch_is_only_an_optional_dependency():
    from importlib.metadata import requires

    requirements = requires("cpu2gpu") or []
    torch = [r for r in requirements if r.replace(" ", "").startswith("torch")]
    assert torch and all("extra" in r and "runtime" in r for r in torch)
    assert any(r.startswith("libcst") for r in requirements) and any(r.startswith("click") for r in requirements)


def test_config_unsafe_fixes_and_device_expression(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.cpu2gpu]\nunsafe-fixes = true\ndevice-expression = \'torch.device("cuda:1" if torch.cuda.is_available() else "cpu")\'\n')
    path = tmp_path / "train.py"
    path.write_text(CPU_SCRIPT)
    code, out, _ = cli("rewrite", str(path))
    assert code == 0 and '+device = torch.device("cuda:1" if torch.cuda.is_available() else "cpu")' in out
    (tmp_path / "pyproject.toml").write_text("[tool.cpu2gpu]\nunknown-key = 1\n")
    code, _, err = cli("check", str(path))
    assert code == 2 and "unknown setting: unknown-key" in err


def test_unsafe_fixes_from_the_command_line(cli, tmp_path):
    path = tmp_path / "model.py"
    path.write_text("import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n"
                    "        super().__init__()\n        self.scale = torch.ones(4)\n"
                    "    def forward(self, x):\n        return x * self.scale\n")
    assert "register_buffer" not in cli("rewrite", str(path))[1]
    assert '+        self.register_buffer("scale", torch.ones(4), persistent=False)' in cli(
        "rewrite", "--unsafe-fixes", str(path))[1]
