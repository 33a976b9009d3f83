"""verify's progress: the child's progress file, the parent reading it while it waits, and the
lines on stderr. No assertion here depends on how fast anything runs."""

import io
import json
import subprocess
import sys
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from cpu2gpu.runtime.tracing import progress
from cpu2gpu.runtime.report import progressview
from cpu2gpu.runtime.judge.runner import RunSpec

from ..conftest import HANG_GUARD_S

SPECS = [RunSpec("original (cpu)", "original", "a.py", "cpu"), RunSpec("migrated (sim)", "migrated", "b.py", "sim"),
         RunSpec("migrated (cpu)", "migrated", "b.py", "cpu")]


def test_the_child_writes_at_a_modest_rate_and_always_the_last_line(tmp_path):
    path = str(tmp_path / "progress.jsonl")
    rec = SimpleNamespace(steps=0, losses=[])
    writer = progress.Writer(path, rec, every=3600)
    for n in range(1, 6):
        rec.steps, rec.losses = n, rec.losses + [1.0 / n]
        writer.on_step(None, (), {})
    writer.write(end=True)
    lines = [json.loads(x) for x in open(path).read().splitlines()]
    assert lines == [{"steps": 1, "loss": 1.0}, {"steps": 5, "loss": 0.2, "end": True}]


def test_the_parent_reads_the_newest_whole_line(tmp_path):
    path = tmp_path / "progress.jsonl"
    reader = progress.Reader(str(path))
    assert reader.poll() is None  # not written yet
    path.write_text('{"steps": 1, "loss": 2.0}\n{"steps": 2, "loss": 1.5}\n{"steps": 3, "lo')
    assert reader.poll() == {"steps": 2, "loss": 1.5}
    assert reader.poll() is None  # nothing new
    with open(path, "a") as f:
        f.write('ss": 1.25}\n')
    assert reader.poll() == {"steps": 3, "loss": 1.25}


def test_follow_waits_for_the_child_and_passes_on_its_lines(tmp_path):
    path = tmp_path / "progress.jsonl"
    code = ("import json, sys\n"
            "with open(sys.argv[1], 'a') as f:\n"
            "    for n in (1, 2, 3):\n"
            "        f.write(json.dumps({'steps': n, 'loss': 1 / n}) + '\\n'); f.flush()\n")
    seen = []
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)])
    progress.follow(proc, str(path), HANG_GUARD_S, seen.append)
    assert proc.returncode == 0 and seen and seen[-1] == {"steps": 3, "loss": 1 / 3}
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            progress.follow(sleeper, str(tmp_path / "none"), 0.3, seen.append)
        finally:
            sleeper.kill()
            sleeper.wait()


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_shown_on_a_terminal_unless_quiet_elsewhere_only_when_forced(monkeypatch):
    monkeypatch.delenv("TERM", raising=False)
    assert progressview.choose(io.StringIO(), quiet=False, force=False, show_output=False) is None
    assert progressview.choose(Tty(), quiet=True, force=False, show_output=False) is None
    assert progressview.choose(Tty(), quiet=True, force=True, show_output=False) is None
    assert progressview.choose(Tty(), quiet=False, force=False, show_output=False).live
    assert not progressview.choose(io.StringIO(), quiet=False, force=True, show_output=False).live
    # the runs' own output goes to stderr too: no redrawing over it
    assert not progressview.choose(Tty(), quiet=False, force=False, show_output=True).live
    monkeypatch.setenv("TERM", "dumb")
    assert not progressview.choose(Tty(), quiet=False, force=False, show_output=False).live


def test_plain_lines_say_run_device_step_and_loss(monkeypatch):
    monkeypatch.setattr(progressview, "PLAIN_EVERY_S", float("inf"))  # only the first update and the last
    out = io.StringIO()
    view = progressview.ProgressView(out, live=False)
    view.start("b.py", "auto", SPECS, 3)
    view.update("migrated (sim)", {"steps": 1, "loss": 2.5})
    view.update("migrated (sim)", {"steps": 2, "loss": 2.0})
    view.done("migrated (sim)", {"mode": "sim", "status": "max_steps", "steps": 3, "losses": [2.5, 2.0, 1.75],
                                 "device_name": "simulated cuda:0 (computes on the CPU)"})
    view.done("migrated (cpu)", {"mode": "cpu", "status": "error", "steps": 0, "losses": [],
                                 "exception": {"type": "RuntimeError"}})
    lines = out.getvalue().splitlines()
    assert lines[0] == "cpu2gpu verify b.py: device auto (sim, cpu), 3 runs, at most 3 steps each"
    assert lines[1].split() == ["migrated", "(sim)", "simulated", "cuda", "step", "1/3", "loss", "2.5"]
    assert lines[2].split() == ["migrated", "(sim)", "simulated", "cuda", "step", "3/3", "loss", "1.75", "done",
                                "(max-steps)"]
    assert lines[3].split() == ["migrated", "(cpu)", "cpu", "step", "0/3", "error:", "RuntimeError"]
    assert len(lines) == 4 and "\x1b" not in out.getvalue()


def test_on_a_terminal_the_lines_are_redrawn_in_place():
    out = Tty()
    view = progressview.ProgressView(out, live=True)
    view.start("b.py", "sim", SPECS[1:2], None)
    view.begin("migrated (sim)")
    view.done("migrated (sim)", {"mode": "sim", "status": "ok", "steps": 7, "losses": [0.5]})
    text = out.getvalue()
    assert text.startswith("cpu2gpu verify b.py: device sim, 1 run\n")
    first, begun, second = text.split("\n", 1)[1].split("\x1b[1F")  # each drawing after the first: one line up
    assert "migrated (sim)" in first and "waiting" in first and "starting" in begun
    assert second.startswith("\x1b[2K") and second.split()[-5:] == ["step", "7", "loss", "0.5", "done"]


@pytest.mark.runtime
def test_the_command_shows_progress_and_writes_the_html_report(fixtures_dir, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from cpu2gpu.runtime.cli import verify as verify_cmd

    monkeypatch.chdir(fixtures_dir)
    page = tmp_path / "report.html"
    args = ["linreg_migrated.py", "--device", "sim", "--max-steps", "3", "--timeout", str(HANG_GUARD_S)]
    result = CliRunner().invoke(verify_cmd, args + ["--progress", "--report", str(page)])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert lines[0] == "cpu2gpu verify linreg_migrated.py: device sim, 1 run, at most 3 steps each"
    last = next(ln for ln in lines if "step 3/3" in ln)
    assert last.startswith("migrated (sim)") and "simulated cuda" in last and " loss " in last
    loss = last.split(" loss ")[1].split()[0]
    assert result.stdout.startswith("cpu2gpu verify linreg_migrated.py --device sim (first 3 steps)")

    quiet = CliRunner().invoke(verify_cmd, args + ["-q", "--progress", "--output-format", "json"])
    assert quiet.exit_code == 0 and quiet.stderr == ""  # quiet wins
    # the same seed, the same last loss
    assert loss == format(json.loads(quiet.stdout)["runs"][0]["last_loss"], ".6g")

    class Curves(HTMLParser):
        def __init__(self):
            super().__init__()
            self.runs = []

        def handle_starttag(self, tag, attrs):
            if tag == "polyline":
                self.runs.append((dict(attrs)["data-run"], len(dict(attrs)["points"].split())))

    curves = Curves()
    curves.feed(page.read_text(encoding="utf-8"))
    assert curves.runs == [("migrated (sim)", 3)]
