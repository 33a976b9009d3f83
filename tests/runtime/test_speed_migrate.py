"""migrate --speed on the simulated device: the speed edits a proven migration gets, each kept only where verify
gives the same losses, and taken back where the losses change; and the lines a DataLoader's workers run reach
verify's coverage (without them no workers edit could be proven).

Each migrate is three verify runs or more (the original, the draft on the device and on the CPU, again after
each edit): the slow tier.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from cpu2gpu.migration import speededits  # noqa: E402
from cpu2gpu.runtime.judge.migrate import migrate  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402
from cpu2gpu.runtime.report.htmlreport import to_html  # noqa: E402
from cpu2gpu.runtime.report.migratereport import to_json, to_text  # noqa: E402

from ..conftest import HANG_GUARD_S, ROOT  # noqa: E402

pytestmark = [pytest.mark.runtime, pytest.mark.slow]
SPEED = os.path.join(ROOT, "fixtures", "speed")

# a data set that draws a random number for each item: in worker processes the draws come from each
# worker's own seed, so the batches, and the losses, change
RANDOM_ITEMS = textwrap.dedent("""
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, Dataset

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)


    class Jittered(Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            x = torch.full((8,), float(i % 7)) + torch.rand(8)
            for _ in range(300):  # the per-item host work that makes the loader the cause
                x = x * 1.0
            return x, i % 2


    def main():
        loader = DataLoader(Jittered(), batch_size=32, shuffle=False)
        model = nn.Linear(8, 2).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()


    if __name__ == "__main__":
        main()
""")


def copy_of(tmp_path, name: str, text: str | None = None) -> str:
    target = tmp_path / f"{name}.py"
    if text is None:
        shutil.copy(os.path.join(SPEED, f"{name}.py"), target)
    else:
        target.write_text(text)
    return str(target)


def test_loader_bound_gets_workers_kept_with_the_same_losses_and_nothing_is_written(tmp_path):
    script = copy_of(tmp_path, "loader_bound")
    before = open(script, "rb").read()
    result = migrate(script, device="sim", max_steps=5, cwd=str(tmp_path), timeout=HANG_GUARD_S, speed=True)
    assert result["proven"], result["ending"]
    story = result["speed"]
    kept = {e["kind"]: e for e in story["edits"]}
    assert "workers" in kept, story
    assert kept["workers"]["line"] == 38 and "num_workers=4" in kept["workers"]["edit"]
    assert story["losses_same"] == 5
    new = result["changed"][script].decode()
    assert "num_workers=4" in new and new.count("\n") >= before.count(b"\n")
    # the proof's own verdict: the final verify passes over every line, the workers' lines included
    assert result["verify"]["verdict"] == "pass"
    # the estimate after the edits is the last run's: the loader's wait is no longer the main process's
    assert story["after"]["step_s"] < story["before"]["step_s"]
    text = to_text(result)
    assert "speed edits, estimated for H100 SXM" in text and "kept: loader_bound.py:38" in text
    assert '"speed": {' in to_json(result)
    page = to_html(result["verify"], result["speed"])
    assert "<h2>speed edits, estimated for H100 SXM</h2>" in page and "kept: loader_bound.py:38" in page
    assert open(script, "rb").read() == before  # migrate writes nothing without --in-place


def test_a_workers_edit_that_changes_the_losses_is_taken_back(tmp_path):
    script = copy_of(tmp_path, "jittered", RANDOM_ITEMS)
    result = migrate(script, device="sim", max_steps=4, cwd=str(tmp_path), timeout=HANG_GUARD_S, speed=True)
    assert result["proven"], result["ending"]
    story = result["speed"]
    assert not any(e["kind"] == "workers" for e in story["edits"]), story
    refused = [e for e in story["not_edited"] if e.get("kind") == "workers"]
    assert len(refused) == 2 and all(e["why"].startswith("the losses changed") for e in refused), refused
    assert "num_workers" not in result["changed"].get(script, b"").decode()


# persistent workers killed at the end, as a crash or the loader's own terminate() would: no exit to report at
KILLED_WORKERS = RANDOM_ITEMS.replace("shuffle=False)", "shuffle=False, num_workers=2, persistent_workers=True)") \
    .replace("        opt.step()\n", "        opt.step()\n    for worker in loader._iterator._workers:\n"
                                    "        worker.kill()\n")


@pytest.mark.parametrize("text", [RANDOM_ITEMS.replace("shuffle=False)", "shuffle=False, num_workers=2)"),
                                  KILLED_WORKERS], ids=["workers", "killed-workers"])
def test_the_lines_a_loaders_workers_run_are_covered(tmp_path, text):
    assert text != RANDOM_ITEMS and ("worker.kill()" in text) == ("persistent" in text)
    script = copy_of(tmp_path, "jittered", text)
    report = verify(script, device="sim", cwd=str(tmp_path), timeout=HANG_GUARD_S)
    assert report["verdict"] == "pass", report["reasons"]
    for run in report["runs"]:
        ran = next(lines for path, lines in run["lines"].items() if path.endswith("jittered.py"))
        assert 16 in ran and 18 in ran, (run["label"], ran)  # __getitem__'s lines: run only in the workers


RUNNING_SUM = textwrap.dedent("""
    import torch
    import torch.nn as nn

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x_all, y_all = torch.randn(40 * 32, 64), torch.randint(0, 10, (40 * 32,))
    running = 0.0
    for step in range(40):
        x, y = x_all[step * 32:(step + 1) * 32].to(device), y_all[step * 32:(step + 1) * 32].to(device)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        running += loss.item()
        if step % 10 == 9:
            print(f"step {step} mean loss {running / 10!r}")
            running = 0.0
""")


def test_a_running_sum_kept_on_the_device_prints_the_same_bytes(tmp_path):
    """The edit that migrate --speed makes for `running += loss.item()` (a float read: float64 on the device, as
    Python's float sums) prints the sums the original prints, every bit (their repr), over 40 steps. Whether the
    sync is worth an edit depends on the estimate, which rests on this machine's host time: the rounds that keep
    it are tested with written reports in tests/test_speed_rounds.py."""
    script = copy_of(tmp_path, "running", RUNNING_SUM)
    forms = speededits.sum_on_device(RUNNING_SUM.encode(), 17, floating=True)
    assert isinstance(forms, list) and forms[0].edit == "running += loss.detach().double()"
    edited = tmp_path / "edited.py"
    edited.write_bytes(forms[0].data)
    assert b'print(f"step {step} mean loss {float(running) / 10!r}")' in forms[0].data
    outputs = [subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path,
                              timeout=HANG_GUARD_S).stdout for path in (script, edited)]
    assert outputs[0] == outputs[1] and outputs[0].count("mean loss") == 4, outputs
    # in float32 (.detach() alone) the sums would not all be the same bytes: what the float64 is for
    single = tmp_path / "single.py"
    single.write_bytes(forms[0].data.replace(b".detach().double()", b".detach()"))
    assert subprocess.run([sys.executable, str(single)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=HANG_GUARD_S).stdout != outputs[0]


def test_no_speed_edit_before_the_migration_is_proven_and_the_report_says_so(tmp_path):
    folder = tmp_path / "original_fails"
    shutil.copytree(os.path.join(ROOT, "fixtures", "migrate", "original_fails"), folder)
    result = migrate(str(folder / "train.py"), device="sim", max_steps=3, cwd=str(folder), timeout=HANG_GUARD_S,
                     speed=True)
    assert not result["proven"] and result["cannot_run"]
    assert result["speed"]["note"] == "no speed edit is tried before the migration is proven"
    assert result["speed"]["edits"] == [] and result["speed"]["before"] is None
    assert "speed edits, estimated for H100 SXM:\n  none: no speed edit is tried before" in to_text(result)


REWRAPPED = textwrap.dedent("""
    import torch
    import torch.nn as nn
    from torch.autograd import Variable
    from torch.utils.data import DataLoader, TensorDataset

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 1, 8, 8), torch.randint(0, 2, (256,)))
    loader = DataLoader(data, batch_size=32, pin_memory=torch.cuda.is_available())
    model = nn.Linear(64, 2).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (images, labels) in enumerate(loader):
        images = Variable(images.view(-1, 64)).to(device)
        labels = labels.to(device)
        loss = nn.functional.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 3 == 0:
            print(loss.item())
""")


def test_a_rewrapped_pinned_batch_is_a_pinned_batch_and_a_read_every_third_step_is_not_every_step(tmp_path):
    script = copy_of(tmp_path, "rewrapped", REWRAPPED)
    report = verify(script, device="sim", cwd=str(tmp_path), timeout=HANG_GUARD_S, speed=True)
    assert report["verdict"] == "pass", report["reasons"]
    profile = report["runs"][0]["speed"]
    lines = {(profile["places"][line["place"]]["line"], line["kind"]): line for line in profile["lines"]}
    for copied in (14, 15):  # the batch rewrapped is still the pinned batch
        assert lines[(copied, "copy")]["what"] == "batch" and lines[(copied, "copy")]["pinned"], lines
    assert (21, "sync") not in lines  # read in one step of three: no line that syncs "every step"
