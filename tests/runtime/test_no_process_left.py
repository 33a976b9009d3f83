"""Nothing of a run lives on once verify ends, however it ends (runtime/sandbox/keeper.py, reaper.py).

Leftovers are found by a marker, a fresh uuid given to the script as its first argument: the run's own
processes (the keeper, the run, torchrun and its ranks) carry it on their command lines, and so does the
daemon the script starts (setsid, double fork). The waits are generous: a busy machine is slow, and no
test depends on how fast anything is, except that a signal ends verify long before its --timeout.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from ..conftest import HANG_GUARD_S

pytest.importorskip("torch")

from cpu2gpu.runtime.judge import runner  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

pytestmark = [pytest.mark.runtime,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")]

GONE_WAIT_S = 60  # for a killed process to leave the process table
EXIT_WAIT_S = 120  # for verify to exit after a signal; it takes a second or two
DAEMON = b"time.sleep(3600)"


def with_marker(marker: str, daemon_only: bool = False) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read()
        except OSError:
            continue
        if marker.encode() in argv and (DAEMON in argv or not daemon_only):
            found.append(int(name))
    return found


def left_over(marker: str) -> list[str]:
    """The processes carrying the marker that are still there after GONE_WAIT_S (their command lines)."""
    deadline = time.monotonic() + GONE_WAIT_S
    while time.monotonic() < deadline:
        if not with_marker(marker):
            return []
        time.sleep(0.2)
    out = []
    for pid in with_marker(marker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid}: {argv}")
        except OSError:
            pass
    return out


def wait_for_daemon(marker: str, proc: subprocess.Popen | None = None, thread=None) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not with_marker(marker, daemon_only=True):
        ended = (proc is not None and proc.poll() is not None) or (thread is not None and not thread.is_alive())
        assert not ended, "the run ended before its daemon started"
        assert time.monotonic() < deadline, "the daemon never started"
        time.sleep(0.2)


@pytest.fixture
def marker():
    token = f"cpu2gpu-test-{uuid.uuid4().hex}"
    yield token
    for pid in with_marker(token):  # a failed test leaves nothing either
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def project(fixtures_dir, tmp_path):
    """The fixtures in a folder of their own (the run copies the whole folder)."""
    src = tmp_path / "project"
    shutil.copytree(os.path.join(fixtures_dir, "processes"), src)
    return src


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """verify's temporary folders go here (in this process), to see that they are removed."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_daemon_the_script_started_ends_with_a_passing_run(project, marker, own_tmp):
    rep = verify(str(project / "leaves_a_daemon.py"), [marker], device="cpu", cwd=str(project), timeout=HANG_GUARD_S)

    run = rep["runs"][0]
    assert rep["verdict"] == "pass", (rep["reasons"], run["stderr_tail"])
    assert "daemon up" in run["stdout_tail"] and "trained" in run["stdout_tail"]
    assert left_over(marker) == []
    assert os.listdir(own_tmp) == []


def test_an_exception_in_verify_ends_the_run(project, marker, own_tmp):
    """The parent fails while the run goes on (here: its progress callback raises)."""
    def on_progress(line):
        raise RuntimeError("the parent failed")

    spec = runner.RunSpec("migrated (cpu)", "migrated", str(project / "leaves_a_daemon.py"), "cpu", [marker, "hang"])
    with pytest.raises(RuntimeError, match="the parent failed"):
        runner.run(spec, cwd=str(project), timeout=HANG_GUARD_S, on_progress=on_progress)

    assert left_over(marker) == []
    assert os.listdir(own_tmp) == []


@pytest.mark.slow  # waits out a timeout
def test_the_timeout_ends_the_run_and_its_daemon(project, marker, own_tmp):
    reports: list = []
    thread = threading.Thread(target=lambda: reports.append(verify(
        str(project / "leaves_a_daemon.py"), [marker, "hang"], device="cpu", cwd=str(project), timeout=60)))
    thread.start()
    wait_for_daemon(marker, thread=thread)
    thread.join(HANG_GUARD_S)

    assert reports and reports[0]["runs"][0]["status"] == "timeout"
    assert left_over(marker) == []
    assert os.listdir(own_tmp) == []


def _verify_cli(project, tmp, args: list) -> subprocess.Popen:
    env = dict(os.environ, TMPDIR=str(tmp), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "cpu2gpu", "verify", *args, "-q", "--timeout", str(HANG_GUARD_S)],
                            cwd=str(project), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("sig, code", [
    (signal.SIGINT, 130),
    pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow),
    pytest.param(signal.SIGHUP, 129, marks=pytest.mark.slow),
])
def test_a_signal_to_verify_ends_every_process_of_the_run(project, marker, tmp_path, sig, code):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _verify_cli(project, tmp, ["leaves_a_daemon.py", marker, "hang", "--device", "cpu"])
    try:
        wait_for_daemon(marker, proc)
        sent = time.monotonic()
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=EXIT_WAIT_S)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert took < EXIT_WAIT_S / 4, f"verify took {took:.1f} s to end"  # not the --timeout's 900 s
    assert left_over(marker) == []
    assert os.listdir(tmp) == []  # the run's copy and temporary folder are gone too


@pytest.mark.slow
def test_verify_killed_outright_still_leaves_no_process_running(project, marker, tmp_path):
    """SIGKILL gives verify no time to clean: each run's keeper sees its parent gone and ends the run
    and all below it (the temporary folder stays: nobody is left to remove it)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _verify_cli(project, tmp, ["leaves_a_daemon.py", marker, "hang", "--device", "cpu"])
    try:
        wait_for_daemon(marker, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=EXIT_WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert left_over(marker) == []


@pytest.mark.slow  # torchrun with 2 ranks
def test_a_signal_ends_torchrun_its_ranks_and_a_rank_s_daemon(project, marker, tmp_path):
    pytest.importorskip("torch.distributed")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _verify_cli(project, tmp, ["ddp_hang_daemon.py", marker, "--nproc", "2", "--device", "cpu"])
    try:
        wait_for_daemon(marker, proc)
        assert len(with_marker(marker)) >= 4  # torchrun, and each rank's keeper and run, besides the daemon
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=EXIT_WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert left_over(marker) == []
    assert os.listdir(tmp) == []
