"""cpu2gpu verify on Jupyter notebooks: the code cells run in order as one program, and every
location inside a notebook reads ``train.ipynb:cell N:L`` with N as ``cpu2gpu check`` numbers cells.

The fixtures (fixtures/runtime/notebooks/) are one tiny classifier over six cells: imports with
``%matplotlib inline``, ``!pip``, the model, the data (``display``), six training steps, an
evaluation with ``%time``. ``mlp_migrated.ipynb`` is what ``cpu2gpu rewrite`` makes of the original.
"""

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from cpu2gpu.engine import select_rules  # noqa: E402
from cpu2gpu.notebooks.cells import check_notebook, runnable_cells  # noqa: E402
from cpu2gpu.runtime.child import notebookrun  # noqa: E402
from cpu2gpu.runtime.report.report import to_json, to_text  # noqa: E402
from cpu2gpu.runtime.judge.runner import RunSpec  # noqa: E402
from cpu2gpu.runtime.judge.verify import VerifyError, judge, verify  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime
NOTEBOOKS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "runtime", "notebooks"))


def run_all(cases):
    """cases: {name: (file, kwargs)} -> {name: report}, the verifications side by side."""

    def one(item):
        name, (path, kw) = item
        kw = dict(kw, timeout=HANG_GUARD_S)
        if kw.get("against"):
            kw["against"] = os.path.join(NOTEBOOKS, kw["against"])
        return name, verify(os.path.join(NOTEBOOKS, path), cwd=NOTEBOOKS, **kw)

    with ThreadPoolExecutor(len(cases)) as pool:
        return dict(pool.map(one, cases.items()))


def run_of(report, label):
    return next(r for r in report["runs"] if r["label"] == label)


def cell_line(name, cell, text):
    """The 1-based line of ``text`` in code cell ``cell`` of a fixture notebook."""
    with open(os.path.join(NOTEBOOKS, name), "rb") as f:
        source = runnable_cells(f.read())[cell - 1].text
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def write_notebook(path, *sources):
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s}
             for s in sources]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return str(path)


# -- without a child: the cells as Python, the judge -------------------------------------------------


def test_cells_compile_under_their_check_numbers_with_ipython_lines_handled(tmp_path):
    path = write_notebook(tmp_path / "t.ipynb",
                          "%matplotlib inline\nimport math\n!pip install torch",
                          "%%bash\necho hi\nexit 1",
                          "%time x = math.sqrt(16)\nfor i in range(2):\n    %timeit -n 1 y = i\n",
                          "display(x)")
    codes = notebookrun.compile_cells(path)
    assert [c.co_filename for c in codes] == [f"{path}:cell {n}" for n in (1, 2, 3, 4)]
    ns = {"display": notebookrun.display}
    for code in codes:
        exec(code, ns)
    assert ns["x"] == 4.0 and ns["y"] == 1  # the timed statements ran, the shell lines did not
    assert notebookrun.program_file(f"{path}:cell 3") == path
    assert notebookrun.program_file("/a/train.py") == "/a/train.py"

    bad = write_notebook(tmp_path / "bad.ipynb", "import math", "x = 1\nif x\n    pass")
    with pytest.raises(SyntaxError) as error:
        notebookrun.compile_cells(bad)
    assert (error.value.filename, error.value.lineno) == (f"{bad}:cell 2", 2)


def test_a_file_that_is_not_a_notebook_is_a_usage_error(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [')
    with pytest.raises(VerifyError, match="not a valid notebook"):
        verify(str(broken), device="sim", cwd=str(tmp_path))


def _result(steps, cpu_calls=0, trained=()):
    modules = [{"name": "model", "class": "Net", "calls": cpu_calls, "device_calls": 0, "cpu_calls": cpu_calls,
                "param_devices": ["cpu"], "input_devices": ["cpu"]}] if cpu_calls else []
    return {"status": "ok", "steps": steps, "losses": [], "backward_calls": steps, "device_forward_calls": 0,
            "cpu_forward_calls": cpu_calls, "trained_devices": list(trained), "modules": modules, "events": []}


def test_no_training_step_is_said_as_such_not_blamed_on_a_rule():
    spec = RunSpec("migrated (sim)", "migrated", "train.py", "sim")
    for result in (_result(0), _result(0, cpu_calls=3)):  # an idle script, an inference on the CPU
        out = judge([spec], [result])
        assert out["verdict"] == "fail"
        (reason,) = out["reasons"]
        assert reason["rule"] is None and reason["cause"].startswith("no training step ran in the sim run")
    # Training on the CPU is still the model never moved.
    out = judge([spec], [_result(4, cpu_calls=4, trained=["cpu"])])
    assert out["reasons"][0]["rule"] == "CG101"


# -- runs: each starts torch children ------------------------------------------------------------


def test_a_migration_that_leaves_labels_behind_fails_at_its_cell_and_line():
    name = "mlp_labels_not_moved.ipynb"
    rep = run_all({"labels": (name, {"device": "sim"})})["labels"]
    with open(os.path.join(NOTEBOOKS, name), "rb") as f:
        (static,) = check_notebook(f.read(), name, select_rules())
    line = cell_line(name, static.cell, "loss = criterion(model(inputs), labels)")
    at = f"{name}:cell {static.cell}"

    assert rep["verdict"] == "fail"
    reason = rep["reasons"][0]
    assert reason["rule"] == static.code == "CG103"
    assert reason["where"] == {"file": at, "line": line}
    assert f"labels stayed on the CPU at {at}:{line}" in reason["cause"]
    run = run_of(rep, "migrated (sim)")
    assert (run["exception"]["file"], run["exception"]["line"]) == (at, line)
    assert run["exception"]["source"] == "loss = criterion(model(inputs), labels)"
    assert [e["where"] for e in run["events"]] == [{"file": at, "line": line}]
    text = to_text(rep)
    assert f"at {at}:{line}" in text and "CG103" in text
    assert json.loads(to_json(rep))["reasons"][0]["where"]["file"] == at


@pytest.mark.slow
def test_a_correct_migration_verifies_against_the_notebook_or_a_script():
    reports = run_all({
        "notebook": ("mlp_migrated.ipynb", {"device": "sim", "against": "mlp_original.ipynb"}),
        "script": ("mlp_migrated.py", {"device": "sim", "against": "mlp_original.ipynb"}),
    })
    for name, rep in reports.items():
        assert rep["verdict"] == "pass", (name, rep["reasons"], [r.get("exception") for r in rep["runs"]])
        original, migrated = run_of(rep, "original (cpu)"), run_of(rep, "migrated (sim)")
        assert original["steps"] == migrated["steps"] == 6
        assert migrated["losses"] == original["losses"]
        model = next(m for m in migrated["modules"] if m["name"] == "model")
        assert model["class"] == "MLP" and model["param_devices"] == ["cuda:0"] and model["cpu_calls"] == 0
    # The cells ran in order, display() printed, and the %time statement bound its name.
    out = run_of(reports["notebook"], "migrated (sim)")["stdout_tail"]
    assert out.index("torch.Size([48, 4])") < out.index("epoch 1:") < out.index("with 67 parameters")
    assert run_of(reports["script"], "original (cpu)")["losses"] == run_of(reports["notebook"], "original (cpu)")["losses"]


@pytest.mark.slow
def test_no_step_and_missing_data_are_reported_at_their_cells():
    reports = run_all({
        "no step": ("mlp_no_step.ipynb", {"device": "sim"}),
        "needs data": ("needs_data.ipynb", {"device": "sim", "synthetic_data": True}),
    })
    idle = reports["no step"]
    assert idle["verdict"] == "fail" and run_of(idle, "migrated (sim)")["steps"] == 0
    (reason,) = idle["reasons"]
    assert reason["rule"] is None and "no training step ran in the sim run" in reason["cause"]
    assert "CG101" not in to_text(idle) and "no training step ran" in to_text(idle)

    data = reports["needs data"]
    assert data["verdict"] == "needs-data"
    (needed,) = data["needs_data"]
    line = cell_line("needs_data.ipynb", 2, "torch.load")
    assert needed["path"] == os.path.join("data", "points.pt")
    assert needed["where"] == {"file": "needs_data.ipynb:cell 2", "line": line}
    assert f"at needs_data.ipynb:cell 2:{line}" in to_text(data)
