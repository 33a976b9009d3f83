"""Jupyter notebooks: checked as one program, rewritten cell by cell, the rest of the file untouched."""

from __future__ import annotations

import difflib
import json
import shutil

import pytest

from cpu2gpu import rewrite_source
from cpu2gpu.engine import SourceError, select_rules
from cpu2gpu.notebooks.cells import check_notebook, load, rewrite_notebook

from .conftest import FIXTURES

NOTEBOOK = FIXTURES / "notebooks" / "linear_regression.ipynb"
EXPECTED = FIXTURES / "notebooks" / "linear_regression.expected.ipynb"
# Each fixture notebook beside its expected rewrite (NAME.expected.ipynb).
NOTEBOOKS = sorted(p for p in (FIXTURES / "notebooks").glob("*.ipynb") if not p.name.endswith(".expected.ipynb"))


def _expected(notebook):
    return notebook.with_name(notebook.stem + ".expected.ipynb")


def _notebook(*sources, indent=1, as_lines=True, **top) -> bytes:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": source.splitlines(keepends=True) if as_lines else source}
             for i, source in enumerate(sources)]
    data = {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4,
            "nbformat_minor": 5, **top}
    return (json.dumps(data, indent=indent, ensure_ascii=False) + "\n").encode()


def test_findings_name_the_cell_and_the_line_in_it(cli):
    code, out, err = cli("check", str(NOTEBOOK))
    assert (code, err) == (1, "")
    assert out.splitlines()[:4] == [
        f"{NOTEBOOK}:cell 4:7:11: CG102 [*] tensor `x_train` stays on the CPU but meets the model `model` on the device",
        f"{NOTEBOOK}:cell 4:8:11: CG102 [*] tensor `y_train` stays on the CPU but meets the output of `model` on the device",
        f"{NOTEBOOK}:cell 5:1:9: CG101 [*] module `model` is used but never moved to the device",
        f"{NOTEBOOK}:cell 7:4:19: CG108 [*] `x_train` is on the device but `model` was moved to the CPU",
    ]


def test_json_findings_have_a_cell_field(cli):
    _, out, _ = cli("check", "--output-format", "json", str(NOTEBOOK))
    model = next(d for d in json.loads(out) if d["code"] == "CG101")
    assert (model["cell"], model["line"], model["column"], model["end_line"]) == (5, 1, 9, 1)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_rewrite_equals_the_expected_notebook(tmp_path, cli, notebook):
    path = tmp_path / notebook.name
    shutil.copy(notebook, path)
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 0, err
    assert path.read_bytes() == _expected(notebook).read_bytes()


def test_rewritten_notebook_validates_with_nbformat():
    nbformat = pytest.importorskip("nbformat")
    new = rewrite_notebook(NOTEBOOK.read_bytes(), str(NOTEBOOK), select_rules())
    notebook = nbformat.reads(new.decode("utf-8"), as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)
    # nbformat writes it back the same: the layout is Jupyter's own.
    assert nbformat.writes(notebook) + "\n" == new.decode("utf-8")


def test_byte_diff_shows_only_changed_cell_sources():
    old = NOTEBOOK.read_text(encoding="utf-8").splitlines()
    new = rewrite_notebook(NOTEBOOK.read_bytes(), str(NOTEBOOK), select_rules()).decode("utf-8").splitlines()
    changed = [line for line in difflib.ndiff(old, new) if line[:2] in ("- ", "+ ")]
    assert changed
    assert all(line[2:].startswith('    "') for line in changed)  # source lines, nothing else
    # Outputs, metadata and ids are the same objects as before.
    before, after = json.loads("\n".join(old)), json.loads("\n".join(new))
    for cell_before, cell_after in zip(before["cells"], after["cells"]):
        assert {k: v for k, v in cell_before.items() if k != "source"} == {
            k: v for k, v in cell_after.items() if k != "source"}
    assert before["metadata"] == after["metadata"]
    # The device setup went into the imports' cell, after the imports.
    assert after["cells"][2]["source"][-1] == 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_rewrite_is_idempotent(cli, tmp_path, notebook):
    expected = _expected(notebook).read_bytes()
    path = tmp_path / "nb.ipynb"
    path.write_bytes(expected)
    assert rewrite_notebook(expected, str(path), select_rules()) == expected
    code, out, _ = cli("check", str(path))
    assert (code, out.strip()) == (0, "All checks passed!")
    assert cli("rewrite", "--check", str(path))[0] == 0


def test_rewrite_diff_shows_cells(cli):
    code, out, _ = cli("rewrite", str(NOTEBOOK))
    assert code == 0
    assert f"--- {NOTEBOOK}:cell 2\n+++ {NOTEBOOK}:cell 2\n" in out
    assert "+model = LinearRegression(input_dim, output_dim).to(device)" in out


def test_magics_and_shell_lines_are_kept_word_for_word():
    raw = _notebook(
        "%matplotlib inline\n!pip install torch\nimport torch",
        "%%time\nmodel = torch.nn.Linear(1, 1)\nfiles = !ls\nif True:\n    !echo hi\nmodel?\n",
        "%%bash\necho not python (\n",
        "model(torch.ones(1))",
    )
    findings = check_notebook(raw, "nb.ipynb", select_rules())
    assert [(f.code, f.cell, f.line) for f in findings] == [("CG101", 2, 2), ("CG102", 4, 1)]
    cells = json.loads(rewrite_notebook(raw, "nb.ipynb", select_rules()))["cells"]
    assert cells[0]["source"] == ["%matplotlib inline\n", "!pip install torch\n", "import torch\n", "\n",
                                  'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")']
    assert cells[1]["source"] == ["%%time\n", "model = torch.nn.Linear(1, 1).to(device)\n", "files = !ls\n",
                                  "if True:\n", "    !echo hi\n", "model?\n"]
    assert cells[2]["source"] == ["%%bash\n", "echo not python (\n"]
    assert cells[3]["source"] == ["model(torch.ones(1, device=device))"]


def test_string_sources_stay_strings_and_layout_is_kept():
    raw = _notebook("import torch\nmodel = torch.nn.Linear(1, 1)\nmodel(torch.ones(1))\n", indent=2, as_lines=False)
    new = rewrite_notebook(raw, "nb.ipynb", select_rules())
    data = json.loads(new)
    assert isinstance(data["cells"][0]["source"], str)
    assert new.decode() == json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def test_escaped_unicode_layout_is_kept():
    data = json.loads(_notebook("import torch\nmodel = torch.nn.Linear(1, 1)\nmodel(torch.ones(1))  # é\n"))
    raw = (json.dumps(data, indent=1) + "\n").encode()  # ensure_ascii: \u00e9
    new = rewrite_notebook(raw, "nb.ipynb", select_rules())
    assert b"\\u00e9" in new and "é".encode() not in new


def test_a_layout_json_dumps_cannot_write_is_refused_not_reformatted():
    raw = _notebook("import torch\nmodel = torch.nn.Linear(1, 1)\nmodel(torch.ones(1))\n").replace(
        b'"nbformat": 4', b'"nbformat":    4')
    with pytest.raises(SourceError, match="without reformatting"):
        rewrite_notebook(raw, "nb.ipynb", select_rules())
    assert len(check_notebook(raw, "nb.ipynb", select_rules())) == 2  # check still works


def test_syntax_error_names_the_cell(cli, tmp_path):
    path = tmp_path / "broken.ipynb"
    path.write_bytes(_notebook("import torch", "x = (\n"))
    good = tmp_path / "good.py"
    good.write_text("import torch\nmodel = torch.nn.Linear(1, 1)\nmodel(torch.ones(1))\n")
    code, out, err = cli("check", str(path), str(good))
    assert code == 2
    assert err.startswith(f"{path}:cell 2:")
    assert f"{good}:2:9: CG101" in out


def test_invalid_json_is_one_clear_error(cli, tmp_path):
    path = tmp_path / "bad.ipynb"
    path.write_text('{"cells": [')
    code, _, err = cli("check", str(path))
    assert code == 2
    assert err.strip().splitlines() == [f"{path}:1:12: error: not a valid notebook: invalid JSON: Expecting value"]
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 2 and "not a valid notebook" in err
    assert path.read_text() == '{"cells": ['


def test_non_python_notebook_and_markdown_only_notebook_have_no_findings():
    r_notebook = _notebook("library(torch)\nx <- torch_tensor(1)")
    data = json.loads(r_notebook)
    data["metadata"]["language_info"]["name"] = "R"
    raw = json.dumps(data).encode()
    assert check_notebook(raw, "r.ipynb", select_rules()) == []
    assert rewrite_notebook(raw, "r.ipynb", select_rules()) == raw
    assert load(_notebook()).cells == []


MIGRATED = [p for p in NOTEBOOKS if p.read_bytes() == _expected(p).read_bytes()]


@pytest.mark.parametrize("notebook", MIGRATED, ids=[p.stem for p in MIGRATED])
def test_a_notebook_that_runs_on_the_device_gets_no_placement_finding(notebook):
    # (its expected rewrite is itself: code that runs correctly on the device gets no CG1xx)
    findings = check_notebook(notebook.read_bytes(), str(notebook), select_rules())
    assert [f"{f.code} line {f.line}" for f in findings if f.code.startswith("CG1")] == []


def test_folders_include_notebooks(cli, tmp_path):
    shutil.copy(NOTEBOOK, tmp_path / "nb.ipynb")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    shutil.copy(NOTEBOOK, tmp_path / ".ipynb_checkpoints" / "nb-checkpoint.ipynb")
    _, out, _ = cli("check", "--output-format", "json", "--no-cache", str(tmp_path))
    assert {d["path"] for d in json.loads(out)} == {str(tmp_path / "nb.ipynb")}


def _rewritten_cells(*sources) -> list[str]:
    new = rewrite_notebook(_notebook(*sources), "nb.ipynb", select_rules())
    assert rewrite_notebook(new, "nb.ipynb", select_rules()) == new  # a fixed point
    assert [f.code for f in check_notebook(new, "nb.ipynb", select_rules()) if f.code.startswith("CG1")] == []
    return ["".join(cell["source"]) for cell in json.loads(new)["cells"]]


DEFAULT_DEVICE = 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'


def test_a_device_chosen_in_a_later_cell_moves_up_to_the_torch_imports_cell():
    # The cell marks and the IPython line stay in their cells; the comment moves with its statement.
    cells = _rewritten_cells(
        "import numpy as np\nimport torch",
        "import torch.nn as nn",
        "x = torch.randn(8, 3)\nmodel = nn.Linear(3, 1)",
        "%%time\n# the GPU when there is one\n" + DEFAULT_DEVICE + "\nprint(device)",
        "out = model(x)",
        DEFAULT_DEVICE.replace("device =", "other ="),
    )
    assert cells == [
        "import numpy as np\nimport torch\n\n# the GPU when there is one\n" + DEFAULT_DEVICE,
        "import torch.nn as nn",
        "x = torch.randn(8, 3, device=device)\nmodel = nn.Linear(3, 1).to(device)",
        "%%time\nprint(device)",
        "out = model(x)",
        DEFAULT_DEVICE.replace("device =", "other ="),
    ]


def test_a_device_chosen_alone_in_the_last_cell_leaves_that_cell_empty():
    cells = _rewritten_cells("import torch", "model = torch.nn.Linear(3, 1)\nmodel(torch.ones(3))", DEFAULT_DEVICE)
    assert cells == ["import torch\n\n" + DEFAULT_DEVICE, "model = torch.nn.Linear(3, 1).to(device)\n"
                     "model(torch.ones(3, device=device))", ""]


def test_the_device_setup_goes_into_the_cell_that_imports_torch():
    for first in ("import numpy as np", "%matplotlib inline\nimport os\nos.environ['X'] = '1'"):
        cells = _rewritten_cells(first, "import torch\nimport torch.nn as nn", "import matplotlib.pyplot as plt",
                                 "model = nn.Linear(3, 1)\nout = model(torch.randn(2, 3))")
        assert cells == [first, "import torch\nimport torch.nn as nn\n\n" + DEFAULT_DEVICE,
                         "import matplotlib.pyplot as plt",
                         "model = nn.Linear(3, 1).to(device)\nout = model(torch.randn(2, 3, device=device))"]


def test_torch_imported_after_its_first_use_gets_the_setup_and_an_import_before_that_use():
    cells = _rewritten_cells("import torch.nn as nn", "model = nn.Linear(3, 1)",
                             "import torch\nout = model(torch.randn(2, 3))")
    assert cells == ["import torch.nn as nn\nimport torch\n\n" + DEFAULT_DEVICE, "model = nn.Linear(3, 1).to(device)",
                     "import torch\nout = model(torch.randn(2, 3, device=device))"]


@pytest.mark.parametrize("flag", ["train_on_gpu", "use_gpu", "use_cuda", "cuda", "is_cuda", "gpu_available",
                                  "USE_CUDA", "args.cuda"])
def test_a_gpu_flag_in_a_later_cell_chooses_the_device_right_after_it(flag):
    setup = "import argparse\nargs = argparse.Namespace()\n" if "." in flag else ""
    cells = _rewritten_cells(
        setup + "import torch\nimport torch.nn as nn",
        f"# check if CUDA is available\n{flag} = torch.cuda.is_available()\nif not {flag}:\n    print('CPU only')",
        "model = nn.Linear(3, 1)\nout = model(torch.randn(2, 3))",
    )
    assert cells[0] == setup + "import torch\nimport torch.nn as nn"
    assert cells[1] == (f"# check if CUDA is available\n{flag} = torch.cuda.is_available()\n"
                        f'device = torch.device("cuda" if {flag} else "cpu")\nif not {flag}:\n    print(\'CPU only\')')


def test_a_gpu_flag_set_after_the_device_is_needed_is_not_followed():
    # The model is built before the flag: the device cannot wait for it (here torch.nn hides the torch code).
    cells = _rewritten_cells("import torch\nimport torch.nn as nn", "model = nn.Linear(3, 1)",
                             "use_gpu = torch.cuda.is_available()", "out = model(torch.randn(2, 3))")
    assert cells[:3] == ["import torch\nimport torch.nn as nn\n\n" + DEFAULT_DEVICE,
                         "model = nn.Linear(3, 1).to(device)", "use_gpu = torch.cuda.is_available()"]


def test_a_flag_that_is_not_a_gpu_choice_is_not_followed():
    for line in ("no_cuda = not torch.cuda.is_available()",
                 "gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0",
                 "ready = torch.cuda.is_available()"):
        cells = _rewritten_cells("import torch\n" + line, "model = torch.nn.Linear(3, 1)\nmodel(torch.ones(3))")
        assert cells[0] == "import torch\n\n" + DEFAULT_DEVICE + "\n" + line


def test_a_script_with_a_gpu_flag_gets_one_device_that_follows_it():
    source = ("import torch\nimport torch.nn as nn\n\ntrain_on_gpu = torch.cuda.is_available()\n\n"
              "model = nn.Linear(3, 1)\nout = model(torch.randn(2, 3))\n")
    assert rewrite_source(source) == (
        "import torch\nimport torch.nn as nn\n\ntrain_on_gpu = torch.cuda.is_available()\n"
        'device = torch.device("cuda" if train_on_gpu else "cpu")\n\n'
        "model = nn.Linear(3, 1).to(device)\nout = model(torch.randn(2, 3, device=device))\n")
    # A flag set after the model is built comes too late for it.
    late = ("import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(3, 1)\n"
            "use_cuda = torch.cuda.is_available() and True\n")
    assert rewrite_source(late + "out = model(torch.randn(2, 3))\n") == (
        "import torch\nimport torch.nn as nn\n\n" + DEFAULT_DEVICE + "\n\nmodel = nn.Linear(3, 1).to(device)\n"
        "use_cuda = torch.cuda.is_available() and True\nout = model(torch.randn(2, 3, device=device))\n")
