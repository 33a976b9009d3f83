"""CI runs the README's test command, and that command runs both tiers of the tests."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import ROOT


def test_ci_runs_the_readmes_test_command_with_both_tiers():
    command = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
               if line.strip() and not line.startswith(("#", "set ", "cd "))]
    # before the test command, only the optional system packages of .ci/ (the browser of one test)
    assert command and all(line.startswith(".ci/") for line in command[:-1]), command
    test_command = command[-1]
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert test_command in [line for block in blocks for line in block.splitlines()], test_command
    runs = re.findall(r"-m pytest [^&;|]*", test_command)
    assert len(runs) == 2 and "-m slow" not in runs[0] and runs[1].rstrip().endswith("-m slow"), runs


def test_every_package_folder_is_in_the_distribution():
    """A folder of cpu2gpu/ left out of [tool.setuptools] packages is missing from a regular install
    (pre-commit's, pip's) while an editable one still works: list them all."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    def packages(root: Path, name: str) -> set[str]:
        # every folder with an __init__.py, at any depth (runtime/standins/ as much as analysis/)
        return {".".join([name, *init.parent.relative_to(root).parts]) for init in root.rglob("__init__.py")}

    found = packages(ROOT / "cpu2gpu", "cpu2gpu") | packages(ROOT / "runtime", "cpu2gpu.runtime")
    assert found == listed
