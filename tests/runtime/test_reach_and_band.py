"""The parts of the proof that are pure functions: the lines carried over to the migrated files, the measured
band widening the step tolerance, the paired test of a real GPU's runs."""

import math

import pytest

from cpu2gpu.runtime.judge import compare, reach

ORIGINAL = """import torch
model = Net()
x = torch.randn(4, 3)
if torch.cuda.is_available():
    print("on the GPU")
else:
    print("on the CPU")
for step in range(3):
    loss = model(x).sum()
print("done")
""".splitlines()

MIGRATED = """import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
x = torch.randn(4, 3, device=device)
if torch.cuda.is_available():
    print("on the GPU")
else:
    print("on the CPU")
for step in range(3):
    loss = model(x).sum()
print("done")
""".splitlines()


def test_the_originals_lines_map_to_the_migrated_ones_changed_lines_included():
    mapping = reach.line_map(ORIGINAL, MIGRATED)
    assert mapping[1] == (1,)  # unchanged
    assert mapping[2] == (4,) and mapping[3] == (5,)  # changed in place by the rewrite
    assert mapping[10] == (12,)


def test_branches_on_the_device_are_set_aside():
    assert reach.device_branch_lines(ORIGINAL) == {5, 7}
    assert reach.device_branch_lines(["if args.cuda:", "    model.cuda()", "if epoch > 3:", "    pass"]) == {2}
    assert reach.device_branch_lines(["def broken(:"]) == set()


def _run(script, lines, text):
    return {"script_shown": script, "lines": {script: lines}, "sources": {script: text},
            "in_root": {script: script}}


def test_every_line_the_original_ran_must_run_in_the_migration():
    ref = _run("orig.py", [1, 2, 3, 4, 7, 8, 9, 10], ORIGINAL)  # on the CPU: the else branch
    ok = _run("mig.py", [1, 3, 4, 5, 6, 7, 10, 11, 12], MIGRATED)  # on the device: the if branch
    cov = reach.reached(ref, ok)
    assert cov == {"ran": 7, "reached": 7, "missing": [], "missing_count": 0, "set_aside": 1}

    skipped = _run("mig.py", [1, 3, 4, 5, 6, 7, 10, 11], MIGRATED)  # never reached the last print
    cov = reach.reached(ref, skipped)
    assert cov["missing_count"] == 1 and cov["reached"] == 6
    assert cov["missing"] == [{"file": "mig.py", "line": 12, "original_line": 10, "source": 'print("done")'}]


def test_a_helper_file_in_another_folder_is_paired_by_its_place_in_the_copy():
    ref = {"script_shown": "/src/orig/main.py", "lines": {"/src/orig/main.py": [1], "/src/orig/model.py": [1, 2]},
           "sources": {}, "in_root": {"/src/orig/main.py": "main.py", "/src/orig/model.py": "model.py"}}
    other = {"script_shown": "main.py", "lines": {"main.py": [1], "model.py": [1, 2]}, "sources": {},
             "in_root": {"main.py": "main.py", "model.py": "model.py"}}
    assert reach.reached(ref, other)["missing_count"] == 0
    assert reach.reached(ref, dict(other, lines={"main.py": [1]}))["missing_count"] == 2
    assert reach.reached({"lines": {}}, other) is None


def test_the_measured_band_widens_the_step_tolerance():
    ref = [2.0, 1.5, 1.2, 1.0, 0.9]
    other = [2.0, 1.5, 1.2002, 1.001, 0.903]  # parts by 1.7e-4, 1e-3, 3.3e-3
    fixed = compare.step_by_step(ref, other, 1e-5)
    assert not fixed["ok"] and fixed["first_divergence"]["step"] == 3
    band = [0.0, 1e-7, 5e-5, 2e-4, 4e-4]  # the original against itself, last bits perturbed
    measured = compare.step_by_step(ref, other, 1e-5, band=band)
    assert measured["ok"] and measured["band"] == {"max": 4e-4, "factor": compare.BAND_FACTOR, "used": True}
    # a divergence far beyond what rounding makes still fails
    assert not compare.step_by_step(ref, [2.0, 1.5, 1.3, 1.1, 1.0], 1e-5, band=band)["ok"]
    # a band that stays under the constant changes nothing
    quiet = compare.step_by_step(ref, ref, 1e-5, band=[0.0] * 5)
    assert quiet["ok"] and quiet["band"]["used"] is False


def test_a_real_gpu_run_with_its_own_random_numbers_gets_a_paired_test():
    ref = [1.0 - 0.02 * k for k in range(12)]
    noisy = [x + (0.003 if k % 2 else -0.003) for k, x in enumerate(ref)]
    res = compare.compare({"losses": ref}, {"losses": noisy, "mode": "cuda", "device_rng": True})
    assert res["method"] == "paired" and res["ok"] and abs(res["paired"]["t"]) < compare.PAIRED_T
    shifted = [x + 0.3 for x in ref]  # the same slope, a third higher all along: a real difference
    res = compare.compare({"losses": ref}, {"losses": shifted, "mode": "cuda", "device_rng": True})
    assert res["method"] == "paired" and not res["ok"] and res["paired"]["t"] > compare.PAIRED_T
    short = compare.compare({"losses": ref[:4]}, {"losses": shifted[:4], "mode": "cuda", "device_rng": True})
    assert short["paired"] is None and "8 steps or more" in short["note"]
    # the simulated device mirrors its draws: no device RNG there, step by step
    sim = compare.compare({"losses": ref}, {"losses": ref, "mode": "sim", "mirrored_draws": 5})
    assert sim["method"] == "step" and sim["mirrored_draws"] == 5 and "mirrored" in sim["note"]


def test_the_band_is_the_relative_divergence_step_by_step():
    band = pytest.importorskip("cpu2gpu.runtime.steps.band")
    assert band.measure([1.0, 2.0, 0.0], [1.0, 2.002, 0.0]) == [0.0, pytest.approx(0.002 / 2.002), 0.0]
    assert band.measure([float("nan")], [1.0]) == [math.inf]


def test_the_cells_of_an_entry_notebook_pair_with_the_other_notebooks_cells():
    ref = {"script_shown": "orig.ipynb", "lines": {"orig.ipynb:cell 2": [1, 2]}, "sources": {},
           "in_root": {"orig.ipynb:cell 2": "orig.ipynb:cell 2"}}
    other = {"script_shown": "mig.ipynb", "lines": {"mig.ipynb:cell 2": [1, 2]}, "sources": {},
             "in_root": {"mig.ipynb:cell 2": "mig.ipynb:cell 2"}}
    assert reach.reached(ref, other)["missing_count"] == 0


def test_a_notebooks_cells_match_the_script_made_of_them():
    """verify mlp.py --against mlp.ipynb: the original's cells, one after the other, are the script's text."""
    cells = {"nb.ipynb:cell 1": ["import torch", "x = torch.ones(2)"], "nb.ipynb:cell 2": ["y = x * 2", "print(y)"]}
    ref = {"script_shown": "nb.ipynb", "lines": {"nb.ipynb:cell 1": [1, 2], "nb.ipynb:cell 2": [1, 2]},
           "sources": cells, "in_root": {}}
    script = ["import torch", "device = 'cpu'", "x = torch.ones(2, device=device)", "y = x * 2", "print(y)"]
    other = {"script_shown": "nb.py", "lines": {"nb.py": [1, 2, 3, 4, 5]}, "sources": {"nb.py": script},
             "in_root": {}}
    assert reach.reached(ref, other)["missing_count"] == 0
    cov = reach.reached(ref, dict(other, lines={"nb.py": [1, 2, 3]}))  # the second cell's lines never ran
    assert cov["ran"] == 4 and [(m["file"], m["line"]) for m in cov["missing"]] == [("nb.py", 4), ("nb.py", 5)]


def test_a_guard_the_migration_put_around_a_cuda_call_sets_its_line_aside():
    """`torch.cuda.manual_seed(s)` guarded by the rewrite (CG204): the CPU fallback skips it by design."""
    old = ["import torch", "torch.manual_seed(1)", "torch.cuda.manual_seed(1)"]
    new = ["import torch", "torch.manual_seed(1)", "if torch.cuda.is_available():", "    torch.cuda.manual_seed(1)"]
    ref = {"script_shown": "a.py", "lines": {"a.py": [1, 2, 3]}, "sources": {"a.py": old}, "in_root": {}}
    cpu = {"script_shown": "b.py", "lines": {"b.py": [1, 2, 3]}, "sources": {"b.py": new}, "in_root": {}}
    cov = reach.reached(ref, cpu)
    assert cov["missing_count"] == 0 and cov["set_aside"] == 1 and cov["ran"] == 2
