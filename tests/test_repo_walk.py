"""Whole repositories: .gitignore and --exclude, parallel runs in a stable order, the cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cpu2gpu.runs import checking
from cpu2gpu.sources.cache import CACHE_DIR_NAME, fingerprinted_modules
from cpu2gpu.sources.files import discover
from cpu2gpu.runs.parallel import ordered_map
from cpu2gpu.runs.progress import Progress

CPU_SCRIPT = "import torch\nmodel = torch.nn.Linear({n}, 1)\nmodel(torch.ones({n}))\n"


def _tree(root, count=24):
    """A small repository: scripts with findings, a clean one, a broken one, a notebook-free package."""
    for n in range(count):
        folder = root / f"pkg{n % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"train_{n:02d}.py").write_text(CPU_SCRIPT.format(n=n + 1) + "\n" * n)
    (root / "pkg0" / "broken.py").write_text("import torch\ndef f(:\n")
    (root / "pkg1" / "clean.py").write_text("import torch\nx = 1\n")
    return root


def _pid(_: int) -> int:
    return os.getpid()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the cache goes beside the run, not into the checkout
    return _tree(tmp_path / "repo")


def test_parallel_output_equals_serial_output(cli, repo):
    serial = cli("check", "-j", "1", "--no-cache", str(repo))
    parallel = cli("check", "-j", "2", "--no-cache", str(repo))
    assert serial == parallel
    code, out, err = serial
    assert code == 2 and "broken.py:2:7: error" in err
    assert len([line for line in out.splitlines() if "CG101" in line]) == 24
    for output_format in ("json", "sarif", "github"):
        assert cli("check", "-j", "1", "--no-cache", "--output-format", output_format, str(repo)) == cli(
            "check", "-j", "2", "--no-cache", "--output-format", output_format, str(repo))


def test_parallel_map_uses_other_processes_and_keeps_order():
    assert set(ordered_map(_pid, list(range(40)), jobs=2)) - {os.getpid()}
    assert list(ordered_map(abs, list(range(-40, 0)), jobs=2)) == list(range(40, 0, -1))


def test_second_run_is_answered_from_the_cache(cli, repo, monkeypatch, tmp_path):
    first = cli("check", "-j", "1", "--output-format", "json", str(repo))
    assert (tmp_path / CACHE_DIR_NAME / ".gitignore").read_text().strip().endswith("*")

    def no_analysis(job):
        raise AssertionError(f"analysed again: {job[0]}")

    monkeypatch.setattr(checking, "analyse", no_analysis)
    assert cli("check", "-j", "1", "--output-format", "json", str(repo)) == first
    # A changed file is analysed again; other settings are other entries.
    (repo / "pkg1" / "clean.py").write_text("import torch\nx = 2\n")
    with pytest.raises(AssertionError, match="clean.py"):
        cli("check", "-j", "1", str(repo))
    with pytest.raises(AssertionError, match="analysed again"):
        cli("check", "-j", "1", "--select", "CG101", str(repo / "pkg0"))


def test_cache_entries_do_not_carry_the_path(cli, repo, tmp_path):
    copy = tmp_path / "copy.py"
    source = repo / "pkg0" / "train_00.py"
    copy.write_bytes(source.read_bytes())
    cli("check", str(source))
    _, out, _ = cli("check", "--output-format", "json", str(copy))
    assert {d["path"] for d in json.loads(out)} == {str(copy)}


def test_the_cache_key_covers_every_layer_of_the_package():
    """An upgrade that changes a rule or the analysis must not be answered from entries the old code wrote:
    the fingerprint reads every module of the package, not only the folder the cache lives in."""
    package = Path(checking.__file__).resolve().parent.parent
    modules = {path.relative_to(package).as_posix() for path in fingerprinted_modules()}
    for module in ("engine.py", "analysis/analyzer.py", "rules/__init__.py", "rewrite/fixes.py", "sources/cache.py"):
        assert module in modules, module


def test_no_cache_writes_nothing(cli, repo, tmp_path):
    cli("check", "--no-cache", str(repo))
    assert not (tmp_path / CACHE_DIR_NAME).exists()


def test_gitignored_files_and_folders_are_skipped(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "project"
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "info" / "exclude").write_text("local_*.py\n")
    (root / ".gitignore").write_text("generated/\n*_tmp.py\n!keep_tmp.py\n")
    (root / "src" / "generated").mkdir(parents=True)
    (root / "src" / "nested").mkdir()
    (root / "src" / "nested" / ".gitignore").write_text("/only_here.py\n")
    for name in ["src/train.py", "src/generated/model.py", "src/scratch_tmp.py", "src/keep_tmp.py",
                 "src/local_notes.py", "src/nested/only_here.py", "src/nested/fine.py", "src/only_here.py"]:
        (root / name).write_text(CPU_SCRIPT.format(n=1))
    walked = sorted(os.path.relpath(t.path, root) for t in discover([str(root)]))
    assert walked == ["src/keep_tmp.py", "src/nested/fine.py", "src/only_here.py", "src/train.py"]
    # The repository's .gitignore applies to a walk that starts below it, too.
    assert sorted(os.path.relpath(t.path, root) for t in discover([str(root / "src")])) == walked
    # A file named on the command line is always checked.
    _, out, _ = cli("check", "--output-format", "json", str(root / "src" / "scratch_tmp.py"))
    assert json.loads(out)


def test_exclude_on_the_command_line(cli, repo):
    _, out, _ = cli("check", "--output-format", "json", "--exclude", "pkg1,broken.py", "--exclude", "train_0*.py",
                    str(repo))
    paths = {os.path.relpath(d["path"], repo) for d in json.loads(out)}
    assert paths and all(p.startswith("pkg") and not p.startswith("pkg1") for p in paths)
    assert not any(os.path.basename(p).startswith("train_0") for p in paths)
    code, out, _ = cli("rewrite", "--exclude", "pkg*", str(repo))
    assert (code, out) == (0, "")


def test_progress_bar_only_on_a_terminal_and_not_when_quiet():
    class Terminal:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, text):
            self.text += text

        def flush(self):
            pass

    stream = Terminal()
    bar = Progress(200, "cpu2gpu check", True, stream)
    for _ in range(200):
        bar.advance()
    bar.close()
    assert "200/200" in stream.text and stream.text.endswith("\r\033[K")
    quiet = Terminal()
    small = Progress(10, "cpu2gpu check", True, quiet)
    small.advance()
    assert quiet.text == ""  # too few files to be worth a bar


def test_a_folder_named_on_the_command_line_is_walked_even_if_ignored(tmp_path):
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / ".gitignore").write_text("vendor/\n")
    (root / "vendor" / "lib").mkdir(parents=True)
    (root / "vendor" / ".gitignore").write_text("skip.py\n")
    for name in ("vendor/lib/a.py", "vendor/lib/skip.py", "vendor/b.py"):
        (root / name).write_text("import torch\n")
    assert [t.path for t in discover([str(root)])] == []
    assert sorted(os.path.relpath(t.path, root) for t in discover([str(root / "vendor")])) == [
        "vendor/b.py", "vendor/lib/a.py"]


def test_force_exclude_applies_the_patterns_to_named_files(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "legacy").mkdir()
    for name in ("legacy/old.py", "new.py", "old_tmp.py"):
        (tmp_path / name).write_text(CPU_SCRIPT.format(n=1))
    (tmp_path / "pyproject.toml").write_text('[tool.cpu2gpu]\nexclude = ["legacy"]\n')
    named = ["legacy/old.py", "new.py", "old_tmp.py"]
    _, out, _ = cli("check", "--output-format", "json", *named)
    assert {d["path"] for d in json.loads(out)} == set(named)
    _, out, _ = cli("check", "--output-format", "json", "--force-exclude", "--exclude", "*_tmp.py", *named)
    assert {d["path"] for d in json.loads(out)} == {"new.py"}
    code, out, _ = cli("rewrite", "--force-exclude", "--exclude", "new.py,*_tmp.py", *named)
    assert (code, out) == (0, "")
