"""Peak memory of `cpu2gpu check` per MB of source, against the bare libcst parse of the same input.

    python benchmarks/bench_memory.py [--sizes 0.1 0.5 1 2] [--repeat 3] [--file PATH ...]

Inputs: the fixture scripts (fixtures/scripts/*.py, not the expected rewrites) concatenated
until each size is reached, every copy's module-level names renamed (``model`` -> ``model_c3``)
so that the copies stay independent scripts and the file stays valid Python; plus the largest
.py file in the mirrored real repositories under /work/.mirror when there are any, and any
--file given.

Every measurement runs in a fresh interpreter that has imported the same modules (libcst and
the engine with its rules) and warmed both paths on a small script, so that lazy imports and
caches do not count as work. Two ways of counting, each in its own processes:

- RSS: ``ru_maxrss`` after the call minus that of an idle interpreter that did everything but
  the call (the high-water mark of the whole process: Python objects, libcst's native parser,
  freed memory that was not returned). Both reset the high-water mark to the current RSS just
  before (``/proc/self/clear_refs``), else the imports' own peak would hide a small file's;
- tracemalloc: the peak of the Python allocations traced during the call (not the native
  parser's own buffers; the tracing itself slows the call several times).

RSS rounds alternate idle, parse and check on each input and the table shows their medians;
the traced peak, the same in every run, is measured once.

Measured here (2 slow cores, libcst 1.x native parser; peak MB per MB of source):

    input                       MB | RSS MB/MB: parse  check  ratio | traced MB/MB: parse  check  ratio
    fixtures x 0.5 MB         0.50 |              20.5  141.3   6.89 |                 41.6  148.7   3.57
    fixtures x 1 MB           1.00 |             296.6  417.5   1.41 |                 41.4  147.0   3.55
    fixtures x 2 MB           2.00 |             433.8  556.3   1.28 |                 41.2  146.2   3.54
    d2lzh_pytorch/utils.py    0.05 |  (below the RSS resolution)     |                 35.3  106.9   3.03

From 1 MB on, the whole process's peak is libcst's own parse (its native parser's buffers are not
Python allocations, so tracemalloc does not see them): check adds about 120 MB per MB of source to
it, 1.3-1.4 times the parse alone. In Python allocations, check holds 3.5 times what the parse does.

check holds the libcst tree and Python's own ``ast`` tree of the file (the parser judges first)
and the facts at once; the positions are computed only where there are findings.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import GlobalScope, MetadataWrapper, ScopeProvider

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "fixtures" / "scripts"
MIRROR = Path("/work/.mirror")
MB = 1e6

# The child: same imports and the same warm-up in every mode; only the measured call differs.
CHILD = r"""
import gc, json, resource, sys, tracemalloc
import libcst
from cpu2gpu.engine import check_source
mode, path, trace = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
warm = b"import torch\nmodel = torch.nn.Linear(2, 2)\nout = model(torch.ones(2))\n"
libcst.parse_module(warm)
check_source(warm)
data = open(path, "rb").read()
gc.collect()
try:  # reset the high-water mark to the current RSS (Linux): the imports' own peak must not hide the call's
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    reset = True
except OSError:
    reset = False
if trace:
    tracemalloc.start()
if mode == "parse":
    result = libcst.parse_module(data)
elif mode == "check":
    result = check_source(data)
traced = tracemalloc.get_traced_memory()[1] if trace else 0
rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"rss": rss_kb * 1024, "traced": traced, "reset": reset}))
"""


@dataclass
class Input:
    label: str
    path: Path
    size: int


def module_level_names(module: cst.Module) -> dict[cst.CSTNode, str]:
    """The Name nodes that bind or read a module-level name (imports excepted), with that name.

    The scope analysis is what tells a global ``model`` from a parameter called ``model``;
    it is slow, but it runs once per fixture."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes = wrapper.resolve(ScopeProvider)
    scope = next(s for s in scopes.values() if isinstance(s, GlobalScope))
    nodes: dict[cst.CSTNode, str] = {}
    for assignment in scope.assignments:
        node = getattr(assignment, "node", None)
        if isinstance(node, (cst.Import, cst.ImportFrom)) or node is None:
            continue
        name = assignment.name
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            node = node.name
        if isinstance(node, cst.Name):
            nodes[node] = name
        for access in assignment.references:
            if isinstance(access.node, cst.Name):
                nodes[access.node] = name
    return nodes


class _Rename(cst.CSTTransformer):
    def __init__(self, nodes: dict[cst.CSTNode, str], suffix: str) -> None:
        self.nodes = nodes
        self.suffix = suffix

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        if original_node in self.nodes and not original_node.value.startswith("__"):
            return updated_node.with_changes(value=original_node.value + self.suffix)
        return updated_node

    def leave_ImportFrom(self, original_node, updated_node):
        # ``from __future__`` must open the file: a later copy drops it (no script needs it to parse).
        if isinstance(original_node.module, cst.Name) and original_node.module.value == "__future__":
            return cst.RemoveFromParent()
        return updated_node


# Scope analysis is slow: each fixture is renamed once with a marker, each copy replaces the marker.
_COPY_MARK = "_cCOPYMARK"


def renamed_template(source: str) -> str:
    module = cst.parse_module(source)
    return module.visit(_Rename(module_level_names(module), _COPY_MARK)).code


def concatenated(target_bytes: int) -> str:
    templates = [renamed_template(p.read_text(encoding="utf-8"))
                 for p in sorted(SCRIPTS.glob("*.py")) if ".expected" not in p.name]
    parts: list[str] = []
    size = 0
    copy = 0
    while size < target_bytes:
        for template in templates:
            part = template.replace(_COPY_MARK, f"_c{copy}") + "\n\n"
            parts.append(part)
            size += len(part.encode())
            copy += 1
            if size >= target_bytes:
                break
    code = "".join(parts)
    ast.parse(code)  # the copies must stay one valid script
    return code


def largest_mirrored_file() -> tuple[str, bytes] | None:
    """The largest .py file at HEAD of the mirrored repositories (bare git directories)."""
    best: tuple[int, Path, str] | None = None
    for git_dir in sorted(MIRROR.glob("*/repo")):
        listing = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "-l", "HEAD"],
                                 capture_output=True, text=True, check=False).stdout
        for line in listing.splitlines():
            meta, _, path = line.partition("\t")
            fields = meta.split()
            if path.endswith(".py") and len(fields) == 4 and fields[3].isdigit():
                if best is None or int(fields[3]) > best[0]:
                    best = (int(fields[3]), git_dir, path)
    if best is None:
        return None
    data = subprocess.run(["git", "--git-dir", str(best[1]), "show", f"HEAD:{best[2]}"],
                          capture_output=True, check=True).stdout
    return f"{best[1].parent.name.split('+')[-1]}/{best[2]}", data


def build_inputs(folder: Path, sizes: list[float], extra: list[Path]) -> list[Input]:
    inputs = []
    for mb in sizes:
        path = folder / f"fixtures_{mb}MB.py"
        path.write_text(concatenated(int(mb * MB)), encoding="utf-8")
        inputs.append(Input(f"fixtures x {mb:g} MB", path, path.stat().st_size))
    real = largest_mirrored_file() if MIRROR.is_dir() else None
    if real is not None:
        path = folder / "mirrored.py"
        path.write_bytes(real[1])
        inputs.append(Input(real[0], path, len(real[1])))
    for path in extra:
        inputs.append(Input(str(path), path, path.stat().st_size))
    return inputs


def measure(mode: str, path: Path, trace: bool) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), "1" if trace else "0"],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def per_mb(item: Input, repeat: int) -> dict[str, float]:
    """Median peak MB per MB of source for parse and check, in RSS and traced bytes.

    The traced peak is the same from run to run (the same allocations in the same order) and
    tracing makes check several times slower: it is measured once."""
    runs: dict[str, list[float]] = {"rss parse": [], "rss check": []}
    for _ in range(repeat):
        idle = measure("idle", item.path, trace=False)["rss"]
        for mode in ("parse", "check"):
            runs[f"rss {mode}"].append((measure(mode, item.path, trace=False)["rss"] - idle) / item.size)
    result = {key: statistics.median(values) for key, values in runs.items()}
    for mode in ("parse", "check"):
        result[f"traced {mode}"] = measure(mode, item.path, trace=True)["traced"] / item.size
    return result


def _ratio(check: float, parse: float) -> str:
    return f"{check / parse:6.2f}" if parse > 0 else f"{'-':>6}"


def header(width: int, repeat: int) -> None:
    print(f"peak MB per MB of source, each in a fresh process (RSS: median of {repeat}; traced: one run)")
    print(f"  {'input':{width}} {'MB':>6} | RSS MB/MB: parse  check  ratio | traced MB/MB: parse  check  ratio",
          flush=True)


def row(item: Input, m: dict[str, float], width: int) -> None:
    print(f"  {item.label:{width}} {item.size / MB:6.2f} | {'':10} {m['rss parse']:6.1f} {m['rss check']:6.1f} "
          f"{_ratio(m['rss check'], m['rss parse'])} | {'':13} {m['traced parse']:6.1f} "
          f"{m['traced check']:6.1f} {_ratio(m['traced check'], m['traced parse'])}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="*", default=[0.1, 0.5, 1.0, 2.0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--file", type=Path, action="append", default=[], help="another real file to measure")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inputs = build_inputs(Path(tmp), options.sizes, options.file)
        width = max(len(item.label) for item in inputs)
        header(width, options.repeat)
        for item in inputs:  # a row as soon as it is measured: the 2 MB rows take many minutes
            row(item, per_mb(item, options.repeat), width)


if __name__ == "__main__":
    main()
