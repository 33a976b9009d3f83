"""verify --speed's estimate, with fixed numbers: the GPU table, one step replayed on a card (speed.model), and the
causes found and ranked from a run's counts (speed.findings). No torch, no run: the counts are written here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cpu2gpu.runtime.speed import findings, gpus, model
from cpu2gpu.runtime.speed.gpus import Gpu
from cpu2gpu.runtime.speed.model import Event

US = 1e-6
# A card with round numbers: 1 TFLOP/s and 1 TB/s, launches of 1 us, syncs of 2 us, copies at 1 GB/s
# (pageable) and 4 GB/s (pinned).
CARD = Gpu("x", "Card X", fp32=1e12, tf32=2e12, half=4e12, fp64=0.5e12, memory=1e12, pageable=1e9, pinned=4e9,
           launch_s=1 * US, sync_s=2 * US)


def kernel(host_us, flops=0.0, size=0.0, math="fp32", place=0):
    return Event("kernel", host_us * US, flops=flops, bytes=size, math=math, tag=("kernel", place))


def test_the_table_names_its_cards_by_key_or_name_and_h100_by_default():
    assert gpus.named(None).name == "H100 SXM"
    assert {gpus.named(n).key for n in ("H100", "h100 sxm", "A100 80GB", "a100", "L4", "RTX 4090", "4090", "t4")} \
        == {"h100", "a100", "l4", "rtx4090", "t4"}
    with pytest.raises(KeyError):
        gpus.named("V100")
    for card in gpus.GPUS.values():  # what the model reads of each
        assert card.half >= card.tf32 >= card.fp32 > 0 and card.memory > card.pinned > card.pageable > 0
        assert card.launch_s == 5e-6


def test_a_kernel_takes_its_flops_at_the_peak_of_its_arithmetic_or_its_bytes_at_the_bandwidth():
    assert model.kernel_work(kernel(0, flops=4e6), CARD) == pytest.approx(4 * US)  # FP32: 4 MFLOP at 1 TFLOP/s
    assert model.kernel_work(kernel(0, flops=4e6, math="half"), CARD) == pytest.approx(1 * US)
    assert model.kernel_work(kernel(0, flops=4e6, size=8e6), CARD) == pytest.approx(8 * US)  # memory-bound


def test_a_host_bound_step_is_the_hosts_and_the_gpu_idles_the_rest():
    events = [kernel(10, flops=2e6) for _ in range(3)] + [Event("end", 5 * US)]
    t = model.simulate(events, CARD)
    assert t.step_s == pytest.approx(35 * US)  # the host's 3 x 10 + 5 us; each kernel (1 + 2 us) keeps up
    assert t.busy_s == pytest.approx(6 * US) and t.launch_s == pytest.approx(3 * US)
    assert t.idle_fraction == pytest.approx(1 - 6 / 35)


def test_a_device_bound_step_is_the_devices_when_nothing_synchronises():
    events = [kernel(1, flops=10e6) for _ in range(3)] + [Event("end", 1 * US)]
    t = model.simulate(events, CARD)
    assert t.step_s == pytest.approx(33 * US)  # 3 x (1 us launch + 10 us work): the host runs ahead
    assert t.idle_fraction == pytest.approx(1 - 30 / 33)


def test_a_sync_makes_the_host_wait_for_the_device_and_costs_the_step_its_overlap():
    # k, k, sync, k, end: the host queues two kernels (11 us each), waits for them, pays the sync (2 us),
    # then queues the third one; the next step's first two overlap the third.
    events = [kernel(1, flops=10e6), kernel(1, flops=10e6), Event("sync", 1 * US, tag=("sync", 7, "scalar")),
              kernel(1, flops=10e6), Event("end", 1 * US)]
    t = model.simulate(events, CARD)
    assert t.step_s == pytest.approx(36 * US)
    assert t.idle_fraction == pytest.approx(1 - 30 / 36)
    # without it the device runs back to back: 33 us, 3 us saved (the sync's 2, and the host's 1 before the
    # third kernel, when the device had nothing queued)
    saved = model.saving(events, CARD, lambda e: None if e.kind == "sync" else e)
    assert saved == pytest.approx(3 * US)


def test_copies_block_the_host_unless_non_blocking_from_pinned_memory():
    def step(**copy):
        return [Event("copy", 0.0, bytes=4000, **copy), kernel(1, flops=10e6), Event("end", 0.0)]

    blocking = model.simulate(step(), CARD)  # waits for the device, copies 4 us at 1 GB/s, pays a sync
    pinned = model.simulate(step(pinned=True, non_blocking=True), CARD)  # 1 us in the device's queue
    assert blocking.step_s == pytest.approx(4 * US + 2 * US + 1 * US + 11 * US)
    assert pinned.step_s == pytest.approx(1 * US + 11 * US)
    assert blocking.copy_s == pytest.approx(4 * US) and pinned.copy_s == pytest.approx(1 * US)
    assert blocking.idle_fraction > pinned.idle_fraction


def test_a_wait_for_a_batch_is_host_time_and_ready_batches_save_it():
    events = [Event("wait", 0.0, seconds=50 * US, tag=("loader", 0)), kernel(2, flops=10e6), Event("end", 0.0)]
    t = model.simulate(events, CARD)
    assert t.step_s == pytest.approx(52 * US) and t.host_s == pytest.approx(52 * US)
    saved = model.saving(events, CARD, lambda e: Event("wait", e.host_s, tag=e.tag) if e.kind == "wait" else e)
    assert saved == pytest.approx(52 * US - 11 * US)  # the device's 11 us is then the step


def test_free_launches_are_what_many_small_kernels_cost_a_device_bound_step():
    events = [kernel(0.1) for _ in range(200)] + [Event("end", 0.0)]
    t = model.simulate(events, CARD)
    assert t.step_s == pytest.approx(200 * US) and t.busy_s == 0.0
    assert model.simulate(events, model.without_launches(CARD)).step_s == pytest.approx(20 * US)


# -- from a run's counts to the causes --------------------------------------------------------------------


def step_counts(**values):
    counts = dict.fromkeys(("ops", "kernels", "syncs", "copies_in", "bytes_in", "pinned_in", "copies_out",
                            "bytes_out", "allocations", "allocated_bytes"), 0)
    counts.update(wall_s=0.0, kernel_s=0.0, data_wait_s=0.0, host_s=0.0)
    counts.update(values)
    return counts


def profile(events, lines=(), loaders=(), host_s=None, wait_s=0.0, places=None):
    host = sum(e[1] for e in events) if host_s is None else host_s
    per_step = step_counts(host_s=host, data_wait_s=wait_s, kernels=sum(1 for e in events if e[0] == "k"))
    return {"mode": "sim", "steps": [per_step] * 5, "per_step": per_step, "lines": list(lines),
            "loaders": list(loaders), "detail": {"step": 2, "events": events, "flops": 0.0, "merged": 0},
            "places": places or [{"file": "train.py", "line": n, "source": f"line {n}"} for n in range(1, 40)]}


def sync_line(place, what="scalar", per_step=1):
    return {"kind": "sync", "place": place, "what": what, "per_step": per_step, "bytes_per_step": 4, "pinned": False,
            "non_blocking": False, "steps": 4}


def heavy(place=0, host=1.0):
    return ["k", host * US, 200e9, 0.0, "fp32", place, 1]  # 200 GFLOP: 3 ms on an H100's FP32


def test_a_device_bound_step_that_syncs_every_step_names_the_line_that_syncs():
    # a heavy kernel, then loss.item() (place 9: line 10), then the next step: the sync stops the overlap
    events = [heavy(), ["s", 1 * US, "scalar", 4, 9], ["k", 300 * US, 0.0, 1e6, "fp32", 0, 1], ["e", 1 * US]]
    out = findings.report("migrated (sim)", profile(events, [sync_line(9)]), gpus.named("h100"))
    assert [(c["kind"], c["line"]) for c in out["causes"]] == [("sync", 10)]
    cause = out["causes"][0]
    assert cause["per_step"] == 1 and cause["share"] > 0.05 and "line 10" in cause["what"]
    assert out["summary"].startswith("the GPU would idle ~") and "train.py:10" in out["summary"]
    assert out["estimate"]["gpu"] == "H100 SXM" and 0 < out["estimate"]["idle_fraction"] < 1


def test_a_loader_on_the_main_process_comes_first_and_says_so():
    events = [["w", 1 * US, 2e-3, 0], heavy(place=3), ["s", 1 * US, "scalar", 4, 9], ["e", 1 * US]]
    loader = {"place": 4, "num_workers": 0, "pin_memory": False, "persistent_workers": False, "wait_s": 2e-3,
              "batches": 1}
    out = findings.report("r", profile(events, [sync_line(9)], [loader], wait_s=2e-3), gpus.named("h100"))
    kinds = [(c["kind"], c["line"]) for c in out["causes"]]
    assert kinds[0] == ("loader", 5)
    first = out["causes"][0]
    assert "num_workers=0: 2 ms per batch" in first["what"] and "num_workers=" in first["fix"]


def test_copies_are_named_by_where_their_source_comes_from():
    events = [["h", 1 * US, 8e6, False, False, 20, "slice"], ["h", 2000 * US, 8e6, False, False, 21, "made"],
              ["h", 1 * US, 8e6, False, False, 22, "batch"], ["h", 1 * US, 8e6, True, True, 23, "batch"],
              ["k", 1 * US, 20e9, 0.0, "fp32", 0, 1], ["e", 1 * US]]  # a kernel of 0.3 ms: the host's step
    lines = [{"kind": "copy", "place": p, "what": what, "per_step": 1, "bytes_per_step": 8e6, "pinned": pinned,
              "non_blocking": pinned, "steps": 4}
             for p, what, pinned in ((20, "slice", False), (21, "made", False), (22, "batch", False),
                                     (23, "batch", True))]
    out = findings.report("r", profile(events, lines), gpus.named("h100"))
    by_line = {c["line"]: c for c in out["causes"]}
    assert set(by_line) == {21, 22, 23}  # the pinned non_blocking copy is no cause
    assert out["causes"][0]["line"] == 22  # made on the host: its copy and the 2 ms that made it
    assert by_line[22]["kind"] == "made" and "device=" in by_line[22]["fix"]
    assert by_line[21]["kind"] == "copy" and "once, before the loop" in by_line[21]["fix"]
    assert by_line[23]["kind"] == "copy" and "pin_memory=True" in by_line[23]["fix"]
    assert by_line[21]["bytes_per_step"] == 8e6


def test_what_costs_nothing_measurable_is_no_cause():
    # a host-bound step of 20 ms whose one sync costs the sync's 20 us: 0.1 %, below the threshold
    events = [["k", 10e-3, 0.0, 1e3, "fp32", 0, 1], ["s", 1 * US, "scalar", 4, 9], ["e", 10e-3]]
    out = findings.report("r", profile(events, [sync_line(9)]), gpus.named("h100"))
    assert out["causes"] == []
    assert "the host's own work" in out["summary"] and "no line of the script" in out["summary"]


def test_a_step_with_nothing_to_find_has_no_cause():
    events = [heavy(), heavy(), ["e", 1 * US]]
    out = findings.report("r", profile(events), gpus.named("t4"))
    assert out["causes"] == [] and out["summary"].endswith("no cause found")


def test_many_small_kernels_of_a_device_bound_step_are_a_cause():
    events = [["k", 0.5 * US, 0.0, 100.0, "fp32", 30, 1] for _ in range(400)] + [["e", 1 * US]]
    out = findings.report("r", profile(events), gpus.named("h100"))
    assert [c["kind"] for c in out["causes"]] == ["launches"]
    assert out["causes"][0]["per_step"] == 400 and out["causes"][0]["line"] == 31
    few = findings.report("r", profile(events[:50] + [["e", 1 * US]]), gpus.named("h100"))
    assert few["causes"] == []  # 50 kernels are not many


def test_causes_about_as_large_are_ranked_by_their_lines():
    causes = [{"kind": "sync", "file": "t.py", "line": n, "source": "", "per_step": 1, "bytes_per_step": 0,
               "seconds": s, "share": 0.1, "what": "{at}", "fix": ""} for n, s in ((30, 1.0), (20, 0.95), (10, 0.5))]
    ranked = findings.ranked(causes)
    assert [c["line"] for c in ranked] == [20, 30, 10]
    assert ranked[0]["what"] == "t.py:20"


def test_fewer_than_two_steps_give_no_estimate():
    out = findings.report("r", {"steps": [step_counts()], "per_step": None, "detail": None}, gpus.named(None))
    assert out["estimate"] is None and "two training steps" in out["note"]


def test_the_estimate_imports_no_torch():
    code = ("import sys; import cpu2gpu.runtime.speed.findings, cpu2gpu.runtime.report.speedview; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_loader_with_workers_is_a_cause_only_where_the_step_waits_for_them():
    def out(wait_s):
        events = [["w", 1 * US, wait_s, 0], ["k", 1e-3, 0.0, 1e3, "fp32", 3, 1], ["e", 1 * US]]
        loader = {"place": 4, "num_workers": 2, "pin_memory": True, "persistent_workers": True, "wait_s": wait_s,
                  "batches": 1}
        return findings.report("r", profile(events, loaders=[loader], wait_s=wait_s), gpus.named("h100"))

    assert out(0.1e-3)["causes"] == []  # a batch's hand-over from the workers: 10% of the step
    lagging = out(2e-3)["causes"]
    assert [c["kind"] for c in lagging] == ["loader"] and "its 2 workers do not keep up" in lagging[0]["what"]


def test_fixed_shape_convolutions_without_cudnn_benchmark_come_last_with_no_time_of_their_own():
    events = [heavy(), ["s", 1 * US, "scalar", 4, 9], ["e", 1 * US]]
    run = profile(events, [sync_line(9)])
    run["convolutions"] = {"shapes": 3, "place": 6, "fixed": True, "cudnn_benchmark": False}
    out = findings.report("r", run, gpus.named("h100"))
    assert [c["kind"] for c in out["causes"]] == ["sync", "cudnn"]
    cudnn = out["causes"][-1]
    assert cudnn["seconds"] == 0 and cudnn["line"] == 7 and "not in the estimate" in cudnn["what"]
    assert "cudnn.benchmark = True" in cudnn["fix"]
    # set already, shapes that change from step to step, or no convolution at all: no such cause
    for convolutions in ({"shapes": 3, "place": 6, "fixed": True, "cudnn_benchmark": True},
                         {"shapes": 40, "place": 6, "fixed": False, "cudnn_benchmark": False},
                         {"shapes": 0, "place": -1, "fixed": True, "cudnn_benchmark": False}):
        run["convolutions"] = convolutions
        assert [c["kind"] for c in findings.report("r", run, gpus.named("h100"))["causes"]] == ["sync"]
