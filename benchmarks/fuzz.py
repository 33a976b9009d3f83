"""A long fuzz run of check and rewrite over generated scripts and notebooks, every failure minimised.

    python benchmarks/fuzz.py [--examples 10000] [--seed 0] [--kinds script rich mutated notebook]
                              [--minimise 2]

The generators and the properties are the test suite's (tests/strategies.py): the original
scripts, the rich scripts (nesting, helpers, classes, dict batches, comprehensions), the rich
scripts after hand-style edits (an import dropped, a form feed or U+2028 line, a ``# noqa``), and
notebooks. Hypothesis draws the examples (seeded, generation only: a failure is recorded, not
raised, so the run goes on to the end). Then, per property, the first examples of each kind of
failure are minimised line by line (lines and cells dropped, blocks unwrapped, comments cut) while
the same property still fails the same way, and the distinct minimal examples are printed.

One process; a few thousand examples take about an hour on a slow core.

Runs of 2026-12-05 on this 2-core machine (each sharing it with a test run):
  --examples 800 --seed 0:  800 examples in 238 s (0.30 s each), 0 failures
  --examples 5000 --seed 1: 5000 examples in 1428 s (0.29 s each), 0 failures
      (1254 scripts, 1322 rich, 1144 mutated, 1280 notebooks)
The failures the earlier, shorter runs found (a ``# noqa`` after a form feed or U+2028; torch used
without being imported) are regression tests in tests/test_properties.py.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpu2gpu.sources.syntax import python_lines  # noqa: E402
from tests.strategies import (Failure, mutated, notebook_failures, notebook_file,  # noqa: E402
                              rich_source_file, script_failures, source_file, without_magics)

KINDS = ("script", "rich", "mutated", "notebook")


@dataclass
class Example:
    kind: str
    text: str
    unsafe: bool = False

    def failures(self) -> list[Failure]:
        if self.kind == "notebook":
            return notebook_failures(self.text)
        return script_failures(self.text, self.unsafe)


@dataclass
class Tally:
    keep: int  # examples kept per kind of failure, to minimise
    examples: Counter = field(default_factory=Counter)
    seconds: Counter = field(default_factory=Counter)
    # property -> (kind of failure, first line of the detail with digits folded) -> count, examples kept
    counts: dict = field(default_factory=lambda: defaultdict(Counter))
    kept: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))

    def record(self, example: Example, failures: list[Failure], seconds: float) -> None:
        self.examples[example.kind] += 1
        self.seconds[example.kind] += seconds
        for failure in failures:
            signature = (failure.kind, re.sub(r"\d+", "N", (failure.detail.splitlines() or [""])[0])[:100])
            self.counts[failure.prop][signature] += 1
            if len(self.kept[failure.prop][signature]) < self.keep:
                self.kept[failure.prop][signature].append(example)

    def failing(self) -> int:
        return sum(sum(by_signature.values()) for by_signature in self.counts.values())


def examples_of(kinds: list[str]) -> st.SearchStrategy[Example]:
    choices = {
        "script": st.builds(Example, st.just("script"), source_file(), st.booleans()),
        "rich": st.builds(Example, st.just("rich"), rich_source_file(), st.booleans()),
        "mutated": st.builds(Example, st.just("mutated"), rich_source_file().flatmap(mutated), st.booleans()),
        "notebook": st.builds(Example, st.just("notebook"), notebook_file()),
    }
    # One kind drawn uniformly, then its example (st.one_of leans towards its later branches).
    return st.sampled_from(kinds).flatmap(lambda kind: choices[kind])


def fuzz(count: int, seed_value: int, kinds: list[str], keep: int) -> Tally:
    tally = Tally(keep)

    @seed(seed_value)
    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(example=examples_of(kinds))
    def one(example: Example) -> None:
        start = time.perf_counter()
        failures = example.failures()
        tally.record(example, failures, time.perf_counter() - start)
        done = sum(tally.examples.values())
        if done % 250 == 0:
            print(f"  {done} examples, {tally.failing()} failures", file=sys.stderr, flush=True)

    one()
    return tally


# -- the minimiser ---------------------------------------------------------------------------


def _valid(lines: list[str]) -> bool:
    # compile, not ast.parse: ast.parse accepts ``return`` outside a function.
    try:
        compile(without_magics("".join(lines)), "<minimised>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _unwrapped(lines: list[str], header: int) -> list[str]:
    """The lines with the block at ``header`` replaced by its body, dedented one level."""
    body_end = header + 1
    while body_end < len(lines) and (not lines[body_end].strip() or _indent(lines[body_end]) > _indent(lines[header])):
        body_end += 1
    body = lines[header + 1:body_end]
    shift = min((_indent(line) for line in body if line.strip()), default=0) - _indent(lines[header])
    return lines[:header] + [line[shift:] if line[:shift].strip() == "" else line for line in body] + lines[body_end:]


def _without_comment(line: str) -> str:
    body = line.rstrip("\r\n")
    cut = body.find("  #")
    return line if cut <= 0 else body[:cut] + line[len(body):]


def shrink_lines(lines: list[str], fails: Callable[[list[str]], bool]) -> list[str]:
    """Fewer lines that still fail: chunks dropped (halving sizes), blocks unwrapped, comments cut."""
    def keep(candidate: list[str]) -> bool:
        return candidate != lines and _valid(candidate) and fails(candidate)

    progress = True
    while progress:
        progress = False
        size = max(len(lines) // 2, 1)
        while size >= 1:
            start = 0
            while start < len(lines):
                candidate = lines[:start] + lines[start + size:]
                if keep(candidate):
                    lines, progress = candidate, True
                else:
                    start += size
            size //= 2
        for index in range(len(lines)):
            if index < len(lines) and lines[index].rstrip().endswith(":") and not lines[index].lstrip().startswith("#"):
                candidate = _unwrapped(lines, index)
                if keep(candidate):
                    lines, progress = candidate, True
        for index in range(len(lines)):
            candidate = lines[:index] + [_without_comment(lines[index])] + lines[index + 1:]
            if keep(candidate):
                lines, progress = candidate, True
    return lines


def _same_failure(example: Example, prop: str, kind: str) -> Callable[[Example], bool]:
    def fails(candidate: Example) -> bool:
        return any(f.prop == prop and f.kind == kind for f in candidate.failures())
    return fails


def minimise(example: Example, prop: str, kind: str) -> Example:
    fails = _same_failure(example, prop, kind)
    if example.kind != "notebook":
        lines = shrink_lines(python_lines(example.text, keepends=True),
                             lambda ls: fails(Example(example.kind, "".join(ls), example.unsafe)))
        return Example(example.kind, "".join(lines), example.unsafe)
    return _minimise_notebook(example, fails)


def _notebook(cells: list[tuple[str, str]]) -> str:
    import nbformat

    made = [nbformat.v4.new_code_cell(text) if kind == "code" else nbformat.v4.new_markdown_cell(text)
            for kind, text in cells]
    notebook = nbformat.v4.new_notebook(cells=made)
    notebook.metadata["language_info"] = {"name": "python"}
    for number, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{number}"
    return nbformat.writes(notebook)


def _minimise_notebook(example: Example, fails: Callable[[Example], bool]) -> Example:
    import nbformat

    cells = [(c.cell_type, c.source) for c in nbformat.reads(example.text, as_version=4).cells]

    def still(candidate: list[tuple[str, str]]) -> bool:
        return fails(Example("notebook", _notebook(candidate)))

    index = 0
    while index < len(cells):  # whole cells first
        candidate = cells[:index] + cells[index + 1:]
        if candidate and still(candidate):
            cells = candidate
        else:
            index += 1
    for index, (kind, text) in enumerate(cells):
        if kind != "code":
            continue
        lines = shrink_lines(python_lines(text, keepends=True),
                             lambda ls: still(cells[:index] + [("code", "".join(ls))] + cells[index + 1:]))
        cells[index] = (kind, "".join(lines))
    return Example("notebook", _notebook(cells))


# -- the report --------------------------------------------------------------------------------


def shown(example: Example) -> str:
    if example.kind != "notebook":
        return example.text
    import nbformat

    cells = nbformat.reads(example.text, as_version=4).cells
    return "".join(f"# [{c.cell_type} cell]\n{c.source}\n" for c in cells)


def report(tally: Tally, seconds: float) -> None:
    total = sum(tally.examples.values())
    print(f"\n{total} examples in {seconds:.0f} s ({seconds / max(total, 1):.2f} s each), "
          f"{tally.failing()} failures")
    for kind in KINDS:
        if tally.examples[kind]:
            print(f"  {kind:9} {tally.examples[kind]:6} examples, {tally.seconds[kind]:7.0f} s of checks")
    for prop, by_signature in sorted(tally.counts.items()):
        report_property(tally, prop, by_signature)


def report_property(tally: Tally, prop: str, by_signature: Counter) -> None:
    start = time.perf_counter()
    print(f"\n== {prop}: {sum(by_signature.values())} failing examples, {len(by_signature)} kinds of failure")
    minimal: dict[str, tuple[Example, list[str]]] = {}
    for (kind, detail), count in by_signature.most_common():
        print(f"  {count:5} x [{kind}] {detail}")
        for example in tally.kept[prop][(kind, detail)]:
            small = minimise(example, prop, kind)
            origin = f"{example.kind}{' unsafe' if example.unsafe else ''}"
            minimal.setdefault(shown(small), (small, []))[1].append(origin)
    for number, (text, (small, origins)) in enumerate(minimal.items(), 1):
        details = [f.detail for f in small.failures() if f.prop == prop]
        print(f"\n  minimal example {number} (from {len(origins)} example(s): {', '.join(sorted(set(origins)))}):")
        print("    " + "\n    ".join(repr(line) for line in python_lines(text.rstrip("\n"))))
        print("  gives:\n    " + "\n    ".join((details[0] if details else "").splitlines()))
    print(f"  (minimised in {time.perf_counter() - start:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", nargs="*", choices=KINDS, default=list(KINDS))
    parser.add_argument("--minimise", type=int, default=2, help="examples minimised per kind of failure")
    options = parser.parse_args()
    start = time.perf_counter()
    tally = fuzz(options.examples, options.seed, options.kinds, options.minimise)
    report(tally, time.perf_counter() - start)


if __name__ == "__main__":
    main()
