"""The pre-commit hooks, driven by the real pre-commit program against a throw-away repository."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import FIXTURES, ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pre_commit") is None,
                                reason="pre-commit is not installed (it comes with the test extra)")

CPU_SCRIPT = "import torch\n\nmodel = torch.nn.Linear(1, 1)\nprint(model(torch.ones(1)))\n"
PROJECT_FILES = ["pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "cpu2gpu", "runtime"]


def _git(cwd, *args, env):
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def env(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("GIT_", "PRE_COMMIT"))}
    env.update({
        "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
    })
    return env


@pytest.fixture
def hook_repo(tmp_path, env):
    """A copy of this project in a git repository of its own: what `repo:` points to."""
    project = tmp_path / "cpu2gpu-hooks"
    project.mkdir()
    for name in PROJECT_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, project / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, project / name)
    _git(project, "init", "-q", env=env)
    _git(project, "add", ".", env=env)
    _git(project, "commit", "-q", "-m", "hooks", env=env)
    return project, _git(project, "rev-parse", "HEAD", env=env).strip()


def test_the_hooks_entries_refuse_the_files_and_rewrite_fixes_them(tmp_path, cli):
    """The default tier's stand-in for the slow test below: each hook's entry, as pre-commit would
    run it (the files as arguments), without pre-commit's environment and commits."""
    import shlex

    import yaml

    hooks = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    check, rewrite = (shlex.split(hooks[name]["entry"]) for name in ("cpu2gpu-check", "cpu2gpu-rewrite"))
    assert check[0] == rewrite[0] == "cpu2gpu"
    (tmp_path / "train.py").write_text(CPU_SCRIPT)
    shutil.copy(FIXTURES / "notebooks" / "linear_regression.ipynb", tmp_path / "notebook.ipynb")
    files = [str(tmp_path / "train.py"), str(tmp_path / "notebook.ipynb")]

    code, out, _ = cli(*check[1:], *files)
    assert code == 1, out
    assert "train.py:3:9: CG101" in out and "notebook.ipynb:cell 5:1:9: CG101" in out
    code, _, err = cli(*rewrite[1:], *files)
    assert code == 1, err  # it changed the files: the commit is refused, as formatters refuse it
    assert "model = torch.nn.Linear(1, 1).to(device)" in (tmp_path / "train.py").read_text()
    assert (tmp_path / "notebook.ipynb").read_bytes() == (
        FIXTURES / "notebooks" / "linear_regression.expected.ipynb").read_bytes()
    assert cli(*check[1:], *files)[0] == 0
    assert cli(*rewrite[1:], *files)[0] == 0


# CG105's fix is unsafe: `rewrite` leaves it out, and both hooks must say how to get it
UNSAFE_SCRIPT = ("import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.scale = torch.ones(4)\n    def forward(self, x):\n"
                 "        return x * self.scale\n")
UNSAFE_HINT = "1 more fix is available with `cpu2gpu rewrite --unsafe-fixes`."


def test_the_hooks_entries_tell_of_the_unsafe_fixes(tmp_path, cli):
    import shlex

    import yaml

    hooks = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    check, rewrite = (shlex.split(hooks[name]["entry"]) for name in ("cpu2gpu-check", "cpu2gpu-rewrite"))
    path = tmp_path / "model.py"
    path.write_text(UNSAFE_SCRIPT)
    code, out, _ = cli(*check[1:], str(path))
    assert code == 1 and "CG105 `self.scale`" in out and "CG105 [*]" not in out  # not fixable by the hook
    assert out.splitlines()[-1] == UNSAFE_HINT
    code, out, err = cli(*rewrite[1:], str(path))
    assert code == 0 and path.read_text() == UNSAFE_SCRIPT  # the rewrite hook passes, changing nothing...
    assert UNSAFE_HINT in err  # ...and says why the check hook still fails


# pre-commit builds the hooks' environment (a virtual environment, pip install of this project): minutes
@pytest.mark.slow
def test_the_hooks_output_tells_of_the_unsafe_fixes(tmp_path, env, hook_repo):
    project, rev = hook_repo
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", env=env)
    (work / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {project}\n  rev: {rev}\n  hooks:\n  - id: cpu2gpu-check\n  - id: cpu2gpu-rewrite\n")
    (work / "model.py").write_text(UNSAFE_SCRIPT)
    _git(work, "add", ".", env=env)
    run = subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=work, env=env,
                         capture_output=True, text=True)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output
    # the check hook fails, and its output says how to get the fix (pre-commit shows the output of
    # the hooks that fail: the rewrite hook passes, and says the same to those who run it verbose)
    assert "CG105" in output and UNSAFE_HINT in output, output
    assert (work / "model.py").read_text() == UNSAFE_SCRIPT


# pre-commit builds the hooks' environment (a virtual environment, pip install of this project): minutes
@pytest.mark.slow
def test_check_refuses_the_commit_and_rewrite_fixes_it(tmp_path, env, hook_repo):
    project, rev = hook_repo
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", env=env)
    (work / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {project}\n  rev: {rev}\n  hooks:\n  - id: cpu2gpu-check\n  - id: cpu2gpu-rewrite\n")
    (work / "train.py").write_text(CPU_SCRIPT)
    shutil.copy(FIXTURES / "notebooks" / "linear_regression.ipynb", work / "notebook.ipynb")
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=work, env=env, check=True,
                   capture_output=True)
    _git(work, "add", ".", env=env)

    refused = subprocess.run(["git", "commit", "-m", "cpu script"], cwd=work, env=env, capture_output=True, text=True)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert "cpu2gpu check" in output and "train.py:3:9: CG101" in output
    assert "notebook.ipynb:cell 5:1:9: CG101" in output
    assert "files were modified by this hook" in output
    assert "model = torch.nn.Linear(1, 1).to(device)" in (work / "train.py").read_text()
    assert (work / "notebook.ipynb").read_bytes() == (
        FIXTURES / "notebooks" / "linear_regression.expected.ipynb").read_bytes()

    _git(work, "add", ".", env=env)
    accepted = subprocess.run(["git", "commit", "-m", "gpu script"], cwd=work, env=env, capture_output=True,
                              text=True)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "Passed" in accepted.stdout + accepted.stderr

    # The hooks' environment has cpu2gpu and what it needs, never torch.
    environments = list((tmp_path / "pre-commit-home").glob("repo*/py_env-*"))
    assert environments
    for environment in environments:
        site_packages = list(environment.glob("lib/python*/site-packages")) + list(environment.glob("Lib/site-packages"))
        assert site_packages and any((s / "libcst").is_dir() for s in site_packages)
        assert not any((s / "torch").exists() for s in site_packages)
