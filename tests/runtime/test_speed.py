"""verify --speed on the fixtures of fixtures/speed (see its README): the counts of the device run per step (host
syncs and their lines, copies to the device and their bytes, the wait for batches), the first cause and its line,
no cause for the script that is already fast, and the hand-tuned twins against their plain versions.

Counts and structure only: the host times are this shared machine's, so no test holds a time to a number. The
estimate's arithmetic is tested with fixed numbers in tests/test_speed_model.py. The default tier runs two
fixtures (sync_bound, already_fast); the others are in the slow tier.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.migrate import migrate  # noqa: E402
from cpu2gpu.runtime.judge.verify import VerifyError, verify  # noqa: E402
from cpu2gpu.runtime.report.htmlreport import to_html  # noqa: E402
from cpu2gpu.runtime.report.report import to_json, to_text  # noqa: E402
from cpu2gpu.runtime.speed import findings, gpus  # noqa: E402

from ..conftest import HANG_GUARD_S, ROOT  # noqa: E402

pytestmark = pytest.mark.runtime
SPEED = os.path.join(ROOT, "fixtures", "speed")
_REPORTS: dict = {}


def speed_report(name: str, **kwargs):
    """verify --speed of fixtures/speed/<name>.py on the simulated device, once a session."""
    key = (name, tuple(sorted(kwargs.items())))
    if key not in _REPORTS:
        kwargs.setdefault("speed", True)
        _REPORTS[key] = verify(os.path.join(SPEED, f"{name}.py"), device="sim", cwd=SPEED, timeout=HANG_GUARD_S,
                               **kwargs)
    report = _REPORTS[key]
    assert report["verdict"] == "pass", (report["reasons"], [r.get("stderr_tail") for r in report["runs"]])
    return report


def lines_of(speed, kind):
    """{line: [(what, per step, bytes per step)]} of a run's lines of one kind (sync or copy)."""
    profile = speed["profile"]
    out: dict = {}
    for line in profile["lines"]:
        if line["kind"] == kind:
            out.setdefault(profile["places"][line["place"]]["line"], []).append(
                (line["what"], line["per_step"], line["bytes_per_step"]))
    return out


def section(report):
    speed = dict(report["speed"])
    speed["profile"] = report["runs"][0]["speed"]
    return speed


# -- the default tier: sync_bound, already_fast ------------------------------------------------------------


def test_sync_bound_syncs_five_times_a_step_at_its_four_lines_and_they_are_the_causes():
    report = speed_report("sync_bound")
    speed = section(report)
    assert speed["gpu"] == "H100 SXM" and speed["run"] == "migrated (sim)" and speed["steps"] == 20
    counts = speed["counts"]
    assert counts["syncs"] == 5 and counts["copies_in"] == 0 and counts["copies_out"] == 0
    assert counts["kernels"] > 10 and counts["allocations"] > 0
    # loss.item(); logits[keep] (a boolean mask); y[keep] and .item(); keep.sum().item()
    assert lines_of(speed, "sync") == {28: [("scalar", 1, 4)], 30: [("shape", 1, 8)],
                                       31: [("scalar", 1, 8), ("shape", 1, 8)], 32: [("scalar", 1, 8)]}
    causes = speed["causes"]
    assert {c["kind"] for c in causes} == {"sync"} and {c["line"] for c in causes} == {28, 30, 31, 32}
    first = causes[0]
    assert first["line"] == 31 and first["per_step"] == 2  # two syncs a step: the most
    assert first["file"].endswith("sync_bound.py") and "(pred == y[keep]).sum().item()" in first["source"]
    assert "synchronises every step" in first["what"] and first["fix"]
    est = speed["estimate"]
    assert est["gpu"] == "H100 SXM" and 0 < est["idle_fraction"] <= 1 and est["flops"] > 0
    assert speed["summary"].startswith("the GPU would idle ~") and "sync_bound.py:31" in speed["summary"]
    assert "an estimate" in speed["omits"] and "caching allocator" in speed["omits"]


def test_the_speed_section_in_json_text_and_html_and_none_without_speed():
    report = speed_report("sync_bound")
    shown = json.loads(to_json(report))
    assert set(shown["speed"]) >= {"run", "gpu", "counts", "estimate", "causes", "summary", "omits"}
    assert shown["settings"]["speed"] == "h100"
    assert "speed" not in shown["runs"][0]  # the run's profile stays out of the JSON report
    text = to_text(report)
    assert "speed, estimated for H100 SXM from migrated (sim)" in text
    assert "causes, by the idle time they explain:" in text and "fix: " in text
    assert "<h2>Speed: speed, estimated for H100 SXM" in to_html(report)
    plain = {k: v for k, v in report.items() if k != "speed"}
    plain["settings"] = {k: v for k, v in report["settings"].items() if k != "speed"}
    assert "speed" not in json.loads(to_json(plain)) and "speed, estimated" not in to_text(plain)


def test_another_card_from_the_same_counts():
    speed = section(speed_report("sync_bound"))
    t4 = findings.report("migrated (sim)", speed["profile"], gpus.named("T4"))
    assert t4["gpu"] == "T4" and t4["estimate"]["busy_s"] > speed["estimate"]["busy_s"]  # a slower card


def test_already_fast_has_no_cause():
    speed = section(speed_report("already_fast"))
    counts = speed["counts"]
    assert counts["syncs"] == 0 and counts["copies_in"] == 0 and counts["copies_out"] == 0
    assert speed["profile"]["lines"] == []  # the one .tolist() at the end is no step's
    assert speed["causes"] == []
    assert "no line of the script" in speed["summary"] or speed["summary"].endswith("no cause found")


def test_an_unknown_gpu_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "cpu2gpu", "verify", os.path.join(SPEED, "sync_bound.py"),
                           "--device", "sim", "--gpu", "V100", "-q"], capture_output=True, text=True, cwd=SPEED,
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 2 and "unknown GPU 'V100'" in proc.stderr, proc.stderr
    with pytest.raises(VerifyError, match="unknown GPU 'V100'"):  # migrate --speed: before any run
        migrate(os.path.join(SPEED, "sync_bound.py"), device="sim", cwd=SPEED, speed=True, gpu="V100")


# -- the slow tier: loader_bound, copy_bound, the tuned twins ----------------------------------------------


@pytest.mark.slow
def test_loader_bound_waits_for_its_batches_and_the_loader_comes_first():
    speed = section(speed_report("loader_bound"))
    counts = speed["counts"]
    assert counts["data_wait_s"] > 0 and counts["syncs"] == 0
    loader = speed["profile"]["loaders"][0]
    assert (loader["num_workers"], loader["pin_memory"], loader["batches"]) == (0, False, 1)
    assert speed["profile"]["places"][loader["place"]]["line"] == 38 and loader["wait_s"] > 0
    assert counts["copies_in"] == 2 and counts["bytes_in"] == 64 * 3 * 32 * 32 * 4 + 64 * 8 and counts["pinned_in"] == 0
    assert lines_of(speed, "copy") == {48: [("batch", 2, 64 * 3 * 32 * 32 * 4 + 64 * 8)]}
    first = speed["causes"][0]
    assert (first["kind"], first["line"]) == ("loader", 38)
    assert "num_workers=0" in first["what"] and "num_workers=" in first["fix"]


@pytest.mark.slow
def test_copy_bound_copies_three_tensors_a_step_and_the_one_made_on_the_cpu_comes_first():
    speed = section(speed_report("copy_bound"))
    counts = speed["counts"]
    batch = 64 * 3072 * 4
    assert counts["copies_in"] == 3 and counts["bytes_in"] == 2 * batch + 64 * 8 and counts["syncs"] == 0
    # the slice of x_cpu; the noise drawn on the CPU; the labels built from a Python list
    assert lines_of(speed, "copy") == {21: [("slice", 1, batch)], 22: [("made", 1, batch)], 23: [("made", 1, 512)]}
    # which small copies pass the 0.5% a cause needs rests on this machine's host time (its load): the made noise
    # (786 kB made on the host and copied, about a third of the step) always does, and comes first
    causes = {c["line"]: c for c in speed["causes"]}
    assert speed["causes"][0]["line"] == 22 and causes[22]["kind"] == "made"
    assert causes.get(21, {"kind": "copy", "fix": "once, before the loop"})["kind"] == "copy"
    assert "once, before the loop" in causes.get(21, {"fix": "once, before the loop"})["fix"]
    assert causes.get(23, {"kind": "made"})["kind"] == "made"
    assert 12 not in causes  # the labels' .tolist() runs before the loop


@pytest.mark.slow
@pytest.mark.parametrize("name", ["loader_bound", "copy_bound"])
def test_a_tuned_twin_idles_less_than_its_plain_version(name):
    plain, tuned = section(speed_report(name)), section(speed_report(f"{name}_tuned"))
    # the device's copy time comes from the bytes and the memory they come from, not from this machine's clock
    # (the idle shares differ by less than two runs' host times do)
    assert tuned["estimate"]["copy_s"] < plain["estimate"]["copy_s"]
    assert sum(c["seconds"] for c in tuned["causes"]) < sum(c["seconds"] for c in plain["causes"])
    assert not any(c["kind"] in ("made", "sync") for c in tuned["causes"])


@pytest.mark.slow
def test_the_tuned_sync_twin_reads_nothing_back_in_its_steps():
    """Its estimated idle share is not compared: both twins are host-bound on this machine (about 1.5 ms of the
    host's own work a step against 0.15 ms of device work on an H100), so their shares differ in the fourth
    decimal, by less than this machine's noise; the syncs' part of it is what the tuning removes."""
    plain, tuned = section(speed_report("sync_bound")), section(speed_report("sync_bound_tuned"))
    assert tuned["counts"]["syncs"] == 0 and tuned["causes"] == []
    assert sum(c["seconds"] for c in plain["causes"]) > 0


@pytest.mark.slow
def test_counting_changes_no_loss():
    counted = speed_report("copy_bound")
    plain = speed_report("copy_bound", speed=False)
    assert "speed" not in plain and "speed" not in plain["runs"][0]
    assert counted["runs"][0]["losses"] == plain["runs"][0]["losses"]


def test_real_cudas_dispatch_mode_counts_as_the_simulators_dispatch_does():
    """On real CUDA a dispatch mode hands the ops to the counter. Here the CPU stands in for the device: every
    tensor is the device's. In this process, not a child: the mode is left at the end of the block."""
    import torch

    from cpu2gpu.runtime.speed import counts

    counter = counts.Counter("cuda", lambda f: f == __file__, lambda t: False, lambda t: isinstance(t, torch.Tensor),
                             ops_on_host=False)
    a, b = torch.randn(8, 4), torch.randn(4, 3)
    with counts._Watch(counter):
        for _ in range(4):  # four steps: the first holds the start, the 2nd to the 4th are detailed
            y = a @ b  # a kernel, 2 * 8 * 4 * 3 FLOPs
            y.t()  # a view: no kernel
            y[y > 0]  # a boolean mask: a kernel, and a sync for its size
            y.sum().item()  # a kernel, and a scalar read
            counter.step_ended()
    counter.stop()
    profile = counter.profile(lambda f: os.path.basename(f))
    per_step = profile["per_step"]
    assert per_step["syncs"] == 2 and per_step["kernels"] == 4  # mm, gt, index, sum
    assert per_step["allocations"] >= 4
    assert {(profile["places"][line["place"]]["source"].split("[")[0], line["what"]) for line in profile["lines"]} \
        == {("y", "shape"), ("y.sum().item()  # a kernel, and a scalar read", "scalar")}
    detail = profile["detail"]
    assert detail["flops"] == 2 * 8 * 4 * 3 and [e[0] for e in detail["events"]].count("s") == 2
