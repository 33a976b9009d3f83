"""The run may write only in its own copy (runtime/sandbox/: isolation.py, landlock.py, writewatch.py, keeper.py).

Each probe tries to change the user's folder in a way the audit hook alone does not see (through a
dir_fd, by a link, in a subprocess, from native code) and ignores the refusal. The folder must stay
byte for byte as it was, and the verdict must not pass: it says the script tried to write outside its
copy. The fast tier confines a bare Python process (no torch); one verify run tries every probe; the
slow tier runs each probe alone, and the audit hook alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ..conftest import HANG_GUARD_S

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock and seccomp are Linux's")

PROBES = ["dirfd-write", "dirfd-unlink", "dirfd-rename", "mkdir", "symlink", "link", "subprocess-append", "c-write",
          "os-write", "chmod"]


def landlock_abi() -> int:
    from cpu2gpu.runtime.sandbox import landlock

    try:
        return landlock.abi()
    except landlock.Unavailable:
        return 0


needs_landlock = pytest.mark.skipif(landlock_abi() < 2, reason="no Landlock ABI 2+ in this kernel")


def state(folder) -> dict:
    """Every entry of the folder: its bytes (or link target), mode and mtime."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            if os.path.islink(path):
                content = os.readlink(path).encode()
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    content = f.read()
            else:
                content = b""
            out[os.path.relpath(path, folder)] = (content, info.st_mode, info.st_mtime_ns if not os.path.isdir(path) else 0)
    return out


@pytest.fixture
def user_folder(fixtures_dir, tmp_path):
    src = tmp_path / "project"
    src.mkdir()
    shutil.copy(os.path.join(fixtures_dir, "isolation", "probe.py"), src / "probe.py")
    (src / "victim.txt").write_text("the user's own bytes\n")
    return src


# -- fast: a bare process confined by the keeper ------------------------------------------------------

DRIVER = r"""
import ctypes, json, os, subprocess, sys
from cpu2gpu.runtime.sandbox import keeper
orig, private, record = sys.argv[1:4]
isolation = keeper.split(private, orig, record)
victim = os.path.join(orig, "victim.txt")
d = os.open(orig, os.O_RDONLY)
libc = ctypes.CDLL(None, use_errno=True)
tries = {
    "dirfd-write": lambda: os.open("victim.txt", os.O_WRONLY | os.O_TRUNC, dir_fd=d),
    "dirfd-unlink": lambda: os.unlink("victim.txt", dir_fd=d),
    "dirfd-rename": lambda: os.rename("victim.txt", "renamed.txt", src_dir_fd=d, dst_dir_fd=d),
    "mkdir": lambda: os.mkdir(os.path.join(orig, "newdir")),
    "symlink": lambda: os.symlink("victim.txt", os.path.join(orig, "symlink.txt")),
    "link": lambda: os.link(victim, os.path.join(orig, "hardlink.txt")),
    "chmod": lambda: os.chmod(victim, 0o600),
    "utime": lambda: os.utime(victim, (0, 0)),
    "elsewhere": lambda: open(os.path.join(os.path.dirname(private), "elsewhere.txt"), "w"),
}
out = {"isolation": isolation}
for name, attempt in tries.items():
    try:
        attempt()
        out[name] = "allowed"
    except OSError as e:
        out[name] = e.errno
out["subprocess-append"] = subprocess.run(["sh", "-c", f"echo t >> '{victim}'"], stderr=subprocess.DEVNULL).returncode
out["c-write"] = libc.open(victim.encode(), os.O_WRONLY | os.O_APPEND)
os.chdir(private)
with open("own.txt", "w") as f:
    f.write("the run's own file")
out["own"] = open("own.txt").read()
print(json.dumps(out))
"""


@needs_landlock
def test_a_confined_process_cannot_change_the_user_s_folder_and_every_attempt_is_named(tmp_path):
    orig, private = tmp_path / "user", tmp_path / "run"
    orig.mkdir()
    private.mkdir()
    (orig / "victim.txt").write_text("the user's own bytes\n")
    before = state(orig)
    record = private / "result.json.writes"

    done = subprocess.run([sys.executable, "-c", DRIVER, str(orig), str(private), str(record)],
                          capture_output=True, text=True, timeout=HANG_GUARD_S)

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["isolation"]["kind"] == "landlock" and out["isolation"]["watch"] == "seccomp"
    for name in ("dirfd-write", "dirfd-unlink", "dirfd-rename", "mkdir", "symlink", "link", "chmod", "utime",
                 "elsewhere"):
        assert out[name] == 13, (name, out[name])  # EACCES
    assert out["subprocess-append"] != 0 and out["c-write"] == -1
    assert out["own"] == "the run's own file"
    assert state(orig) == before
    assert not (tmp_path / "elsewhere.txt").exists()
    named = [json.loads(line) for line in record.read_text().splitlines()]
    on_user = {(os.path.basename(w["path"]), w["call"]) for w in named if w["place"] == "original"}
    assert {("victim.txt", "openat"), ("victim.txt", "unlinkat"), ("victim.txt", "renameat"), ("newdir", "mkdir"),
            ("symlink.txt", "symlink"), ("hardlink.txt", "link"), ("victim.txt", "chmod"),
            ("victim.txt", "utimensat")} <= on_user
    pids = {w["pid"] for w in named if w["place"] == "original"}
    assert len(pids) >= 2  # the subprocess's attempt too, not only the confined process's own
    assert any(w["place"] == "elsewhere" and w["path"].endswith("elsewhere.txt") for w in named)


def test_the_filter_program_fits_the_bpf_jumps():
    from cpu2gpu.runtime.sandbox import writewatch

    try:
        code = writewatch.program()
    except writewatch.Unavailable:
        pytest.skip("no write watch on this architecture")
    assert len(code) % 8 == 0 and len(code) // 8 < 256  # every jump fits the 8-bit offsets


# -- verify: the verdict --------------------------------------------------------------------------------


def _verify(user_folder, probes, monkeypatch, isolation=None):
    pytest.importorskip("torch")
    from cpu2gpu.runtime.judge.verify import verify

    monkeypatch.setenv("CPU2GPU_TEST_ORIGINAL", str(user_folder))
    if isolation:
        monkeypatch.setenv("CPU2GPU_ISOLATION", isolation)
    return verify(str(user_folder / "probe.py"), probes, device="cpu", cwd=str(user_folder), timeout=HANG_GUARD_S)


@pytest.mark.runtime
@needs_landlock
def test_every_probe_is_refused_named_and_fails_the_verdict(user_folder, monkeypatch):
    from cpu2gpu.runtime.report.report import to_json, to_text

    before = state(user_folder)

    rep = _verify(user_folder, PROBES, monkeypatch)

    assert state(user_folder) == before
    run = rep["runs"][0]
    assert "probed" in run["stdout_tail"], run["stderr_tail"]  # the script ignored the refusals and trained
    assert rep["verdict"] == "fail" and run["status"] == "wrote-originals"
    assert "the script tried to write outside its copy" in rep["reasons"][0]["cause"]
    named = {(w["path"], w["by"]) for w in run["refused_writes"]}
    for path in ("victim.txt", "newdir", "symlink.txt"):
        assert any(p == str(user_folder / path) for p, _ in named), path
    assert any(by.startswith("write watch") for _, by in named)  # what Python's hook cannot see
    assert run["isolation"]["kind"] == "landlock" and run["isolation"]["watch"] == "seccomp"
    assert "isolation: Landlock (ABI" in to_text(rep) and "Not covered:" in to_text(rep)
    assert json.loads(to_json(rep))["isolation"]["kind"] == "landlock"


@pytest.mark.runtime
@pytest.mark.slow  # a torch child per probe
@needs_landlock
@pytest.mark.parametrize("probe", PROBES)
def test_each_probe_alone_fails_the_verdict(user_folder, monkeypatch, probe):
    before = state(user_folder)

    rep = _verify(user_folder, [probe], monkeypatch)

    run = rep["runs"][0]
    assert state(user_folder) == before
    assert "probed" in run["stdout_tail"], run["stderr_tail"]
    assert rep["verdict"] == "fail" and run["status"] == "wrote-originals", rep["reasons"]
    assert "the script tried to write outside its copy" in rep["reasons"][0]["cause"]


@pytest.mark.runtime
@pytest.mark.slow
def test_the_audit_hook_alone_says_so_and_fails_a_run_that_changed_the_folder(user_folder, monkeypatch):
    """Where the kernel cannot confine the run: a subprocess writes the user's file, and the parent finds it."""
    from cpu2gpu.runtime.report.report import to_text

    rep = _verify(user_folder, ["subprocess-append", "mkdir"], monkeypatch, isolation="audit-hook")

    run = rep["runs"][0]
    assert run["isolation"]["kind"] == "audit hook" and run["isolation"]["watch"] is None
    assert rep["verdict"] == "fail" and run["status"] == "wrote-originals"
    causes = " ".join(r["cause"] for r in rep["reasons"])
    assert "the script tried to write outside its copy" in causes  # the hook refused the mkdir
    assert "isolation: the audit hook" in to_text(rep) and "native code" in to_text(rep)
