"""Inputs that try to break the tool: odd line breaks, forged notebook markers, code Python refuses,
files that crash or hang a parser, odd files and folders in a walk, signals, odd file names.

Each case is reported on one line naming the file and the cause (exit 2) or tolerated; the other
files are still processed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cpu2gpu.runs.parallel import ordered_map

from .conftest import HANG_GUARD_S, ROOT

CPU_SCRIPT = "import torch\nmodel = torch.nn.Linear(1, 1)\nmodel(torch.ones(1))\n"
GOOD_LINE = ":2:9: CG101"  # what CPU_SCRIPT reports


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``python -m cpu2gpu ...`` in a real process (a crash or a signal must not take pytest along;
    a hang fails the test at the guard instead of blocking the suite)."""
    return subprocess.run([sys.executable, "-m", "cpu2gpu", *args], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, cwd=kwargs.pop("cwd", ROOT), **kwargs)


def _one_error_line(err: str, path) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{path}"), err
    assert "Traceback" not in err
    return lines[0]


# -- 3: lines are counted as Python counts them ------------------------------------------------


@pytest.mark.parametrize("odd", ["\x0c", "# a\u2028b", "# a\x1cb", "# a\x85b"])
def test_noqa_after_an_odd_line_break_suppresses_its_own_line(cli, tmp_path, odd):
    path = tmp_path / "train.py"
    original = (f"import torch\n{odd}\nmodel = torch.nn.Linear(1, 1)  # noqa\n"
                "other = torch.nn.Linear(1, 1)\nother(torch.ones(1))\n")
    path.write_text(original, encoding="utf-8")
    code, out, _ = cli("check", "--no-cache", "--output-format", "json", str(path))
    assert code == 1
    assert {(d["line"], d["code"]) for d in json.loads(out)} >= {(4, "CG101")}
    assert all(d["line"] != 3 for d in json.loads(out)), out
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 0, err
    first = path.read_text(encoding="utf-8")
    assert "model = torch.nn.Linear(1, 1)  # noqa\n" in first
    assert "other = torch.nn.Linear(1, 1).to(device)\n" in first
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 0, err
    assert path.read_text(encoding="utf-8") == first  # a second rewrite changes nothing


# -- 4: notebook markers cannot be forged by the cells ----------------------------------------


def _notebook(path: Path, *sources: str) -> None:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": source.splitlines(keepends=True)} for i, source in enumerate(sources)]
    data = {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _cells(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]


def test_a_cell_that_contains_the_cell_marker_keeps_its_code(cli, tmp_path):
    path = tmp_path / "nb.ipynb"
    _notebook(path, "import torch\nmodel = torch.nn.Linear(1, 1)\n# <cpu2gpu cell 2>\nx = 1\n",
              "model(torch.ones(1))\n")
    code, out, _ = cli("check", "--no-cache", str(path))
    assert f"{path}:cell 2:1:7: CG102" in out
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 0, err
    first, second = _cells(path)
    assert first.endswith("model = torch.nn.Linear(1, 1).to(device)\n# <cpu2gpu cell 2>\nx = 1\n")
    assert second == "model(torch.ones(1, device=device))\n"


def test_a_cell_that_contains_the_magic_marker_keeps_its_line(cli, tmp_path):
    path = tmp_path / "nb.ipynb"
    _notebook(path, "import torch\nmodel = torch.nn.Linear(1, 1)\ny = 2  # <cpu2gpu magic 1>\n",
              "%matplotlib inline\nmodel(torch.ones(1))\n")
    code, _, err = cli("rewrite", "--in-place", str(path))
    assert code == 0, err
    first, second = _cells(path)
    assert first.endswith("y = 2  # <cpu2gpu magic 1>\n")
    assert second == "%matplotlib inline\nmodel(torch.ones(1, device=device))\n"


# -- 5: code Python refuses is reported, not analysed ------------------------------------------


@pytest.mark.parametrize("code_text, cause", [
    ('import torch\nx = b"\u00e9"\nmodel = torch.nn.Linear(1, 1)\n', "bytes can only contain ASCII literal characters"),
    ("import torch\nx = " + "(" * 1000 + "1" + ")" * 1000 + "\n", "too many nested parentheses"),
])
def test_code_that_python_refuses_is_reported(cli, tmp_path, code_text, cause):
    path = tmp_path / "train.py"
    path.write_text(code_text, encoding="utf-8")
    good = tmp_path / "good.py"
    good.write_text(CPU_SCRIPT)
    for command in (("check", "--no-cache"), ("rewrite", "--in-place")):
        code, out, err = cli(*command, str(path), str(good))
        assert code == 2
        line = _one_error_line(err.replace(f"Rewrote {good}\n", ""), path)
        assert "syntax error" in line and cause in line, line
    assert path.read_text(encoding="utf-8") == code_text


@pytest.mark.parametrize("newer", ["type Alias = int\n", 'label = f"{ {"a": 1}["a"]}"\n', "def f[T](x: T) -> T:\n    return x\n"])
def test_code_in_a_newer_pythons_syntax_is_still_analysed(cli, tmp_path, newer):
    path = tmp_path / "train.py"
    path.write_text("import torch\n" + newer + CPU_SCRIPT[len("import torch\n"):])
    code, out, err = cli("check", "--no-cache", "--output-format", "json", str(path))
    assert (code, err) == (1, "")
    assert "CG101" in {d["code"] for d in json.loads(out)}


# -- 6: one file must not cost the others ------------------------------------------------------


def test_1300_nested_parentheses_are_reported_not_a_crash(tmp_path):
    bad = tmp_path / "deep.py"
    bad.write_text("import torch\nx = " + "(" * 1300 + "1" + ")" * 1300 + "\n")
    for n in range(16):
        (tmp_path / f"train_{n:02d}.py").write_text(CPU_SCRIPT)
    for jobs in ("1", "2"):
        result = _run("check", "--no-cache", "-j", jobs, str(tmp_path))
        assert result.returncode == 2, result.stderr
        assert "too many nested parentheses" in _one_error_line(result.stderr, bad)
        assert sum(GOOD_LINE in line for line in result.stdout.splitlines()) == 16


def _crash_on(item: int) -> int:
    if item == 13:
        os.kill(os.getpid(), signal.SIGKILL)  # (SIGSEGV would wake pytest's faulthandler in the worker)
    return item * 2


def test_a_crashed_worker_is_replaced_and_the_rest_retried():
    items = list(range(40))
    results = list(ordered_map(_crash_on, items, 2, crashed=lambda item: -item))
    assert results == [-13 if i == 13 else i * 2 for i in items]


def test_a_file_that_crashes_its_worker_is_reported_and_the_others_checked(tmp_path):
    for n in range(20):
        (tmp_path / f"train_{n:02d}.py").write_text(CPU_SCRIPT)
    script = textwrap.dedent(f"""
        import os, signal, sys
        import cpu2gpu.runs.checking as checking
        from cpu2gpu.cli import main
        real = checking.analyse
        def crashing(job):
            if job[0].endswith("train_07.py"):
                os.kill(os.getpid(), signal.SIGSEGV)
            return real(job)
        checking.analyse = crashing
        main(["check", "--no-cache", "-j", "2", {str(tmp_path)!r}])
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_GUARD_S,
                            cwd=ROOT)
    assert result.returncode == 2, result.stderr
    line = _one_error_line(result.stderr, tmp_path / "train_07.py")
    assert "crashed" in line
    assert sum(GOOD_LINE in line for line in result.stdout.splitlines()) == 19


def test_a_form_feed_before_an_indented_line_is_one_error(cli, tmp_path):
    bad = tmp_path / "feed.py"
    original = "import torch\nmodel = torch.nn.Linear(1, 1)\nif True:\n\x0c    model(torch.ones(1))\n"
    bad.write_text(original)
    good = tmp_path / "good.py"
    good.write_text(CPU_SCRIPT)
    for command in (("check", "--no-cache"), ("rewrite", "--in-place")):
        code, out, err = cli(*command, str(bad), str(good))
        assert code == 2
        line = _one_error_line(err.replace(f"Rewrote {good}\n", ""), bad)
        assert "form feed" in line and ":4:" in line, line
    assert bad.read_text() == original
    assert "to(device)" in good.read_text()


def _deny(monkeypatch, locked: Path, closed: Path) -> None:
    """What the system answers someone without the rights: ``locked`` (mode 000) can neither be listed
    nor its entries looked at; ``closed`` (mode 311) cannot be listed. As root, the answers are faked."""
    if os.geteuid() != 0:
        os.chmod(locked, 0)
        os.chmod(closed, 0o311)
        return
    real_scandir, real_stat = os.scandir, os.stat

    def denied(path):
        return PermissionError(13, "Permission denied", os.fspath(path))

    def scandir(path="."):
        if os.path.abspath(os.fspath(path)) in (str(locked), str(closed)):
            raise denied(path)
        return real_scandir(path)

    def fake_stat(path, *args, **kwargs):
        if isinstance(path, (str, os.PathLike)) and os.path.dirname(os.path.abspath(os.fspath(path))) == str(locked):
            raise denied(path)
        return real_stat(path, *args, **kwargs)

    real_open = os.open

    def fake_open(path, *args, **kwargs):
        if os.path.dirname(os.path.abspath(os.fspath(path))) == str(locked):
            raise denied(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "stat", fake_stat)
    monkeypatch.setattr(os, "open", fake_open)


def test_an_unreadable_folder_is_one_error_and_the_rest_is_checked(cli, tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(CPU_SCRIPT)
    for name in ("locked", "closed"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "inner.py").write_text(CPU_SCRIPT)
    _deny(monkeypatch, tmp_path / "locked", tmp_path / "closed")
    try:
        code, out, err = cli("check", "--no-cache", str(tmp_path))
        named = cli("check", "--no-cache", str(tmp_path / "locked" / "inner.py"), str(tmp_path / "train.py"))
    finally:
        os.chmod(tmp_path / "locked", 0o755)
        os.chmod(tmp_path / "closed", 0o755)
    assert code == 2, err
    assert err.splitlines() == [f"{tmp_path / 'closed'}: error: cannot read the folder: Permission denied",
                                f"{tmp_path / 'locked'}: error: cannot read the folder: Permission denied"]
    assert f"{tmp_path / 'train.py'}{GOOD_LINE}" in out
    code, out, err = named
    assert code == 2 and "Traceback" not in err
    assert err.splitlines() == [f"{tmp_path / 'locked' / 'inner.py'}: error: cannot read the file: Permission denied"]
    assert f"{tmp_path / 'train.py'}{GOOD_LINE}" in out


def test_gitignore_lines_that_git_accepts_are_tolerated(cli, tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("!\n\\\na\\\n[z-a]\nskipped.py\n")
    (tmp_path / "skipped.py").write_text(CPU_SCRIPT)
    (tmp_path / "train.py").write_text(CPU_SCRIPT)
    code, out, err = cli("check", "--no-cache", str(tmp_path))
    assert (code, err) == (1, "")
    assert f"{tmp_path / 'train.py'}{GOOD_LINE}" in out and "skipped.py" not in out


@pytest.mark.parametrize("entry", [[], {"findings": [1]}, {"error": "x"}, {"findings": [{"line": "a"}]},
                                   {"findings": [{"code": "CG101"}]}, None, {"error": {"message": 3}}])
def test_a_cache_entry_of_the_wrong_shape_is_a_miss(cli, tmp_path, monkeypatch, entry):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(CPU_SCRIPT)
    first = cli("check", "train.py")
    entries = list((tmp_path / ".cpu2gpu_cache").rglob("*.json"))
    assert entries
    for path in entries:
        path.write_text(json.dumps(entry))
    assert cli("check", "train.py") == first


@pytest.mark.parametrize("pattern", ["", "."])
def test_an_exclude_pattern_that_cannot_match_is_one_error(cli, tmp_path, pattern):
    (tmp_path / "pyproject.toml").write_text(f"[tool.cpu2gpu]\nexclude = [{json.dumps(pattern)}]\n")
    (tmp_path / "train.py").write_text(CPU_SCRIPT)
    code, _, err = cli("check", "--no-cache", str(tmp_path))
    assert code == 2
    [line] = err.splitlines()
    assert f"{tmp_path / 'pyproject.toml'}: [tool.cpu2gpu] exclude pattern" in line, line
    (tmp_path / "pyproject.toml").write_text("")
    code, _, err = cli("check", "--no-cache", "--exclude", pattern or ",", str(tmp_path))
    assert code == (2 if pattern else 1)


# -- 7: nothing hangs --------------------------------------------------------------------------


def test_a_fifo_in_a_walked_folder_is_skipped(tmp_path):
    (tmp_path / "train.py").write_text(CPU_SCRIPT)
    os.mkfifo(tmp_path / "pipe.py")
    os.mkfifo(tmp_path / "pipe.ipynb")
    result = _run("check", "--no-cache", str(tmp_path))  # (a hang fails at the guard, it does not block)
    assert (result.returncode, result.stderr) == (1, "")
    assert f"{tmp_path / 'train.py'}{GOOD_LINE}" in result.stdout


@pytest.mark.parametrize("command", [("check", "--no-cache"), ("rewrite",)])
def test_a_named_file_that_is_not_a_regular_file_is_refused(tmp_path, command):
    pipe = tmp_path / "pipe.py"
    os.mkfifo(pipe)
    good = tmp_path / "good.py"
    good.write_text(CPU_SCRIPT)
    result = _run(*command, "/dev/zero", str(pipe), str(good))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["/dev/zero: error: not a regular file",
                                                  f"{pipe}: error: not a regular file"]
    assert str(good) in result.stdout  # (the finding, or the diff)


def test_workers_die_with_their_parent(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from cpu2gpu.runs.parallel import ordered_map
        def block(item):
            open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
            signal.pause()
        print("started", flush=True)
        list(ordered_map(block, list(range(32)), 2))
    """)
    process = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    workers: list[int] = []
    try:
        assert process.stdout.readline() == "started\n"
        deadline = time.monotonic() + HANG_GUARD_S  # (a guard against a hang, not a measure: this takes a moment)
        while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:  # both workers run an item
            assert process.poll() is None
            time.sleep(0.01)
        workers = [int(p.name) for p in pids.iterdir()]
        assert len(workers) == 2
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=HANG_GUARD_S)
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline + HANG_GUARD_S:
            time.sleep(0.01)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived their parent"
    finally:
        process.kill()
        process.wait()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("expression", [
    " + ".join(["a"] * 1500), " + ".join(["a"] * 4000), "-" * 1200 + "a", "a" + ".b" * 1200, "f" + "()" * 1200,
])
def test_a_very_deep_expression_is_refused_not_parsed_for_minutes(cli, tmp_path, expression):
    path = tmp_path / "chain.py"
    path.write_text("import torch\nx = " + expression + "\n")
    code, _, err = cli("check", "--no-cache", str(path))
    assert code == 2
    line = _one_error_line(err, path)
    assert "nested" in line and "syntax error" not in line or "Python" in line, line


def test_the_nesting_limit_leaves_long_flat_code_alone(cli, tmp_path):
    path = tmp_path / "flat.py"
    path.write_text("import torch\nx = [" + ", ".join(["1"] * 1000) + "]\n"
                    + "y = (" + " ".join(['"a"'] * 800) + ")\n" + "z = a < " + " < ".join(["b"] * 500) + "\n"
                    + "".join(f"v{i} = a + b\n" for i in range(2000)) + CPU_SCRIPT)
    code, out, err = cli("check", "--no-cache", str(path))
    assert (code, err) == (1, "")


# -- 8: messages -------------------------------------------------------------------------------


@pytest.mark.parametrize("code_text", [
    "import torch\n(x): int = 1\n",
    "import torch\nx = (" + " ".join(['"a"'] * 5000) + ")\n",
])
def test_valid_python_that_libcst_cannot_read_is_not_called_a_syntax_error(cli, tmp_path, code_text):
    path = tmp_path / "train.py"
    path.write_text(code_text)
    code, _, err = cli("check", "--no-cache", str(path))
    assert code == 2
    line = _one_error_line(err, path)
    assert "syntax error" not in line and "valid Python" in line and "libcst" in line, line


def test_a_newline_in_a_file_name_is_escaped(cli, tmp_path):
    folder = tmp_path / "odd\nname"
    folder.mkdir()
    (folder / "train\n.py").write_text(CPU_SCRIPT)
    (folder / "broken\r.py").write_text("import torch\ndef f(:\n")
    code, out, err = cli("check", "--no-cache", str(folder))
    assert code == 2
    shown = str(folder).replace("\n", "\\n")
    assert err.splitlines() == [f"{shown}/broken\\r.py:2:7: error: syntax error: invalid syntax"]
    assert f"{shown}/train\\n.py{GOOD_LINE}" in out.splitlines()[0]
    code, out, err = cli("rewrite", str(folder / "train\n.py"))
    assert f"--- {shown}/train\\n.py" in out.splitlines()


_INTERRUPT_ON_IMPORT = """
import os, signal, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "libcst":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["cpu2gpu", "check", "fixtures/scripts/01_functions_train_epoch.py"]
"""


@pytest.mark.parametrize("start", [
    "import runpy; runpy.run_module('cpu2gpu', run_name='__main__', alter_sys=True)",  # python -m cpu2gpu
    "from cpu2gpu.cli import main; sys.exit(main())",  # the console script
])
def test_sigint_during_start_up_exits_130_quietly(start):
    result = subprocess.run([sys.executable, "-c", _INTERRUPT_ON_IMPORT + start], capture_output=True, text=True,
                            timeout=HANG_GUARD_S, cwd=ROOT)
    assert (result.returncode, result.stderr) == (130, "")
