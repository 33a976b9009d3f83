"""--max-steps caps the training but lets the code after it run (evaluation, .numpy(), saving).

The fixtures train over a DataLoader for three epochs of six batches; with
--max-steps 5 the cap falls in the first epoch.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from cpu2gpu.runtime.cli import verify as verify_cmd  # noqa: E402
from cpu2gpu.runtime.report.report import to_json, to_text  # noqa: E402
from cpu2gpu.runtime.steps.stepcap import EVAL_BATCHES  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime


def _line_of(path, text):
    with open(path) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


def _run_all(fixtures_dir, cases):
    def one(item):
        name, (script, kw) = item
        kw = dict(kw, cwd=fixtures_dir, timeout=HANG_GUARD_S, jobs=2)
        if kw.get("against"):
            kw["against"] = os.path.join(fixtures_dir, kw["against"])
        return name, verify(os.path.join(fixtures_dir, script), **kw)

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(one, cases.items()))


def _loop(run, line):
    return next(loop for loop in run["cap"]["loops"] if loop["line"] == line)


def test_a_bug_after_the_training_is_found_and_its_fix_passes(fixtures_dir):
    reports = _run_all(fixtures_dir, {
        "bug": ("after_training_bug.py", {"device": "sim", "max_steps": 5}),
        "fixed": ("after_training_fixed.py", {"device": "sim", "max_steps": 5,
                                              "against": "after_training_original.py"}),
    })

    bug = reports["bug"]
    numpy_line = _line_of(os.path.join(fixtures_dir, "after_training_bug.py"), ".argmax(1).numpy()")
    assert bug["verdict"] == "fail"
    [reason] = bug["reasons"]
    assert reason["rule"] == "CG107" and reason["where"] == {"file": "after_training_bug.py", "line": numpy_line}
    [run] = bug["runs"]
    assert run["status"] == "error" and run["steps"] == 5 and len(run["losses"]) == 5
    assert run["cap"]["reached"] and run["cap"]["ended"] == "error" and run["cap"]["lines_after_cap"] > 0
    assert f"after_training_bug.py:{numpy_line}" in to_text(bug)

    fixed = reports["fixed"]
    assert fixed["verdict"] == "pass", fixed["reasons"]
    original, migrated = fixed["runs"]
    assert original["losses"] == migrated["losses"] and len(original["losses"]) == 5
    for run, script in ((original, "after_training_original.py"), (migrated, "after_training_fixed.py")):
        path = os.path.join(fixtures_dir, script)
        cap = run["cap"]
        assert run["status"] == "max_steps" and run["steps"] == 5
        assert cap["reached"] and cap["ended"] == "end" and cap["at"]["line"] == _line_of(path, "optimizer.step()")
        train = _loop(run, _line_of(path, "in train_loader:"))
        # three epochs: the cap ends the first pass at its next batch, and the epoch loop, in which a step
        # ran, at its next epoch: the code after the training runs at once
        assert train["role"] == "training" and train["passes"] == 1 and train["steps"] == 5
        assert train["passes_after_cap"] == 0 and train["batches_after_cap"] == 0 and train["skipped_steps"] == 0
        test = _loop(run, _line_of(path, "in test_loader:"))
        # the evaluation after the training gets a few of its four batches
        assert test["role"] == "evaluation" and test["steps"] == 0 and test["batches"] == EVAL_BATCHES
        # the evaluation's lines and the last print ran
        assert cap["lines_after_cap"] >= 8

    text = to_text(fixed)
    assert "verdict: PASS" in text and "the script then ran to its end" in text
    [cov] = fixed["coverage"]
    assert cov["run"] == "migrated (sim)" and cov["ran"] == cov["reached"] > 20
    assert f"every line ran: {cov['ran']} of {cov['ran']} lines that original (cpu) ran were run in migrated (sim)" in text
    test_line = _line_of(os.path.join(fixtures_dir, "after_training_fixed.py"), "in test_loader:")
    assert f"after_training_fixed.py:{test_line}  evaluation" in text
    assert '"cap"' in to_json(fixed)


@pytest.mark.slow  # several verify runs, ~17 s
def test_every_training_loop_ends_at_the_cap_and_the_code_after_it_runs(fixtures_dir):
    reports = _run_all(fixtures_dir, {
        "tensors": ("linreg_migrated.py", {"device": "cpu", "max_steps": 5}),
        "while": ("while_training.py", {"device": "cpu", "max_steps": 5}),
        "epochs": ("after_training_many_epochs.py", {"device": "cpu", "max_steps": 2}),
        "while epochs": ("after_training_endless_while.py", {"device": "cpu", "max_steps": 2}),
        "short": ("linreg_migrated.py", {"device": "cpu", "max_steps": 500}),
    })
    for rep in reports.values():
        assert rep["verdict"] == "pass", rep["reasons"]

    # `for epoch in range(100)` over tensors: the loop ends at the cap and the code after it runs
    [run] = reports["tensors"]["runs"]
    assert run["status"] == "max_steps" and run["steps"] == 5 and len(run["losses"]) == 5
    assert run["cap"]["ended"] == "end" and run["cap"]["lines_after_cap"] > 0
    assert "could not be run dry" not in to_text(reports["tensors"])

    # a `while` training loop ends at its next test once the cap is reached, and the code after it runs
    [run] = reports["while"]["runs"]
    assert run["status"] == "max_steps" and run["steps"] == 5 and len(run["losses"]) == 5
    assert run["cap"]["ended"] == "end" and run["cap"]["lines_after_cap"] > 0 and run["cap"]["skipped_steps"] == 0

    # `for epoch in range(100000)` around a DataLoader: the epoch loop, in which a step ran, ends at its
    # next epoch, and the code after it runs
    [run] = reports["epochs"]["runs"]
    assert run["status"] == "max_steps" and run["steps"] == 2 and len(run["losses"]) == 2
    assert run["cap"]["ended"] == "end" and run["cap"]["skipped_steps"] == 0
    assert run["cap"]["lines_after_cap"] > 0 and "the code after the training did not run" not in to_text(
        reports["epochs"])

    # the same epochs in a `while` loop: ended the same way
    [run] = reports["while epochs"]["runs"]
    assert run["status"] == "max_steps" and run["steps"] == 2 and len(run["losses"]) == 2
    assert run["cap"]["ended"] == "end" and run["cap"]["lines_after_cap"] > 0

    # a script shorter than the cap runs as without it
    [run] = reports["short"]["runs"]
    assert run["status"] == "ok" and run["steps"] == 100 and not run["cap"]["reached"]


@pytest.mark.slow  # the after-training path keeps its DataLoader case in the default tier
def test_a_bug_after_a_loop_over_range_is_found(tmp_path):
    """`for step in range(400)` with optimizer steps, then a .numpy() of a device tensor: the loop
    ends at the cap and the bug after it fails the verdict (it used to pass, never reached)."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "model = torch.nn.Linear(3, 1).to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "x = torch.randn(16, 3, device=device)\n"
        "for step in range(400):\n"
        "    opt.zero_grad()\n"
        "    loss = model(x).pow(2).mean()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "print(model(x).detach().numpy().shape)\n")
    report = verify(str(script), device="sim", max_steps=3, cwd=str(tmp_path), timeout=HANG_GUARD_S)
    assert report["verdict"] == "fail"
    assert [r["rule"] for r in report["reasons"]] == ["CG107"]
    assert report["reasons"][0]["where"]["line"] == 11


def test_a_loader_in_enumerate_is_still_its_own_pass(tmp_path):
    """`for i, (x, y) in enumerate(loader)`: the loop's iterable is wrapped to cap it, and the DataLoader
    inside still counts its pass as the training loop (its steps, its one batch per later epoch)."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "model = torch.nn.Linear(3, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(TensorDataset(torch.randn(32, 3), torch.randn(32, 1)), batch_size=4)\n"
        "for epoch in range(3):\n"
        "    for i, (x, y) in enumerate(loader):\n"
        "        opt.zero_grad()\n"
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n"
        "        opt.step()\n"
        "print('done', epoch)\n")
    report = verify(str(script), device="cpu", max_steps=3, cwd=str(tmp_path), timeout=HANG_GUARD_S)
    assert report["verdict"] == "pass", report["reasons"]
    [run] = report["runs"]
    [train] = run["cap"]["loops"]
    assert train["line"] == 7 and train["role"] == "training" and train["steps"] == 3
    assert train["passes"] == 1 and train["skipped_steps"] == 0  # the epoch loop ends at its next epoch
    assert run["cap"]["ended"] == "end" and run["cap"]["lines_after_cap"] > 0


def test_the_help_says_the_code_after_the_training_runs():
    out = CliRunner().invoke(verify_cmd, ["--help"]).output
    assert "--max-steps" in out and "after the training" in out
