"""The rewrite never breaks a script that runs: every fixture script that runs on the CPU, rewritten
by the tool (its default, safe fixes), still runs on the CPU fallback (CUDA hidden) and prints
exactly what the original prints: the same losses, the same results.

Over the fixtures that no other runtime test already runs as the rewrite's output: the rule
examples, the seeds, the bug reports (the bug and its fix), the runtime originals and migrations.
(fixtures/scripts/: test_fixtures holds the rewrite equal to the .expected.py file, which
test_corpus_scripts runs against the original.) A script that does not run as it is (it needs a
package or data this machine lacks, or crashes on purpose) is left out, and the test asserts that
enough of them ran for the property to mean something.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ..conftest import FIXTURES
from .test_corpus_scripts import _plain_batch

pytest.importorskip("torch")

import cpu2gpu  # noqa: E402

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

# Not training scripts: verify's own tests of crashes and hangs, and the simulator's checks that
# device mismatches raise (the rewrite fixes those mismatches, as it should).
NOT_SCRIPTS = {"crash.py", "hang.py", "sim_semantics.py"}
MIN_CHANGED_AND_RUN = 25


def _candidates() -> list[Path]:
    found = [p for d in ("rules", "seeds", "real", "runtime") for p in sorted((FIXTURES / d).glob("*.py"))
             if not p.name.endswith(".expected.py") and p.name not in NOT_SCRIPTS]
    found += sorted((FIXTURES / "bugs").glob("*/bug.py")) + sorted((FIXTURES / "bugs").glob("*/fixed.py"))
    return found


def _rewritten_copies(scripts: list[Path], root: Path) -> dict[Path, Path]:
    """Each script's folder copied under ``root`` with the script rewritten in it (its sibling modules
    and data files stay beside it); only the scripts the rewrite changes."""
    copies = {}
    for i, script in enumerate(scripts):
        source = script.read_text()
        fixed = cpu2gpu.rewrite_source(source, path=str(script))
        if fixed == source:
            continue
        folder = root / str(i)
        shutil.copytree(script.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / script.name).write_text(fixed)
        copies[script] = folder / script.name
    return copies


def test_every_rewritten_fixture_prints_what_its_original_prints_on_the_cpu(tmp_path):
    copies = _rewritten_copies(_candidates(), tmp_path)
    originals = list(copies)
    rewrites = [str(copies[p]) for p in originals]
    with ThreadPoolExecutor(max_workers=2) as pool:
        before, after = pool.map(_plain_batch, [[str(p) for p in originals], rewrites])
    problems, compared = [], 0
    for script in originals:
        code, out, _ = before[str(script)]
        if code != 0:
            continue  # does not run here as it is
        compared += 1
        new_code, new_out, new_err = after[str(copies[script])]
        name = script.relative_to(FIXTURES)
        if new_code != 0:
            problems.append(f"{name}: the rewrite exits {new_code} on the CPU:\n{new_err[-1500:]}")
        elif new_out != out:
            problems.append(f"{name}: the rewrite prints otherwise on the CPU:\n{out}--- against ---\n{new_out}")
    assert not problems, "\n\n".join(problems)
    print(f"{compared} rewritten fixtures ran on the CPU as their originals do")
    assert compared >= MIN_CHANGED_AND_RUN, f"only {compared} rewritten fixtures ran: {sorted(map(str, copies))}"
