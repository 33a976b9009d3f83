"""cpu2gpu verify on the CPU and the simulated CUDA device (no GPU needed).

Each test starts its children at once (threads over independent runs), and
the runs are small (--max-steps), because every child imports torch.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge import runner  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime
WORKERS = max(2, os.cpu_count() or 1)


def run_all(fixtures_dir, cases):
    """cases: {name: (script, kwargs)} -> {name: report}, all at once."""

    def one(item):
        name, (script, kw) = item
        kw = dict(kw)
        if kw.get("against"):
            kw["against"] = os.path.join(fixtures_dir, kw["against"])
        kw.setdefault("timeout", HANG_GUARD_S)
        return name, verify(os.path.join(fixtures_dir, script), cwd=fixtures_dir, **kw)

    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(pool.map(one, cases.items()))


def run_of(report, label):
    return next(r for r in report["runs"] if r["label"] == label)


def comparison(report, label):
    return next(c for c in report["comparisons"] if c["run"] == label)


def test_sim_device_refuses_what_cuda_refuses_and_computes_the_same(fixtures_dir):
    out = subprocess.run([sys.executable, os.path.join(fixtures_dir, "sim_semantics.py")],
                         capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=fixtures_dir)
    lines = out.stdout.splitlines()
    failed = [ln for ln in lines if ln.startswith("FAIL")]
    assert out.returncode == 0 and not failed, out.stdout + out.stderr[-3000:]
    assert len([ln for ln in lines if ln.startswith("ok ")]) >= 25


def test_correct_migrations_verify(fixtures_dir):
    reports = run_all(fixtures_dir, {
        "linreg": ("linreg_migrated.py", {"against": "linreg_original.py", "jobs": 3}),
        "cnn": ("cnn_migrated.py", {"against": "cnn_original.py", "jobs": 3, "max_steps": 6}),
        "dropout": ("dropout_migrated.py", {"against": "dropout_original.py", "jobs": 3, "max_steps": 30}),
    })
    for name, rep in reports.items():
        assert rep["verdict"] == "pass", (name, rep["reasons"], [r.get("exception") for r in rep["runs"]])
        assert [r["label"] for r in rep["runs"]] == ["original (cpu)", "migrated (sim)", "migrated (cpu)"]

    linreg = reports["linreg"]
    original = run_of(linreg, "original (cpu)")
    assert original["steps"] == 100 and len(original["losses"]) == 100
    assert original["losses"][-1] < original["losses"][0] / 10  # it learns
    # The CPU fallback of a correct script gives exactly the original losses.
    assert run_of(linreg, "migrated (cpu)")["losses"] == original["losses"]
    assert comparison(linreg, "migrated (cpu)")["max_rel_diff"] == 0
    sim_cmp = comparison(linreg, "migrated (sim)")
    assert sim_cmp["method"] == "step" and sim_cmp["ok"] and sim_cmp["compared"] == 100
    sim_run = run_of(linreg, "migrated (sim)")
    model = next(m for m in sim_run["modules"] if m["name"] == "model")
    assert model["class"] == "LinearRegression" and model["device_calls"] == 100
    # trained on the device; the final prediction runs on the CPU, as the script says
    assert model["param_devices"] == ["cpu", "cuda:0"] and model["input_devices"] == ["cpu", "cuda:0"]

    cnn = reports["cnn"]
    for label in ("original (cpu)", "migrated (sim)", "migrated (cpu)"):
        assert run_of(cnn, label)["status"] == "max_steps" and run_of(cnn, label)["steps"] == 6
    assert run_of(cnn, "migrated (cpu)")["losses"] == run_of(cnn, "original (cpu)")["losses"]
    assert comparison(cnn, "migrated (sim)")["max_rel_diff"] <= 1e-5

    # Dropout on the simulated device draws from the CPU generator, as the original does (mirrored):
    # the same numbers, compared step by step, and said so.
    drop = comparison(reports["dropout"], "migrated (sim)")
    assert drop["method"] == "step" and drop["ok"] and drop["mirrored_draws"] > 0 and "mirrored" in drop["note"]
    assert run_of(reports["dropout"], "migrated (sim)")["losses"] == run_of(reports["dropout"], "original (cpu)")["losses"]
    assert comparison(reports["dropout"], "migrated (cpu)")["method"] == "step"
    # every line the original ran also ran on the device and on the CPU fallback
    for rep in reports.values():
        assert {c["run"] for c in rep["coverage"]} == {"migrated (sim)", "migrated (cpu)"}
        assert all(c["ran"] > 0 and c["reached"] == c["ran"] and not c["missing"] for c in rep["coverage"])


MISTAKES = {
    # name: (script, device, rule, words in the cause, line)
    "model not moved": ("mistake_model_not_moved.py", "sim", "CG101", "model (LinearRegression) stayed on the CPU", 27),
    "labels not moved": ("mistake_labels_not_moved.py", "sim", "CG103", "labels stayed on the CPU", 44),
    "numpy without cpu": ("mistake_numpy.py", "sim", "CG107", "reached .numpy()", 34),
    "move-back step": ("mistake_move_back.py", "sim", "CG108", "moved back to the CPU", 35),
    "cpu loss weight": ("mistake_loss_weight.py", "sim", "CG106", "loss weight criterion.weight", 45),
    "rnn hidden state": ("mistake_rnn_hidden.py", "sim", "CG104", "h0 was created on the CPU in CharRNN.forward()", 18),
    "plain tensor attribute": ("mistake_plain_attribute.py", "sim", "CG105", "self.mask is a plain tensor attribute", 16),
    "hard-coded cuda": ("mistake_hardcoded_cuda.py", "cpu", "CG201", "requires CUDA", 5),
    "never on the device": ("linreg_original.py", "sim", "CG101", "no module ran on the device", None),
}


# The default tier's mistakes (both whose error message is checked below, the CPU device, a run
# that never reaches the device); the slow tier takes the others.
DEFAULT_MISTAKES = ("labels not moved", "rnn hidden state", "hard-coded cuda", "never on the device")


@pytest.mark.parametrize("names", [
    pytest.param(DEFAULT_MISTAKES, id="default"),
    pytest.param(tuple(name for name in MISTAKES if name not in DEFAULT_MISTAKES), id="others",
                 marks=pytest.mark.slow),
])
def test_classic_mistakes_fail_with_the_right_message(fixtures_dir, names):
    reports = run_all(fixtures_dir, {
        name: (script, {"device": device}) for name, (script, device, *_ ) in MISTAKES.items() if name in names
    })
    problems = []
    for name in names:
        script, device, rule, words, line = MISTAKES[name]
        rep = reports[name]
        reasons = rep["reasons"]
        if rep["verdict"] != "fail" or not reasons:
            problems.append(f"{name}: verdict {rep['verdict']}")
            continue
        r = reasons[0]
        if r["rule"] != rule or words not in r["cause"]:
            problems.append(f"{name}: got {r['rule']} {r['cause']!r}")
        if line is not None:
            where = r.get("where") or {}
            if where.get("line") != line or not where.get("file", "").endswith(script):
                problems.append(f"{name}: located at {where}")
            if f"{script}:{line}" not in r["cause"]:
                problems.append(f"{name}: cause does not say {script}:{line}: {r['cause']!r}")
    assert not problems, "\n".join(problems)
    if "labels not moved" in names:
        # The error itself is the one real CUDA gives.
        exc = run_of(reports["labels not moved"], "migrated (sim)")["exception"]
        assert exc["message"].startswith(
            "Expected all tensors to be on the same device, but found at least two devices")
        exc = run_of(reports["rnn hidden state"], "migrated (sim)")["exception"]
        assert "Input and hidden tensors are not at the same device" in exc["message"]


@pytest.mark.slow  # waits out a 20 s timeout
def test_hang_is_stopped_and_an_error_is_reported(fixtures_dir):
    reports = run_all(fixtures_dir, {
        "hang": ("hang.py", {"device": "cpu", "timeout": 20}),
        "crash": ("crash.py", {"device": "cpu"}),
    })
    hang = run_of(reports["hang"], "migrated (cpu)")
    assert reports["hang"]["verdict"] == "fail" and hang["status"] == "timeout"
    assert hang["wall_seconds"] < 60 and hang["steps"] == 1
    cause = reports["hang"]["reasons"][0]["cause"]
    assert "did not finish within 20 s" in cause and "hang.py:11" in cause

    crash = run_of(reports["crash"], "migrated (cpu)")
    assert reports["crash"]["verdict"] == "fail" and crash["status"] == "error" and crash["steps"] == 2
    assert crash["exception"]["type"] == "KeyError" and crash["exception"]["line"] == 11
    assert "KeyError" in reports["crash"]["reasons"][0]["cause"]


def test_runs_work_in_a_copy_and_never_modify_the_scripts_files(fixtures_dir, tmp_path, monkeypatch):
    src = tmp_path / "project"
    src.mkdir()
    (src / "train.py").write_text(open(os.path.join(fixtures_dir, "writes_files.py")).read())
    (src / "data.bin").write_bytes(b"x" * 300)
    (src / "log.txt").write_text("original\n")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    monkeypatch.setattr(runner, "LINK_OVER_BYTES", 100)  # data.bin is linked, not copied

    rep = verify(str(src / "train.py"), device="cpu", cwd=str(src), timeout=HANG_GUARD_S)

    assert rep["verdict"] == "pass", rep["reasons"]
    run = rep["runs"][0]
    assert f"cwd {src}" not in run["stdout_tail"] and "cwd " in run["stdout_tail"]
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


def test_cli_exit_codes_and_json(fixtures_dir, monkeypatch):
    from click.testing import CliRunner

    from cpu2gpu.runtime.cli import verify as verify_cmd

    monkeypatch.chdir(fixtures_dir)
    cli = CliRunner()

    def invoke(args):
        return cli.invoke(verify_cmd, args)

    with ThreadPoolExecutor(1) as pool:  # CliRunner swaps sys.stdout: one at a time
        ok = pool.submit(invoke, ["linreg_migrated.py", "--device", "sim", "--max-steps", "5", "--output-format", "json"]).result()
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert data["verdict"] == "pass" and data["reasons"] == []
    run = data["runs"][0]
    for key in ("label", "mode", "device", "status", "steps", "first_loss", "last_loss", "max_rel_diff",
                "ms_per_step", "losses", "modules", "events", "exception", "device_forward_calls"):
        assert key in run, key
    assert run["steps"] == 5 and run["mode"] == "sim" and len(run["losses"]) == 5

    bad = invoke(["mistake_numpy.py", "--device", "sim"])
    assert bad.exit_code == 1
    assert "verdict: FAIL" in bad.output and "CG107" in bad.output and "mistake_numpy.py:34" in bad.output

    assert invoke(["no_such_script.py", "--device", "sim"]).exit_code == 2
    assert invoke(["linreg_migrated.py", "--device", "tpu"]).exit_code == 2

    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    missing = cli.invoke(verify_cmd, ["linreg_migrated.py"])
    assert missing.exit_code == 2 and "pip install 'cpu2gpu[runtime]'" in missing.output


LINKED = ("ckpt.pt", "arr.npy", "raw.bin", "log.bin", "copied.bin", "path.bin", "shell.bin")


def _project_with_large_files(fixtures_dir, tmp_path):
    src = tmp_path / "project"
    src.mkdir()
    (src / "train.py").write_text(open(os.path.join(fixtures_dir, "writes_linked_files.py")).read())
    for i, name in enumerate(LINKED):
        (src / name).write_bytes(bytes([i + 1]) * 4096)
    return src


def test_writers_never_reach_the_originals_of_linked_files(fixtures_dir, tmp_path, monkeypatch):
    pytest.importorskip("numpy")
    src = _project_with_large_files(fixtures_dir, tmp_path)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in src.iterdir()}
    monkeypatch.setattr(runner, "LINK_OVER_BYTES", 1000)  # every data file is large
    monkeypatch.setattr(runner, "clone_file", lambda s, t: False)  # as on a file system without reflinks

    rep = verify(str(src / "train.py"), device="cpu", cwd=str(src), timeout=HANG_GUARD_S)

    run = rep["runs"][0]
    assert run["status"] == "ok", (run["exception"], run["stderr_tail"])
    assert "wrote everything" in run["stdout_tail"]
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in src.iterdir()} == before


def test_a_write_into_the_original_folder_is_refused(fixtures_dir, tmp_path, monkeypatch):
    pytest.importorskip("numpy")
    src = _project_with_large_files(fixtures_dir, tmp_path)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    monkeypatch.setenv("CPU2GPU_TEST_ORIGINAL", str(src))

    rep = verify(str(src / "train.py"), device="cpu", cwd=str(src), timeout=HANG_GUARD_S)

    run = rep["runs"][0]
    assert rep["verdict"] == "fail" and run["exception"]["type"] == "PermissionError"
    assert "may not write into the original folder" in run["exception"]["message"]
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before


def test_the_parent_sees_a_linked_original_that_changed(tmp_path):
    src, work = tmp_path / "src", tmp_path / "work"
    src.mkdir()
    (src / "big.bin").write_bytes(b"a" * 100)
    (src / "small.txt").write_text("s")
    import unittest.mock as mock
    with mock.patch.object(runner, "LINK_OVER_BYTES", 50), mock.patch.object(runner, "clone_file", lambda s, t: False):
        linked = runner.copy_tree(str(src), str(work))
    assert [path for path, _, _ in linked] == [str(src / "big.bin")]
    assert (work / "big.bin").is_symlink() and not (work / "small.txt").is_symlink()
    assert runner.changed_originals(linked) == []
    (src / "big.bin").write_bytes(b"b" * 10)  # as a native writer would, through the link
    assert runner.changed_originals(linked) == [str(src / "big.bin")]
