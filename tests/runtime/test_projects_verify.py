"""Whole projects on the simulated GPU: the rewrite of a fixture project, run with its sibling
files, passes `verify --device sim --against` the original (a sample; every project by hand with
`python benchmarks/verify_projects.py`)."""

import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from cpu2gpu.project.projectset import project_seeds  # noqa: E402
from cpu2gpu.engine import rewrite_data, select_rules  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402
from cpu2gpu.analysis.seeds import NO_SEEDS  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime
PROJECTS = Path(__file__).resolve().parents[2] / "fixtures" / "projects"


def migrate(project: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Copies of the original project and of its rewrite (by the tool, not the expected files)."""
    original, migrated = tmp_path / "original", tmp_path / "migrated"
    for target in (original, migrated):
        shutil.copytree(project, target, ignore=shutil.ignore_patterns("*.expected.py", "__pycache__"))
    files = [str(p) for p in sorted(migrated.rglob("*.py"))]
    seeds = project_seeds(files)
    rules = select_rules()
    for path in files:
        data = Path(path).read_bytes()
        _, new = rewrite_data(data, path, rules, seeds=seeds.get(path, NO_SEEDS))
        Path(path).write_bytes(new)
    return original, migrated


@pytest.mark.parametrize("name, entry", [("flat_siblings", "main.py"), ("trainer_class", "main.py")])
def test_a_migrated_project_trains_on_the_simulated_gpu(name, entry, tmp_path):
    original, migrated = migrate(PROJECTS / name, tmp_path)
    rep = verify(str(migrated / entry), against=str(original / entry), device="sim", cwd=str(migrated),
                 max_steps=6, timeout=HANG_GUARD_S)
    assert rep["verdict"] == "pass", rep["reasons"]
    sim = next(r for r in rep["runs"] if r["mode"] == "sim")
    assert sim["device_forward_calls"] > 0 and sim["steps"] == 6
