"""The loss comparison (pure Python: no torch, no child process)."""

import math

import pytest

from cpu2gpu.runtime.judge.compare import batching_differs, compare, step_by_step, trend

pytestmark = pytest.mark.runtime


def test_step_by_step_reports_the_first_step_where_they_part():
    ref = [2.0, 1.5, 1.0, 0.5]
    other = [2.0, 1.5 * (1 + 1e-7), 1.1, 0.4]
    res = step_by_step(ref, other, rtol=1e-5)
    assert not res["ok"] and res["first_divergence"]["step"] == 3
    assert math.isclose(res["max_rel_diff"], 0.2)
    assert step_by_step(ref, list(ref), rtol=0)["ok"]


def test_nan_in_one_run_only_is_a_difference():
    assert not step_by_step([1.0, 0.5], [1.0, float("nan")], rtol=1e-5)["ok"]
    assert step_by_step([1.0, float("nan")], [1.0, float("nan")], rtol=1e-5)["ok"]


def test_trend_accepts_other_random_numbers_but_not_a_run_that_does_not_learn():
    ref = [1.0 * 0.9**i for i in range(40)]
    noisy = [1.3 * 0.9**i * (1 + 0.05 * (-1) ** i) for i in range(40)]  # other start, same learning
    flat = [1.0] * 40
    assert trend(ref, noisy)["ok"]
    assert not trend(ref, flat)["ok"]
    assert not trend(ref, list(reversed(ref)))["ok"]


def test_device_rng_runs_are_compared_by_trend():
    ref = {"losses": [1.0, 0.5, 0.25], "device_rng": False, "mode": "cpu"}
    dev = {"losses": [1.1, 0.6, 0.27], "device_rng": True, "mode": "sim"}
    res = compare(ref, dev)
    assert res["method"] == "trend" and res["ok"] and "device RNG" in res["note"]
    res = compare(ref, dict(dev, device_rng=False))
    assert res["method"] == "step" and not res["ok"] and res["first_divergence"]["step"] == 1


def test_trend_of_a_few_noisy_steps_that_hardly_move_is_where_they_end():
    """Five capped steps of a noisy loss (a diffusion loss with device-side draws): the reference
    moved down by 1%, the other up by 1%, both end at the same place: not a divergence."""
    ref = [0.91, 0.90, 0.92, 0.89, 0.90]
    other = [0.89, 0.91, 0.90, 0.92, 0.899]
    assert trend(ref, other)["ok"]
    # a run that ends far away still fails, and so does one that rises while the reference learns
    assert not trend(ref, [0.9, 1.1, 1.3, 1.5, 1.8])["ok"]
    assert not trend([1.0, 0.8, 0.6, 0.4, 0.2], [1.0, 1.0, 1.0, 1.0, 1.0])["ok"]


def test_a_run_of_another_random_problem_beside_a_reference_that_hardly_moved_is_not_a_divergence():
    """A few capped steps of a regression whose target is drawn on the device: the original rose 10%
    (noise), the migration, fitting another target, fell from 7 to 3.4. Nothing shows a divergence:
    accepted, and marked as not compared; a run that rises by far still fails."""
    ref = [2.0, 1.8, 2.6, 2.2]
    other = [7.0, 9.5, 5.0, 3.4]
    res = trend(ref, other)
    assert res["ok"] and res["reference_flat"]
    assert not trend(ref, [7.0, 12.0, 20.0, 33.0])["ok"]
    # a reference that learns is still held to: the same run beside it, flat, fails
    assert not trend([40.0, 20.0, 10.0, 5.0], [43.1, 43.0, 43.2, 43.1])["ok"]
    assert not trend([0.91, 0.90, 0.92, 0.89, 0.90], [0.89, 0.91, 0.90, 0.92, 0.899])["reference_flat"]


def test_the_step_tolerance_grows_with_the_step():
    """A rounding apart at the start, carried on by training: 9.8e-05 at step 13 is within 13 x 1e-5;
    the same difference at step 2 is not; a placement bug's difference is not at any step."""
    ref = [1.0 - 0.05 * i for i in range(13)]
    drift = [r * (1 + 9.8e-5 * (i + 1) / 13) for i, r in enumerate(ref)]
    res = step_by_step(ref, drift, rtol=1e-5)
    assert res["ok"] and res["tolerance_grew"]
    early = list(ref)
    early[1] *= 1 + 9.8e-5
    res = step_by_step(ref, early, rtol=1e-5)
    assert not res["ok"] and res["first_divergence"]["step"] == 2
    assert math.isclose(res["first_divergence"]["tolerance"], 2e-5)
    assert not step_by_step(ref, [r * 1.01 for r in ref], rtol=1e-5)["ok"]
    assert step_by_step(ref, list(ref), rtol=1e-5)["tolerance_grew"] is False


def test_a_loader_made_otherwise_on_the_device_is_compared_by_trend():
    """The script shuffles only on the accelerator: its device run trains on other batches."""
    loader = {"file": "main.py", "line": 9, "sampler": "SequentialSampler", "batch_size": 8, "drop_last": False,
              "batch_sampler": "BatchSampler"}
    ref = {"losses": [1.0, 0.5, 0.25], "loaders": [loader], "mode": "cpu"}
    dev = {"losses": [1.1, 0.6, 0.27], "loaders": [dict(loader, sampler="RandomSampler")], "mode": "sim"}
    assert batching_differs(ref, dev) == {"file": "main.py", "line": 9, "what": "sampler",
                                          "reference": "SequentialSampler", "value": "RandomSampler"}
    res = compare(ref, dev)
    assert res["method"] == "trend" and res["ok"] and "main.py:9" in res["note"]
    # made alike: step by step, where the same difference fails
    res = compare(ref, dict(dev, loaders=[loader]))
    assert res["method"] == "step" and not res["ok"]

