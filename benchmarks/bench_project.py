"""Whole projects: what reading a project costs, against the bare libcst parse of the same files.

Builds a tree of N copies of the fixture projects (fixtures/projects/, each copy in a package
folder of its own so that the imports resolve inside it), then measures, side by side in one run:

- the bare ``libcst.parse_module`` of every file (the floor);
- a cold ``cpu2gpu check -j 1 --no-cache`` of the tree, in process (the project seeds included);
- a warm ``cpu2gpu check -j 1`` (the cache filled by a first run).

Usage: python benchmarks/bench_project.py [--copies 45] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import libcst as cst
from click.testing import CliRunner

from cpu2gpu.cli import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "projects"


def build_tree(root: Path, copies: int) -> list[Path]:
    (root / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
    for i in range(copies):
        for project in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
            target = root / f"copy{i}" / project.name
            shutil.copytree(project, target, ignore=shutil.ignore_patterns("*.expected.py", "__pycache__"))
    return sorted(root.rglob("*.py"))


def timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main_() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = build_tree(root, args.copies)
        data = [p.read_bytes() for p in files]
        runner = CliRunner()

        def parse_all():
            for source in data:
                cst.parse_module(source)

        def check_cold():
            result = runner.invoke(main, ["check", "-j", "1", "--no-cache", "-q", "--exit-zero", str(root)])
            assert result.exit_code == 0, result.output

        def check_warm():
            result = runner.invoke(main, ["check", "-j", "1", "-q", "--exit-zero", str(root)])
            assert result.exit_code == 0, result.output

        check_warm()  # fills the cache
        rows = {"libcst parse": [], "check cold": [], "check warm": []}
        for _ in range(args.repeat):  # interleaved, so that load on the machine hits all three alike
            rows["libcst parse"].append(timed(parse_all))
            rows["check cold"].append(timed(check_cold))
            rows["check warm"].append(timed(check_warm))
        floor = statistics.median(rows["libcst parse"])
        print(f"{len(files)} files, {sum(map(len, data)) / 1e6:.2f} MB, median of {args.repeat}")
        for name, times in rows.items():
            median = statistics.median(times)
            print(f"  {name:14s} {median:7.2f} s  {median / floor:5.2f}x parse")


if __name__ == "__main__":
    main_()
