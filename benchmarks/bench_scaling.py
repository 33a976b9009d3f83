"""How the cost of `cpu2gpu check` grows with the size of one file dense in findings, against the bare
libcst parse of the same file.

    python benchmarks/bench_scaling.py [--functions 250 500 1000 2000 5000] [--repeat 3]
                                       [--large-kb 1500 --repeat-large 1] [--tool PATH ...]

    # two engines in one run: the one before the queue fix (c167596) and the working tree's
    python benchmarks/bench_scaling.py --tool "$(benchmarks/realcode/pin_engine.sh c167596~1)"

Run by hand (not a test; the default run, two engines, takes about 10 minutes on 2 slow cores). Each input is N
small training functions (12 lines each: a model never moved, a DataLoader whose batches are not moved
and that is not pinned: four findings a function), from about 100 KB (250) to 2 MB (5,000).

Every measurement is a fresh process, and for each size the processes alternate, ``--repeat`` rounds
(``--repeat-large`` from ``--large-kb`` on): (a) an interpreter that imports libcst and runs
``libcst.parse_module`` on the file's bytes; (b) ``cpu2gpu check FILE -j 1 --no-cache --output-format
json`` (output to /dev/null but in the first round, whose JSON gives the count of findings), for this
checkout's ``.venv/bin/cpu2gpu`` and each ``--tool``. Wall and CPU seconds and the peak RSS come from
``os.wait4`` on that process alone (this driver imports nothing large, and the child is started with
vfork, so it does not inherit a high-water mark). "Over import" is the peak minus that of the same kind
of process with nothing to do: an interpreter that only imports libcst for the parse, and for each
engine a check of a two-line file (imports, rules and the CLI: everything but the work). Tables show
medians; CPU seconds are the steadier figure on a shared machine. Every process reads its modules'
bytecode from a scratch ``PYTHONPYCACHEPREFIX`` (written by a warm-up run), as an installed package does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE_TOOL = ROOT / ".venv" / "bin" / "cpu2gpu"

HEAD = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
FUNCTION = """def train_{i}(epochs=1):
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    loader = DataLoader(data, batch_size=4)
    for epoch in range(epochs):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


"""
PARSE = "import sys, libcst\nfrom pathlib import Path\nlibcst.parse_module(Path(sys.argv[1]).read_bytes())"
IMPORT_LIBCST = "import libcst"


def source(functions: int) -> str:
    return HEAD + "".join(FUNCTION.format(i=i) for i in range(functions))


def run(command: list[str], env: dict, stdout_path: Path | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MB) of one fresh process."""
    out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    try:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, env=env, cwd=tempfile.gettempdir())
        # read stderr before waiting (a full pipe would block the child); wait4 reads this child's own rusage
        err = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if stdout_path:
            out.close()
    if child.returncode not in (0, 1):  # check exits 1 when it has findings
        sys.exit(f"{' '.join(command)} failed ({child.returncode}):\n{err.decode()[-3000:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def median(values: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    return tuple(statistics.median(v[i] for v in values) for i in range(3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, nargs="+", default=[250, 500, 1000, 2000, 5000],
                        help="sizes, in training functions (about 0.44 KB each)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per size (medians)")
    parser.add_argument("--large-kb", type=float, default=1500, help="from this size on, --repeat-large rounds")
    parser.add_argument("--repeat-large", type=int, default=1)
    parser.add_argument("--tool", action="append", default=[], type=Path,
                        help="another cpu2gpu executable, timed in the same rounds (e.g. pin_engine.sh's)")
    parser.add_argument("--keep", type=Path, help="write the generated files to this folder and keep them")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="cpu2gpu-scaling-"))
    try:
        measure(args, scratch)
    finally:
        shutil.rmtree(scratch)


def measure(args: argparse.Namespace, scratch: Path) -> None:

    tools = {"now": HERE_TOOL}
    for path in args.tool:
        name = path.parent.name.removeprefix("bin-") if path.parent.name.startswith("bin-") else str(path)
        tools[name] = path
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    folder = args.keep or scratch
    folder.mkdir(parents=True, exist_ok=True)

    python = str(ROOT / ".venv" / "bin" / "python")
    tiny = folder / "tiny.py"
    tiny.write_text(HEAD)

    def check(tool: Path, path: Path) -> list[str]:
        return [str(tool), "check", str(path), "-j", "1", "--no-cache", "--output-format", "json"]

    # warm-up: bytecode for every engine and for libcst, and the baselines ("over import")
    baseline_plan = {"import libcst": [python, "-c", IMPORT_LIBCST]}
    baseline_plan |= {f"check tiny ({name})": check(tool, tiny) for name, tool in tools.items()}
    for command in baseline_plan.values():
        run(command, env)
    baseline_runs = {name: [] for name in baseline_plan}
    for _ in range(max(args.repeat, 3)):
        for name, command in baseline_plan.items():
            baseline_runs[name].append(run(command, env))
    baseline = {name: median(values)[2] for name, values in baseline_runs.items()}
    print("baselines, peak RSS MB: " + ", ".join(f"{name} {mb:.1f}" for name, mb in baseline.items()), flush=True)

    rows = []
    for functions in args.functions:
        path = folder / f"train_{functions}.py"
        path.write_text(source(functions))
        kb = path.stat().st_size / 1024
        repeat = args.repeat_large if kb >= args.large_kb else args.repeat
        plan = {"parse": [python, "-c", PARSE, str(path)]}
        plan |= {name: check(tool, path) for name, tool in tools.items()}
        runs = {name: [] for name in plan}
        findings = {}
        names = list(plan)
        for round_ in range(repeat):
            order = names if round_ % 2 == 0 else names[::-1]  # alternate who goes first
            for name in order:
                report = folder / f"out_{name}.json" if round_ == 0 and name != "parse" else None
                runs[name].append(run(plan[name], env, report))
                if report:
                    findings[name] = len(json.loads(report.read_text()))
                    report.unlink()
                print(f"  {kb:7.0f} KB round {round_ + 1}/{repeat} {name:14} wall {runs[name][-1][0]:7.2f} s "
                      f"CPU {runs[name][-1][1]:7.2f} s peak {runs[name][-1][2]:7.1f} MB", flush=True)
        rows.append((kb, functions, repeat, findings, {name: median(values) for name, values in runs.items()}))
        if not args.keep:
            path.unlink()

    print("\nWhole processes, medians of the rounds (n), interleaved; x = check / parse of the same file;"
          "\nover import: peak minus that of an interpreter that only imports libcst (parse) or of the same "
          "engine's check of a two-line file")
    header = (f"{'KB':>6} {'fns':>5} {'n':>2} {'engine':>12} {'findings':>8} | {'parse s':>7} {'check s':>7} "
              f"{'x':>5} | {'CPU s: parse':>12} {'check':>6} {'x':>5} | {'parse MB':>8} {'check MB':>8} {'x':>5} | "
              f"{'over import MB: parse':>21} {'check':>6} {'x':>5}")
    print(header)
    for kb, functions, repeat, findings, med in rows:
        parse_s, parse_cpu, parse_mb = med["parse"]
        parse_over = parse_mb - baseline["import libcst"]
        for name in tools:
            check_s, check_cpu, check_mb = med[name]
            check_over = check_mb - baseline[f"check tiny ({name})"]
            print(f"{kb:6.0f} {functions:5d} {repeat:2d} {name:>12} {findings[name]:8d} | "
                  f"{parse_s:7.2f} {check_s:7.2f} "
                  f"{check_s / parse_s:5.2f} | {parse_cpu:12.2f} {check_cpu:6.2f} {check_cpu / parse_cpu:5.2f} | "
                  f"{parse_mb:8.1f} {check_mb:8.1f} {check_mb / parse_mb:5.2f} | {parse_over:21.0f} {check_over:6.0f} "
                  f"{check_over / parse_over if parse_over > 0 else float('nan'):5.2f}")


if __name__ == "__main__":
    main()
