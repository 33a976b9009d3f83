"""A fixed sample of the standard library and of the installed torch package, rewritten and checked.

The whole corpus is ``python benchmarks/corpus_run.py``; this runs every Nth file of the same
sorted list through the same checks, in two processes. torch is read as text, never imported.

Two tiers: the default run takes every DEFAULT_EVERY-th file (both roots, files that mention
torch and files that do not), the slow tier (``pytest -m slow``) the other files of the
every-SAMPLE_EVERY-th sample; both together take that whole sample once.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys

import pytest

from .conftest import ROOT, once_per_run

SAMPLE_EVERY = 14  # about 290 files of the ~4000
DEFAULT_EVERY = SAMPLE_EVERY * 5  # about 60 of them, the default tier's; the slow tier takes the rest
assert DEFAULT_EVERY % SAMPLE_EVERY == 0  # (so that the default tier's files are files of the sample)
# What each tier's files must include at least: (files, files that mention torch, files that do not).
AT_LEAST = {"default": (40, 20, 20), "others": (100, 30, 30)}


def load_corpus_run():
    # imported by name (not from a file spec) so that the worker processes can import it too
    folder = str(ROOT / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("corpus_run")


corpus_run = load_corpus_run()


@pytest.fixture(scope="module", params=["default", pytest.param("others", marks=pytest.mark.slow)])
def tier(request):
    return request.param


@pytest.fixture(scope="module")
def outcomes(tier, tmp_path_factory):
    torch_root = corpus_run.torch_package()
    if torch_root is None:
        pytest.skip("torch is not installed: no torch sources to read")
    files = corpus_run.corpus_files([corpus_run.standard_library(), torch_root])
    default = files[::DEFAULT_EVERY]
    sample = default if tier == "default" else sorted(set(files[::SAMPLE_EVERY]) - set(default), key=files.index)

    def run():
        return [dataclasses.asdict(o) for o in corpus_run.run(sample, workers=2)]

    # once, however `pytest -n` spreads this module's tests over its workers
    return [corpus_run.Outcome(**o) for o in once_per_run(tmp_path_factory, f"corpus-{tier}", run)]


def test_sample_covers_both_roots(outcomes, tier):
    files, torch_files, other_files = AT_LEAST[tier]
    assert len(outcomes) > files
    assert sum(o.mentions_torch for o in outcomes) > torch_files
    assert sum(not o.mentions_torch for o in outcomes) > other_files


@pytest.mark.parametrize("problem", corpus_run.PROBLEMS)
def test_no_file_has(outcomes, problem):
    bad = [f"{o.path}: {o.detail}" for o in outcomes if o.problem == problem]
    assert not bad, "\n".join(bad)


def test_the_sample_exercises_the_rewriter(outcomes):
    assert sum(o.findings for o in outcomes) > 0
