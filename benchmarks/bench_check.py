"""Time `cpu2gpu check` against the bare libcst parse of the same files, side by side.

    python benchmarks/bench_check.py [FOLDER ...] [--repeat 5]

Default folders: the bundled fixtures, and a sample of the installed torch
package's own .py files (torch/nn, torch/optim, torch/utils/data). Each round
times, over the same files and in alternating order: ``ast.parse``,
``libcst.parse_module``, and the whole in-process check (parse, analysis, rules,
positions where there are findings). Then the CLI itself is timed as a fresh
process (imports included) against a fresh process that only parses.
bench_speed.py adds torchfix and a profile to the same comparison.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path

import libcst

from cpu2gpu.engine import check_module, parse, select_rules

ROOT = Path(__file__).resolve().parent.parent


def default_folders() -> list[Path]:
    folders = [ROOT / "fixtures"]
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        torch_root = Path(spec.origin).parent
        folders += [torch_root / "nn", torch_root / "optim", torch_root / "utils" / "data"]
    return folders


def files_in(folders: list[Path]) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def timed(func, items) -> float:
    start = time.perf_counter()
    for item in items:
        func(item)
    return time.perf_counter() - start


def bench_in_process(label: str, paths: list[Path], repeat: int) -> None:
    sources = [p.read_bytes() for p in paths]
    rules = select_rules()
    findings = sum(len(check_module(parse(s), str(p), rules)) for s, p in zip(sources, paths))
    runs = {"ast.parse": [], "libcst.parse_module": [], "cpu2gpu check": []}
    for _ in range(repeat):
        runs["ast.parse"].append(timed(ast.parse, sources))
        runs["libcst.parse_module"].append(timed(libcst.parse_module, sources))
        runs["cpu2gpu check"].append(timed(lambda s: check_module(parse(s), "f.py", rules), sources))
    base = statistics.median(runs["libcst.parse_module"])
    print(f"\n{label}: {len(paths)} files, {sum(map(len, sources)) / 1e6:.2f} MB, {findings} findings, "
          f"median of {repeat}")
    print(f"  {'':22} {'median s':>9} {'x libcst parse':>15}")
    for name, values in runs.items():
        median = statistics.median(values)
        print(f"  {name:22} {median:9.3f} {median / base:15.2f}")


PARSE_ONLY = (
    "import sys, libcst\n"
    "from pathlib import Path\n"
    "for folder in sys.argv[1:]:\n"
    "    for p in sorted(Path(folder).rglob('*.py')):\n"
    "        libcst.parse_module(p.read_bytes())\n"
)


def bench_cli(folders: list[Path], repeat: int) -> None:
    args = [str(f) for f in folders]
    cli = [sys.executable, "-m", "cpu2gpu", "check", "--output-format", "json", *args]
    parse_only = [sys.executable, "-c", PARSE_ONLY, *args]
    runs = {"process: parse only": [], "process: cpu2gpu check": []}
    for _ in range(repeat):
        for name, command in (("process: parse only", parse_only), ("process: cpu2gpu check", cli)):
            start = time.perf_counter()
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            runs[name].append(time.perf_counter() - start)
    base = statistics.median(runs["process: parse only"])
    print(f"\nwhole processes over all folders (imports included), median of {repeat}")
    for name, values in runs.items():
        median = statistics.median(values)
        print(f"  {name:22} {median:9.3f} {median / base:15.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    folders = options.folders or default_folders()
    for folder in folders:
        bench_in_process(str(folder), files_in([folder]), options.repeat)
    if len(folders) > 1:
        bench_in_process("all folders", files_in(folders), options.repeat)
    bench_cli(folders, options.repeat)


if __name__ == "__main__":
    main()
