"""The command line that ruff users expect: fixable means fixable, mistakes are loud, a rule explained,
standard input and output files for editors and scripts, colours, positions editors can open."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from cpu2gpu.cli import main
from cpu2gpu.rules import ALL_RULES

from .conftest import FIXTURES

NOTEBOOK = FIXTURES / "notebooks" / "linear_regression.ipynb"

# CG105 (an unsafe fix) beside CG101 and CG102 (safe fixes)
UNSAFE = """import torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.ones(4)
    def forward(self, x):
        return x * self.scale
model = M()
print(model(torch.ones(4)))
"""
CPU_SCRIPT = "import torch\n\nmodel = torch.nn.Linear(1, 1)\nprint(model(torch.ones(1)))\n"
HINT = "1 more fix is available with `cpu2gpu rewrite --unsafe-fixes`."


def run(*args, input=None, color=False, env=None):
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(main, list(args), input=input, color=color, env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def unsafe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text(UNSAFE)
    return tmp_path / "m.py"


# -- fixable means fixable --


def test_check_marks_only_the_fixes_rewrite_applies_and_tells_of_the_unsafe_ones(unsafe):
    code, out, _ = run("check", "m.py")
    assert code == 1
    lines = out.splitlines()
    assert "m.py:6:22: CG105 `self.scale`" in out and not any("CG105 [*]" in line for line in lines)
    assert any(line.startswith("m.py:9:9: CG101 [*]") for line in lines)
    assert lines[-2:] == ["Found 3 findings (2 fixable with `cpu2gpu rewrite`).", HINT]
    # with the unsafe fixes on (flag or config), every fix is one rewrite applies
    code, out, _ = run("check", "--unsafe-fixes", "m.py")
    assert "CG105 [*]" in out and out.splitlines()[-1] == "Found 3 findings (3 fixable with `cpu2gpu rewrite`)."
    (unsafe.parent / "pyproject.toml").write_text("[tool.cpu2gpu]\nunsafe-fixes = true\n")
    assert "CG105 [*]" in run("check", "--no-cache", "m.py")[1]


def test_statistics_mark_the_applicable_fixes(unsafe):
    _, out, _ = run("check", "--statistics", "m.py")
    assert "1  CG105      plain-tensor-attribute" in out and "1  CG101  [*] model-not-moved" in out


def test_rewrite_tells_of_the_unsafe_fixes_it_left_out(unsafe):
    code, out, err = run("rewrite", "--in-place", "m.py")
    assert code == 0
    assert err.splitlines() == ["Rewrote m.py", HINT]
    assert "self.scale = torch.ones(4)" in unsafe.read_text()
    # nothing left but the unsafe fix: rewrite changes nothing, and says why
    code, out, err = run("rewrite", "--in-place", "m.py")
    assert (code, out, err.strip()) == (0, "", HINT)
    code, out, err = run("rewrite", "--in-place", "--unsafe-fixes", "m.py")
    assert code == 0 and "more fix" not in err and "register_buffer" in unsafe.read_text()


# -- mistakes are loud --


def test_a_folder_without_python_files_warns(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    for command in ("check", "rewrite"):
        code, out, err = run(command, str(tmp_path))
        assert code == 0 and "All checks passed!" not in out
        assert f"warning: no Python files found under {tmp_path}" in err
    code, out, err = run("check", "--output-format", "json", str(tmp_path))
    assert (code, json.loads(out)) == (0, []) and "no Python files" in err


@pytest.mark.parametrize("args", [["--select", "CG999"], ["--ignore", "CG1,XY"], ["--select", "CG9"]])
def test_an_unknown_rule_code_is_an_error(unsafe, args):
    for command in ("check", "rewrite"):
        code, out, err = run(command, *args, "m.py")
        assert code == 2 and out == ""
        assert "error: unknown rule code" in err and "CG101" in err and "known prefixes: CG, CG1, CG2, CG3" in err


def test_an_unknown_rule_code_in_the_config_is_an_error(unsafe):
    (unsafe.parent / "pyproject.toml").write_text('[tool.cpu2gpu]\nextend-select = ["CG999"]\n')
    code, _, err = run("check", "m.py")
    assert code == 2 and "[tool.cpu2gpu] extend-select: CG999" in err


@pytest.mark.parametrize("args", [[], ["check"], ["rewrite"], ["rules"], ["rule"]])
def test_h_is_help(args):
    code, out, _ = run(*args, "-h")
    assert code == 0 and out.startswith("Usage: ") and "-h, --help" in out


# -- a rule explained --


def test_rule_prints_the_documentation_for_a_terminal():
    code, out, _ = run("rule", "CG105")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "CG105 plain-tensor-attribute"
    assert "``" not in out and ".. " not in out and "::" not in out
    assert "What it finds: `self.name = torch.<factory>(...)` in a module's `__init__`" in out
    assert "Why it breaks on the GPU:" in out and "Fix: unsafe" in out
    # the example, as an indented block after a plain "Example:"
    example = lines.index("Example:")
    assert lines[example + 2].startswith("    self.scale = torch.ones(4)")
    assert run("rule", "cg101")[0] == 0  # any case


def test_rule_renders_rst_markup():
    from cpu2gpu.output.ruledoc import render_doc

    doc = ("Title\n=====\n\nUse ``x`` and :class:`Foo`.\n\n.. code-block:: python\n\n    a = 1\n\n"
           "See::\n\n    b = 2\n\nDone.\n")
    assert render_doc(doc) == ["Title", "", "Use `x` and `Foo`.", "", "    a = 1", "", "See:", "", "    b = 2",
                               "", "Done."]


def test_an_unknown_rule_is_an_error():
    code, out, err = run("rule", "CG999")
    assert code == 2 and out == "" and "unknown rule code: CG999" in err and "cpu2gpu rules" in err


def test_rules_columns_are_aligned():
    _, out, _ = run("rules")
    lines = out.splitlines()
    assert len(lines) == len(ALL_RULES)
    # the fix column and the summary start in the same column on every line
    assert len({line.index(rule.summary()) for line, rule in zip(lines, ALL_RULES)}) == 1
    assert len({line.index(rule.name) + len(max((r.name for r in ALL_RULES), key=len)) for line, rule
                in zip(lines, ALL_RULES)}) == 1


# -- editors and scripts --


def test_check_reads_standard_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run("check", "-", input=CPU_SCRIPT)
    assert code == 1 and out.startswith("-:3:9: CG101 [*]")
    # --stdin-filename: the path in the messages, the settings beside it
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text('[tool.cpu2gpu]\nignore = ["CG102"]\n')
    code, out, _ = run("check", "-", "--stdin-filename", "sub/train.py", input=CPU_SCRIPT)
    assert code == 1 and "sub/train.py:3:9: CG101" in out and "CG102" not in out
    code, out, err = run("check", "-", "--stdin-filename", "x.py", input="def f(:\n")
    assert code == 2 and "x.py:1:" in err and "syntax error" in err


def test_check_reads_a_notebook_from_standard_input():
    code, out, _ = run("check", "-", "--stdin-filename", "train.ipynb", input=NOTEBOOK.read_text())
    assert code == 1 and "train.ipynb:cell 5:1:9: CG101" in out


def test_rewrite_writes_the_whole_code_to_standard_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run("rewrite", "-", "--stdin-filename", "train.py", input=CPU_SCRIPT)
    assert code == 0 and err == ""
    assert out.startswith("import torch\n") and "model = torch.nn.Linear(1, 1).to(device)" in out
    assert "---" not in out and "+++" not in out
    # clean code comes back as it was; code that cannot be read too, with the error on stderr
    assert run("rewrite", "-", input=out) == (0, out, "")
    code, out, err = run("rewrite", "-", input="import torch\ndef f(:\n")
    assert code == 2 and out == "import torch\ndef f(:\n" and "syntax error" in err
    code, out, err = run("rewrite", "-", "--check", input=CPU_SCRIPT)
    assert (code, out) == (1, "") and "Would rewrite -" in err
    assert run("rewrite", "-", "--in-place", input=CPU_SCRIPT)[0] == 2
    assert run("check", "-", "other.py", input=CPU_SCRIPT)[0] == 2


def test_rewrite_of_standard_input_tells_of_the_unsafe_fixes():
    code, out, err = run("rewrite", "-", input=UNSAFE)
    assert code == 0 and "self.scale = torch.ones(4)" in out and err.strip() == HINT


def test_output_file(unsafe):
    code, out, _ = run("check", "--output-file", "report.json", "--output-format", "json", "m.py")
    assert code == 1 and out == ""
    assert {d["code"] for d in json.loads((unsafe.parent / "report.json").read_text())} == {"CG101", "CG102", "CG105"}
    run("check", "-o", "report.txt", "m.py", color=True)
    text = (unsafe.parent / "report.txt").read_text()
    assert "\x1b[" not in text and text.startswith("m.py:6:22: CG105")


def test_colours_on_a_terminal_only(unsafe):
    _, out, _ = run("check", "m.py", color=True)
    assert "\x1b[" in out and "\x1b[1mm.py\x1b[0m" in out
    assert "\x1b[" not in run("check", "m.py", color=False)[1]  # piped
    assert "\x1b[" not in run("check", "m.py", color=True, env={"NO_COLOR": "1"})[1]
    assert "\x1b[" not in run("check", "--output-format", "json", "m.py", color=True)[1]


def test_no_path_means_the_current_folder(unsafe):
    code, out, _ = run("check")
    assert code == 1 and out.startswith("m.py:6:22: CG105")
    code, out, _ = run("rewrite")
    assert code == 0 and "+++ b/m.py" in out


def test_rewrite_messages_go_to_one_stream(unsafe):
    code, out, err = run("rewrite", "--check", "m.py")
    assert code == 1 and out == "" and "Would rewrite m.py" in err
    code, out, err = run("rewrite", "--in-place", "m.py")
    assert out == "" and "Rewrote m.py" in err


# -- positions editors can open --


def _notebook_model(data):
    return next(d for d in data if d["code"] == "CG101")


def test_json_gives_the_cell_index_and_the_place_in_the_file(tmp_path):
    code, out, _ = run("check", "--output-format", "json", "--no-cache", str(NOTEBOOK))
    model = _notebook_model(json.loads(out))
    assert (model["cell"], model["line"], model["column"]) == (5, 1, 9)
    raw = json.loads(NOTEBOOK.read_text())
    assert raw["cells"][model["cell_index"]]["source"][0].startswith("model = LinearRegression(")
    line = NOTEBOOK.read_text().splitlines()[model["file_line"] - 1]
    assert line[model["file_column"] - 1:model["file_end_column"] - 1] == "LinearRegression(input_dim, output_dim)"
    # a script has none of the notebook fields
    assert "cell_index" not in json.loads(run("check", "--output-format", "json", "-", input=CPU_SCRIPT)[1])[0]


def test_notebook_positions_survive_the_cache(tmp_path):
    shutil.copy(NOTEBOOK, tmp_path / "nb.ipynb")
    first = run("check", "--output-format", "json", str(tmp_path / "nb.ipynb"))[1]
    assert run("check", "--output-format", "json", str(tmp_path / "nb.ipynb"))[1] == first
    assert "file_line" in first


def test_notebook_positions_in_a_string_source_with_escapes():
    from cpu2gpu.notebooks.positions import NotebookPositions

    text = 'x = "é"\nmodel = Net()\n'
    raw = json.dumps({"cells": [{"cell_type": "markdown", "source": ["# hi\n"]},
                                {"cell_type": "code", "source": text}]}, indent=1)
    places = NotebookPositions(raw)
    line, column = places.locate(1, text, 2, 9)
    assert raw.splitlines()[line - 1][column - 1:].startswith("Net()")


def test_sarif_places_notebook_findings_in_the_file_and_names_the_cell():
    code, out, _ = run("check", "--output-format", "sarif", "--no-cache", str(NOTEBOOK))
    result = next(r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "CG101")
    location = result["locations"][0]
    assert location["physicalLocation"]["region"] == {"startLine": 83, "startColumn": 14, "endLine": 83,
                                                      "endColumn": 53}
    assert location["logicalLocations"][0]["name"] == "cell 5"
    assert result["properties"]["cell"] == 5 and result["properties"]["cellIndex"] == 5
    assert result["message"]["text"].startswith("cell 5, line 1:")


def test_text_keeps_the_cell_form():
    _, out, _ = run("check", str(NOTEBOOK))
    assert f"{NOTEBOOK}:cell 5:1:9: CG101 [*]" in out



def test_force_exclude_applies_to_the_stdin_filename(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["--force-exclude", "--exclude", "legacy_*.py", "--stdin-filename", "legacy_train.py"]
    assert run("check", "-", *args, input=CPU_SCRIPT)[:2] == (0, "All checks passed!\n")
    assert run("rewrite", "-", *args, input=CPU_SCRIPT) == (0, CPU_SCRIPT, "")
