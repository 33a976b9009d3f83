"""Proven means proven: every line the original ran also ran on the device, the device's random numbers are
the original's, and the tolerance is the original's own sensitivity to rounding (fixtures/runtime/proven/)."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from cpu2gpu.runtime.cli import verify as verify_cmd  # noqa: E402
from cpu2gpu.runtime.report.report import to_text  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime


def _proven(fixtures_dir):
    return os.path.join(fixtures_dir, "proven")


def _line_of(path, text, nth=0):
    with open(path) as f:
        return [i for i, line in enumerate(f, 1) if text in line][nth]


def _verify(folder, script, against, **kw):
    kw.setdefault("device", "sim")
    return verify(os.path.join(folder, script), against=os.path.join(folder, against), cwd=folder,
                  timeout=HANG_GUARD_S, **kw)


def test_the_evaluation_after_nested_training_loops_runs_and_its_bug_fails(fixtures_dir):
    """Two optimizers step after an inner loop over the target's tokens: the loop over the iterations
    drives them, ends at the cap, and the evaluation after the training runs; its start token left on
    the CPU fails the verdict at its line (it used to be 'PASS up to' the training loop)."""
    folder = _proven(fixtures_dir)
    report = _verify(folder, "seq2seq_missed.py", "seq2seq_original.py", max_steps=3, jobs=2)
    assert report["verdict"] == "fail"
    [reason] = report["reasons"]
    # where the token left on the CPU meets the decoder on the device, in the evaluation's decoding loop
    line = _line_of(os.path.join(folder, "seq2seq_missed.py"), "output, hidden = decoder(token, hidden)", nth=1)
    assert reason["rule"] == "CG102" and reason["where"] == {"file": "seq2seq_missed.py", "line": line}
    original, migrated = report["runs"]
    assert original["cap"]["ended"] == "end" and original["status"] == "max_steps"
    assert migrated["cap"]["ended"] == "error"


@pytest.mark.slow
def test_nested_training_loops_with_every_line_run_pass(fixtures_dir):
    folder = _proven(fixtures_dir)
    report = _verify(folder, "seq2seq_migrated.py", "seq2seq_original.py", max_steps=3, jobs=2)
    assert report["verdict"] == "pass", report["reasons"]
    [cov] = report["coverage"]
    assert cov["ran"] == cov["reached"] and cov["ran"] > 40 and cov["missing"] == []
    # the evaluation's lines are among them: the decoding loop ran on the device
    assert "every line ran" in to_text(report)


@pytest.mark.slow
def test_lines_the_original_ran_and_the_device_run_skipped_are_not_proven(fixtures_dir):
    """The report after the training fails on the device inside a broad `except`: the run ends well and
    learns alike, but the report's last lines never ran there: UNPROVEN (exit 1), naming them."""
    folder = _proven(fixtures_dir)
    report = _verify(folder, "swallowed_migrated.py", "swallowed_original.py", max_steps=5, jobs=2)
    assert report["verdict"] == "unproven"
    [reason] = report["reasons"]
    assert reason["unproven"] and "did not run in migrated (sim)" in reason["cause"]
    path = os.path.join(folder, "swallowed_migrated.py")
    printed = _line_of(path, 'print(f"weighted score')
    [cov] = report["coverage"]
    assert cov["missing_count"] == 3 and printed in [m["line"] for m in cov["missing"]]
    assert cov["reached"] == cov["ran"] - 3
    text = to_text(report)
    assert "verdict: UNPROVEN" in text and f"swallowed_migrated.py:{printed}" in text

    runner = CliRunner()
    result = runner.invoke(verify_cmd, [path, "--against", os.path.join(folder, "swallowed_original.py"),
                                        "--device", "sim", "--max-steps", "5", "-q"])
    assert result.exit_code == 1, result.output


@pytest.mark.slow
def test_a_run_the_cap_had_to_stop_is_not_proven(tmp_path):
    """Training by recursion: no loop of the script drives the steps, so the cap must end the run at the
    step after it; the code after the training never ran: UNPROVEN, not 'PASS up to'."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(3, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "x = torch.randn(8, 3)\n"
        "def train(steps):\n"
        "    if steps == 0:\n"
        "        return\n"
        "    opt.zero_grad()\n"
        "    model(x).pow(2).mean().backward()\n"
        "    opt.step()\n"
        "    train(steps - 1)\n"
        "train(20)\n"
        "print(model(x).sum().item())\n")
    report = verify(str(script), device="cpu", max_steps=3, cwd=str(tmp_path), timeout=HANG_GUARD_S)
    assert report["verdict"] == "unproven"
    [reason] = report["reasons"]
    assert "had to stop at train.py:10" in reason["cause"] and "not proven" in reason["cause"]
    assert "verdict: UNPROVEN" in to_text(report)


@pytest.mark.slow
def test_noise_drawn_on_the_device_is_the_originals_and_compares_step_by_step(fixtures_dir):
    """A GAN's noise, `torch.randn(b, 2, device=device)` once migrated: the simulated device mirrors the CPU
    generator, so the losses are the original's, step by step, and the report says the draws were mirrored."""
    folder = _proven(fixtures_dir)
    report = _verify(folder, "gan_migrated.py", "gan_original.py", max_steps=10, jobs=2)
    assert report["verdict"] == "pass", report["reasons"]
    original, migrated = report["runs"]
    # two optimizers a step: 10 steps, 5 iterations, two losses each
    assert migrated["losses"] == original["losses"] and len(original["losses"]) == 10
    [c] = report["comparisons"]
    assert c["method"] == "step" and c["mirrored_draws"] >= 10 and "mirrored" in c["note"]
    assert "band" not in report  # equal losses: no second run of the original was needed


@pytest.mark.slow  # four runs of an LSTM, ~90 s
def test_an_rnn_within_the_measured_band_passes(fixtures_dir):
    """The simulated LSTM kernels sum in another order: over 30 hard steps the losses part by ~1e-2, far
    beyond k x rtol; the original run again with its last bits perturbed parts as far, and that band passes
    it. With the fixed tolerance alone (rtol given) the same runs fail."""
    folder = _proven(fixtures_dir)
    with ThreadPoolExecutor(2) as pool:
        measured, fixed = pool.map(lambda kw: _verify(folder, "rnn_band_migrated.py", "rnn_band_original.py",
                                                      jobs=1, **kw), [{}, {"rtol": 1e-5}])
    assert measured["verdict"] == "pass", measured["reasons"]
    band = measured["band"]
    assert band["status"] == "ok" and band["run"] == "original (cpu) again, last bits perturbed"
    assert len(band["values"]) == 30 and band["max"] > 1e-4
    [c] = measured["comparisons"]
    assert c["band"]["used"] and c["max_rel_diff"] > 30 * 1e-5
    assert "the band the original's own rounding makes" in to_text(measured)
    assert fixed["verdict"] == "fail" and "band" not in fixed


@pytest.mark.slow
def test_an_original_that_trains_nowhere_here_leaves_nothing_to_prove(fixtures_dir):
    """Its rows come from a file this folder lacks: the original ends well after 0 steps, and so does the
    device run. That is not a failed migration (no rule to blame), but no proof either: an error."""
    folder = _proven(fixtures_dir)
    rep = _verify(folder, "trains_nowhere.py", "trains_nowhere.py")
    assert rep["verdict"] == "error", rep["reasons"]
    (reason,) = rep["reasons"]
    assert reason["idle_original"] and reason["rule"] is None
    assert reason["cause"].startswith("the original trains nowhere here either (0 optimizer steps")
