"""Time `cpu2gpu check` against the bare libcst parse of the same files, side by side.

    python benchmarks/bench_check.py [FOLDER ...] [--repeat 5] [--examples] [--project COPIES]
                                     [--processes-only] [--tool PATH] [--bytecode]

Default folders: the bundled fixtures, and a sample of the installed torch
package's own .py files (torch/nn, torch/optim, torch/utils/data); ``--examples``:
the .py files of pytorch/examples and yunjey/pytorch-tutorial (114 files, from
their mirrors under /work/.mirror: the search tool's fetch). Each round times, over
the same files and in alternating order: ``ast.parse``, ``libcst.parse_module``,
and the whole in-process check (parse, analysis, rules, positions where there are
findings).

Then whole processes, interleaved, medians of ``--repeat`` (the figures the README
gives): a fresh interpreter that only parses every .py file (check parses those that
mention torch and the project files they reach), a cold ``check -j 1 --no-cache``, ``check -j 2 --no-cache`` and a
``check -j 1`` from a warm cache, each with its wall time, CPU time (workers included; the
steadier figure on a shared machine) and peak RSS against the parse's; "over import" is the peak minus that of an interpreter that only imported
(libcst for the parse, cpu2gpu for check): the memory the work itself took.
``--project COPIES`` adds the same table for a tree of copies of fixtures/projects
(project mode: imports resolved across files, bench_project.py's tree). ``--tool``
times another copy of the package (``git archive HEAD cpu2gpu | tar -x -C /tmp/old``
before a change, then ``--tool /tmp/old``). ``--bytecode`` runs every process with its
modules' bytecode cached, as an installed package runs (a checkout under
``PYTHONDONTWRITEBYTECODE=1`` without ``__pycache__`` compiles cpu2gpu's 0.6 MB of source
in every process, about 0.1 s). bench_speed.py adds torchfix and a profile to the same
comparison.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

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


PARSE_ONLY = r"""
import sys, libcst
from pathlib import Path
for name in sys.argv[1:]:
    for p in sorted(Path(name).rglob('*.py')) if Path(name).is_dir() else [Path(name)]:
        libcst.parse_module(p.read_bytes())
"""
IMPORT_ONLY = {"libcst": "import libcst", "cpu2gpu": "import cpu2gpu.cli"}

# The mirrored public example repositories (bare git directories fetched under /work/.mirror): the
# 114 .py files of pytorch/examples and yunjey/pytorch-tutorial are the set issue 28 measures.
EXAMPLE_REPOSITORIES = ("pytorch+examples", "yunjey+pytorch-tutorial")
MIRROR = Path("/work/.mirror")


def materialise_examples(into: Path) -> list[Path]:
    """The .py files at HEAD of the mirrored example repositories, written under ``into``."""
    folders = []
    for name in EXAMPLE_REPOSITORIES:
        git_dir = MIRROR / name / "repo"
        if not git_dir.is_dir():
            sys.exit(f"{git_dir} is missing: fetch github:{name.replace('+', '/')} first")
        listing = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", "HEAD"],
                                 capture_output=True, text=True, check=True).stdout.split("\n")
        folder = into / name.split("+", 1)[1]
        for path in (line for line in listing if line.endswith(".py")):
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(subprocess.run(["git", "--git-dir", str(git_dir), "show", f"HEAD:{path}"],
                                              capture_output=True, check=True).stdout)
        folders.append(folder)
    return folders


# Started by a small interpreter of its own, which times it and reads its peak RSS: a process forked
# from this one would start with this one's high-water mark (the kernel keeps it across exec).
LAUNCHER = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
elapsed = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # it and its workers: the peak of the largest, CPU of all
with open(sys.argv[1], "w") as handle:
    json.dump({"seconds": elapsed, "cpu": usage.ru_utime + usage.ru_stime, "kib": usage.ru_maxrss,
               "code": done.returncode, "stderr": done.stderr.decode()[-2000:]}, handle)
"""


def run_process(command: list[str], cwd: Path, env: dict) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS in MB of one fresh process (with its worker processes: their
    CPU added, the largest peak)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        subprocess.run([sys.executable, "-c", LAUNCHER, report.name, *command], cwd=cwd, env=env, check=True)
        result = json.loads(Path(report.name).read_text())
    if result["code"] not in (0, 2):  # 2: a file that cannot be parsed; the run still counts
        sys.exit(f"{' '.join(command)} failed ({result['code']}):\n{result['stderr']}")
    return result["seconds"], result["cpu"], result["kib"] / 1024


def bench_processes(label: str, folders: list[Path], repeat: int, tool: Optional[Path] = None,
                    bytecode: Optional[Path] = None) -> None:
    """Whole processes, side by side (interleaved rounds, medians): the bare parse, a cold
    ``check -j 1 --no-cache``, ``check -j 2 --no-cache``, ``check -j 1`` from a warm cache; wall time
    and peak RSS, and both against the parse. Each process starts in a scratch folder (its cache there)."""
    args = [str(f) for f in folders]
    files = files_in(folders)
    torch_files = sum(b"torch" in p.read_bytes() for p in files)
    size = sum(p.stat().st_size for p in files)
    env = dict(os.environ)
    if tool is not None:  # another copy of the package (a snapshot taken before a change)
        env["PYTHONPATH"] = str(tool)
    if bytecode is not None:  # every process reads compiled modules, as from an installed package
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)  # (written by the first run below)
    check = [sys.executable, "-m", "cpu2gpu", "check", "--exit-zero", "--quiet"]
    plan = {
        "import libcst": [sys.executable, "-c", IMPORT_ONLY["libcst"]],
        "import cpu2gpu": [sys.executable, "-c", IMPORT_ONLY["cpu2gpu"]],
        "libcst parse": [sys.executable, "-c", PARSE_ONLY, *args],
        "check -j 1 --no-cache": [*check, "-j", "1", "--no-cache", *args],
        "check -j 2 --no-cache": [*check, "-j", "2", "--no-cache", *args],
        "check -j 1 (warm cache)": [*check, "-j", "1", *args],
    }
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in plan}
    with tempfile.TemporaryDirectory(prefix="cpu2gpu-bench-") as scratch:
        cwd = Path(scratch)
        run_process(plan["check -j 1 (warm cache)"], cwd, env)  # fills the cache (and the OS's file cache)
        for _ in range(repeat):
            for name, command in plan.items():
                runs[name].append(run_process(command, cwd, env))
    median = {name: tuple(statistics.median(run[i] for run in values) for i in range(3))
              for name, values in runs.items()}
    parse_s, parse_cpu, parse_mb = median["libcst parse"]
    work_parse = parse_mb - median["import libcst"][2]
    print(f"\n{label}: {len(files)} .py files ({torch_files} mention torch), {size / 1e6:.2f} MB; whole processes, "
          f"median of {repeat}, interleaved")
    print(f"  {'':26} {'wall s':>7} {'x parse':>8} {'CPU s':>6} {'x parse':>8} {'peak RSS MB':>12} {'x parse':>8} "
          f"{'over import':>12} {'x parse':>8}")
    for name, (seconds, cpu, mb) in median.items():
        imported = median["import libcst" if name in ("import libcst", "libcst parse") else "import cpu2gpu"][2]
        measured = name.startswith(("libcst", "check"))
        over = mb - imported
        ratio = f"{over / work_parse:8.2f}" if measured and work_parse > 0 else f"{'':8}"
        over_text = f"{over:12.1f}" if measured else f"{'':12}"
        print(f"  {name:26} {seconds:7.2f} {seconds / parse_s:8.2f} {cpu:6.2f} {cpu / parse_cpu:8.2f} {mb:12.1f} "
              f"{mb / parse_mb:8.2f} {over_text} {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--examples", action="store_true",
                        help="the .py files of the mirrored pytorch/examples and yunjey/pytorch-tutorial")
    parser.add_argument("--project", type=int, metavar="COPIES", default=0,
                        help="also a project tree of COPIES copies of fixtures/projects (bench_project.py's)")
    parser.add_argument("--processes-only", action="store_true", help="only the whole-process table(s)")
    parser.add_argument("--tool", type=Path, help="a folder holding another copy of the cpu2gpu package to time")
    parser.add_argument("--bytecode", action="store_true",
                        help="every process with its modules' bytecode cached (in a scratch folder), as an "
                             "installed package runs; without it, as the environment says (a checkout under "
                             "PYTHONDONTWRITEBYTECODE=1 compiles cpu2gpu's sources in every process)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpu2gpu-inputs-") as inputs:
        bytecode = Path(inputs) / "pycache" if options.bytecode else None
        folders = options.folders or (materialise_examples(Path(inputs)) if options.examples else default_folders())
        if not options.processes_only:
            for folder in folders:
                bench_in_process(str(folder), files_in([folder]), options.repeat)
            if len(folders) > 1:
                bench_in_process("all folders", files_in(folders), options.repeat)
        bench_processes(", ".join(f.name for f in folders), folders, options.repeat, options.tool, bytecode)
        if options.project:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from bench_project import build_tree

            tree = Path(inputs) / "project"
            tree.mkdir()
            build_tree(tree, options.project)
            bench_processes(f"project mode ({options.project} copies of fixtures/projects)", [tree],
                            options.repeat, options.tool, bytecode)


if __name__ == "__main__":
    main()
