"""Time `cpu2gpu check` over a whole tree: cold with -j 1, cold with -j N, warm from the cache.

    python benchmarks/bench_repo.py [FOLDER] [--jobs 2] [--repeat 1]

Default folder: the installed torch package's nn, optim, utils and distributed
subpackages (600+ .py files). The folder is copied into a temporary directory and
each run is a fresh `cpu2gpu check --exit-zero --quiet` process started there, so
the cache (.cpu2gpu_cache/ in that directory) starts empty for the cold runs and
no .gitignore of the surrounding checkout applies. The runs use a snapshot of the
cpu2gpu package taken at the start, so that edits to the checkout during the runs
neither change the code under test nor invalidate the cache. All runs happen in one sitting,
in this order: cold -j 1, cold -j N, warm -j N (the cache the previous run wrote),
and, for reference, -j N with --no-cache.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cpu2gpu
from cpu2gpu.sources.cache import CACHE_DIR_NAME


def default_sources() -> list[Path]:
    spec = importlib.util.find_spec("torch")
    if not spec or not spec.origin:
        sys.exit("torch is not installed: name a folder to check")
    root = Path(spec.origin).parent
    return [root / name for name in ("nn", "optim", "utils", "distributed")]


def copy_tree(sources: list[Path], into: Path) -> Path:
    sample = into / "sample"
    for source in sources:
        shutil.copytree(source, sample / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    return sample


def snapshot_tool(into: Path) -> Path:
    tool = into / "tool"
    shutil.copytree(Path(cpu2gpu.__file__).parent, tool / "cpu2gpu", ignore=shutil.ignore_patterns("__pycache__"))
    return tool


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(folder: Path, cwd: Path, tool: Path, *options: str) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (the process and its workers) and the output of one run."""
    command = [sys.executable, "-m", "cpu2gpu", "check", "--exit-zero", "--quiet", *options, str(folder)]
    env = {**os.environ, "PYTHONPATH": str(tool)}
    start, cpu = time.perf_counter(), _children_cpu()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if result.returncode not in (0, 2):  # 2: some file could not be parsed; the run still counts
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    return elapsed, cpu, result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the whole sequence (medians are shown)")
    args = parser.parse_args()
    sources = [args.folder] if args.folder else default_sources()
    with tempfile.TemporaryDirectory(prefix="cpu2gpu-bench-") as temp:
        work = Path(temp)
        folder = copy_tree(sources, work)
        tool = snapshot_tool(work)
        files = sorted(folder.rglob("*.py"))
        torch_files = sum(b"torch" in p.read_bytes() for p in files)
        size = sum(p.stat().st_size for p in files)
        print(f"{len(files)} .py files ({torch_files} mention torch, {size / 1e6:.1f} MB) "
              f"from {', '.join(str(s) for s in sources)}")
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        runs: dict[str, list[float]] = {}
        cpu_times: dict[str, list[float]] = {}
        outputs: dict[str, str] = {}
        plan = [
            ("cold  -j 1", ("-j", "1"), True),
            (f"cold  -j {args.jobs}", ("-j", str(args.jobs)), True),
            (f"warm  -j {args.jobs}", ("-j", str(args.jobs)), False),
            (f"--no-cache -j {args.jobs}", ("-j", str(args.jobs), "--no-cache"), False),
        ]
        for _ in range(args.repeat):
            for label, options, clear in plan:
                if clear:
                    shutil.rmtree(work / CACHE_DIR_NAME, ignore_errors=True)
                elapsed, cpu, out = timed_run(folder, work, tool, *options)
                runs.setdefault(label, []).append(elapsed)
                cpu_times.setdefault(label, []).append(cpu)
                outputs.setdefault(label, out)
        reference = outputs[plan[0][0]]
        for label, times in runs.items():
            same = "same output" if outputs[label] == reference else "OUTPUT DIFFERS"
            print(f"{label:<18} {statistics.median(times):8.2f} s wall {statistics.median(cpu_times[label]):8.2f} s CPU"
                  f"   {same}")
        print(f"findings: {len(reference.splitlines())}; load average before: {load}")


if __name__ == "__main__":
    main()
