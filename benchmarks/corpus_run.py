"""Rewrite and check every .py file of the installed standard library and torch package.

    python benchmarks/corpus_run.py [--every N] [--workers 2] [--root PATH ...] [--report FILE]

For each file: ``rewrite`` must not crash, its output must parse (when the input does),
rewriting the output again must change nothing, a file that never mentions torch must come
out unchanged, and every finding of ``check`` must lie inside the file. torch is read as
text only, never imported. Prints the counts and the time; exits 1 when any count is not zero.
tests/test_corpus.py runs a fixed sample of the same files through the same checks.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import sysconfig
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cpu2gpu.engine import SourceError, check_module, parse, rewrite_data, select_rules  # noqa: E402
from cpu2gpu.sources.files import mentions_torch  # noqa: E402
from cpu2gpu.sources.syntax import python_syntax_error  # noqa: E402

PROBLEMS = ("crash", "unparsable-output", "not-idempotent", "changed-non-torch", "finding-outside-file",
            "refused")


def standard_library() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def torch_package() -> Path | None:
    spec = importlib.util.find_spec("torch")  # finds the folder without importing torch
    return Path(spec.origin).parent if spec and spec.origin else None


def corpus_files(roots: list[Path]) -> list[Path]:
    files = []
    for root in roots:
        files += sorted(p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts
                        and p.is_file())
    return files


def default_roots() -> list[Path]:
    return [root for root in (standard_library(), torch_package()) if root is not None]


@dataclass
class Outcome:
    path: str
    size: int
    mentions_torch: bool
    changed: bool = False
    findings: int = 0
    problem: str = ""  # one of PROBLEMS, or "" when all is well
    detail: str = ""
    skipped: str = field(default="")  # the input itself is not Python this interpreter parses


def examine(path: str) -> Outcome:
    data = Path(path).read_bytes()
    outcome = Outcome(path, len(data), mentions_torch(data))
    rules = select_rules()
    try:
        try:
            _, new = rewrite_data(data, path, rules)
        except SourceError as error:
            if python_syntax_error(data):
                outcome.skipped = error.message
            else:
                outcome.problem, outcome.detail = "refused", error.message
            return outcome
        outcome.changed = new != data
        if outcome.changed:
            if not outcome.mentions_torch:
                outcome.problem, outcome.detail = "changed-non-torch", _first_change(data, new)
                return outcome
            problem = python_syntax_error(new)
            if problem and not python_syntax_error(data):
                outcome.problem, outcome.detail = "unparsable-output", problem
                return outcome
            again = rewrite_data(new, path, rules)[1]
            if again != new:
                outcome.problem, outcome.detail = "not-idempotent", _first_change(new, again)
                return outcome
        findings = check_module(parse(data), path, rules)
        outcome.findings = len(findings)
        lines = data.splitlines() or [b""]
        for f in findings:
            if not (1 <= f.line <= f.end_line <= len(lines) and f.column >= 1 and f.end_column >= 1):
                outcome.problem, outcome.detail = "finding-outside-file", f"{f.code} at {f.line}:{f.column}"
                break
    except Exception as error:  # noqa: BLE001 - a crash is what this run looks for
        outcome.problem = "crash"
        outcome.detail = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=-4)}"
    return outcome


def _first_change(old: bytes, new: bytes) -> str:
    old_lines, new_lines = old.splitlines(), new.splitlines()
    for number, (a, b) in enumerate(zip(old_lines, new_lines), 1):
        if a != b:
            return f"line {number}: {a[:120]!r} -> {b[:120]!r}"
    return f"{len(old_lines)} lines -> {len(new_lines)} lines"


def run(paths: list[Path], workers: int) -> list[Outcome]:
    names = [str(p) for p in paths]
    if workers <= 1:
        return [examine(name) for name in names]
    with ProcessPoolExecutor(workers) as pool:
        # big files first, so that one of them does not finish alone at the end
        order = sorted(names, key=lambda n: -Path(n).stat().st_size)
        results = dict(zip(order, pool.map(examine, order, chunksize=4)))
    return [results[name] for name in names]


def summary(outcomes: list[Outcome]) -> dict:
    counts = {problem: sum(o.problem == problem for o in outcomes) for problem in PROBLEMS}
    return {
        "files": len(outcomes),
        "megabytes": round(sum(o.size for o in outcomes) / 1e6, 1),
        "mention torch": sum(o.mentions_torch for o in outcomes),
        "rewritten": sum(o.changed for o in outcomes),
        "findings": sum(o.findings for o in outcomes),
        "inputs Python cannot parse (skipped)": sum(bool(o.skipped) for o in outcomes),
        **counts,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", type=Path, help="folders to run over (default: stdlib, torch)")
    parser.add_argument("--every", type=int, default=1, help="take every Nth file only")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--report", type=Path, help="write every outcome as JSON here")
    options = parser.parse_args()
    paths = corpus_files(options.root or default_roots())[::options.every]
    start = time.perf_counter()
    outcomes = run(paths, options.workers)
    elapsed = time.perf_counter() - start
    for outcome in outcomes:
        if outcome.problem:
            print(f"{outcome.problem}: {outcome.path}: {outcome.detail.splitlines()[0] if outcome.detail else ''}")
    for name, value in summary(outcomes).items():
        print(f"{name:>40}: {value}")
    print(f"{'seconds':>40}: {elapsed:.1f} ({options.workers} workers)")
    if options.report:
        options.report.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 1 if any(o.problem for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
