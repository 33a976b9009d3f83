"""`cpu2gpu check` side by side with the bare parsers and with torchfix, on the same files.

    python benchmarks/bench_speed.py [FOLDER ...] [--repeat 5] [--torchfix-python PATH] [--profile]

Default folders: torch/nn, torch/optim and torch/utils/data of the installed torch
(read as text, never imported) and the bundled fixtures. Only the files that mention
torch are timed, the pre-filter that both tools apply before parsing.

torchfix pins an older libcst, so it lives in a venv of its own:

    python3 -m venv /tmp/tfv && /tmp/tfv/bin/pip install torchfix

(torchfix does not depend on torch.) Its in-process time is measured by that venv's
Python with the same loop, and its libcst parse is timed there too.

Rows, each the median of --repeat rounds taken in alternating order:
  in process   ast.parse, libcst.parse_module, cpu2gpu check (parse, analysis, rules,
               positions where there are findings), torchfix (parse, its visitors, fixes)
  processes    a fresh interpreter that only parses, `cpu2gpu check -j 1 --no-cache`,
               `torchfix -j 1`, and both with 2 jobs
Ratios: to the libcst parse of the same section, and to torchfix.
--profile prints where `check` spends its time (cProfile, in process).
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import importlib.util
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import libcst

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cpu2gpu.engine import check_module, parse, select_rules  # noqa: E402
from cpu2gpu.sources.files import mentions_torch  # noqa: E402

DEFAULT_TORCHFIX_PYTHON = "/tmp/tfv/bin/python"

# Run by torchfix's Python: times parse+transform (and the parse alone) over the files named
# in a JSON list on stdin, the loop that torchfix's CLI runs in each worker; prints JSON.
TORCHFIX_TIMER = r"""
import contextlib, io, json, sys, time
import libcst
from libcst.codemod import CodemodContext, transform_module
from torchfix.torchfix import TorchCodemod, TorchCodemodConfig, process_error_code_str

paths, repeat = json.load(sys.stdin)
sources = [open(p, encoding="utf-8", errors="replace").read() for p in paths]
config = TorchCodemodConfig()
config.select = list(process_error_code_str(None))
from importlib.metadata import version
out = {"torchfix": [], "torchfix venv: libcst.parse_module": [], "libcst": version("libcst")}
for _ in range(repeat):
    start = time.perf_counter()
    for code in sources:
        libcst.parse_module(code)
    out["torchfix venv: libcst.parse_module"].append(time.perf_counter() - start)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        for path, code in zip(paths, sources):
            transform_module(TorchCodemod(CodemodContext(filename=path), config), code)
    out["torchfix"].append(time.perf_counter() - start)
print(json.dumps(out))
"""

PARSE_ONLY = (
    "import sys, libcst\n"
    "from pathlib import Path\n"
    "for folder in sys.argv[1:]:\n"
    "    for p in sorted(Path(folder).rglob('*.py')):\n"
    "        data = p.read_bytes()\n"
    "        if b'torch' in data:\n"
    "            libcst.parse_module(data)\n"
)


def default_folders() -> list[Path]:
    folders = []
    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        torch_root = Path(spec.origin).parent
        folders += [torch_root / "nn", torch_root / "optim", torch_root / "utils" / "data"]
    return folders + [ROOT / "fixtures"]


def torch_files(folders: list[Path]) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py") if mentions_torch(p.read_bytes()))


def libcst_version() -> str:
    from importlib.metadata import version

    return version("libcst")


def timed(func, items) -> float:
    start = time.perf_counter()
    for item in items:
        func(item)
    return time.perf_counter() - start


def in_process(paths: list[Path], repeat: int, torchfix_python: str | None) -> dict[str, list[float]]:
    sources = [p.read_bytes() for p in paths]
    rules = select_rules()
    runs: dict[str, list[float]] = {"ast.parse": [], f"libcst {libcst_version()} parse_module": [], "cpu2gpu check": []}
    for _ in range(repeat):
        runs["ast.parse"].append(timed(ast.parse, sources))
        runs[f"libcst {libcst_version()} parse_module"].append(timed(libcst.parse_module, sources))
        runs["cpu2gpu check"].append(timed(lambda s: check_module(parse(s), "f.py", rules), sources))
    if torchfix_python:
        result = subprocess.run([torchfix_python, "-c", TORCHFIX_TIMER], input=json.dumps([list(map(str, paths)), repeat]),
                                capture_output=True, text=True, check=True)
        data = json.loads(result.stdout)
        runs["torchfix"] = data["torchfix"]
        runs[f"libcst {data['libcst']} parse (torchfix's venv)"] = data["torchfix venv: libcst.parse_module"]
    return runs


def processes(folders: list[Path], repeat: int, torchfix_python: str | None) -> dict[str, list[float]]:
    args = [str(f) for f in folders]
    check = [sys.executable, "-m", "cpu2gpu", "check", "--exit-zero", "--quiet", "--no-cache", "--output-format", "json"]
    commands = {
        "process: parse only": [sys.executable, "-c", PARSE_ONLY, *args],
        "process: cpu2gpu check -j 1": [*check, "-j", "1", *args],
        "process: cpu2gpu check -j 2": [*check, "-j", "2", *args],
    }
    if torchfix_python:
        torchfix = str(Path(torchfix_python).parent / "torchfix")
        commands["process: torchfix -j 1"] = [torchfix, "-j", "1", *args]
        commands["process: torchfix -j 2"] = [torchfix, "-j", "2", *args]
    runs: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as scratch:  # no pyproject, .gitignore or cache of the checkout
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for _ in range(repeat):
            for name, command in commands.items():
                start = time.perf_counter()
                subprocess.run(command, cwd=scratch, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                runs[name].append(time.perf_counter() - start)
    return runs


def table(title: str, runs: dict[str, list[float]], base: str, torchfix: str | None) -> None:
    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(f"\n{title}")
    header = f"  {'':38} {'median s':>9} {'x parse':>8}"
    if torchfix in medians:
        header += f" {'torchfix / this':>16}"
    print(header)
    for name, median in medians.items():
        row = f"  {name:38} {median:9.3f} {median / medians[base]:8.2f}"
        if torchfix in medians:
            row += f" {medians[torchfix] / median:16.1f}"
        print(row)


def profile(paths: list[Path], top: int = 25) -> None:
    sources = [p.read_bytes() for p in paths]
    rules = select_rules()
    profiler = cProfile.Profile()
    profiler.enable()
    for source in sources:
        check_module(parse(source), "f.py", rules)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(row[2] for row in stats.stats.values())  # tottime over every function
    by_area: dict[str, float] = {}
    for (filename, _, _), row in stats.stats.items():
        area = ("libcst parser" if "libcst/_parser" in filename else "libcst nodes/visitors" if "libcst" in filename
                else "cpu2gpu " + Path(filename).stem if "cpu2gpu" in filename else "other")
        by_area[area] = by_area.get(area, 0.0) + row[2]
    print(f"\nprofile of check over {len(paths)} files: own time by area (total {total:.2f} s)")
    for area, seconds in sorted(by_area.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {area:30} {seconds:7.2f} s {100 * seconds / total:5.1f} %")
    print()
    stats.sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--torchfix-python", default=DEFAULT_TORCHFIX_PYTHON,
                        help="the Python of a venv with torchfix ('' to skip torchfix)")
    parser.add_argument("--no-processes", action="store_true", help="skip the whole-process rows")
    parser.add_argument("--profile", action="store_true")
    options = parser.parse_args()
    folders = [f.resolve() for f in options.folders] or default_folders()
    torchfix_python = options.torchfix_python if options.torchfix_python and Path(options.torchfix_python).exists() else None
    if options.torchfix_python and not torchfix_python:
        print(f"torchfix: {options.torchfix_python} not found, skipped (see the docstring)")
    paths = torch_files(folders)
    size = sum(p.stat().st_size for p in paths) / 1e6
    print(f"{len(paths)} files that mention torch, {size:.2f} MB, in {', '.join(map(str, folders))}; "
          f"median of {options.repeat}; {sys.executable}")
    torchfix_row = "torchfix" if torchfix_python else None
    table("in process (files already read)", in_process(paths, options.repeat, torchfix_python),
          f"libcst {libcst_version()} parse_module", torchfix_row)
    if not options.no_processes:
        table("whole processes (interpreter start and imports included)",
              processes(folders, options.repeat, torchfix_python), "process: parse only",
              "process: torchfix -j 1" if torchfix_python else None)
    if options.profile:
        profile(paths)


if __name__ == "__main__":
    main()
