"""A fixed sample of the standard library and of the installed torch package, rewritten and checked.

The whole corpus is ``python benchmarks/corpus_run.py``; this runs every Nth file of the same
sorted list through the same checks, in two processes. torch is read as text, never imported.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from .conftest import ROOT

SAMPLE_EVERY = 14  # about 290 files of the ~4000


def load_corpus_run():
    # imported by name (not from a file spec) so that the worker processes can import it too
    folder = str(ROOT / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("corpus_run")


corpus_run = load_corpus_run()


@pytest.fixture(scope="module")
def outcomes():
    torch_root = corpus_run.torch_package()
    if torch_root is None:
        pytest.skip("torch is not installed: no torch sources to read")
    files = corpus_run.corpus_files([corpus_run.standard_library(), torch_root])
    sample = files[::SAMPLE_EVERY]
    return corpus_run.run(sample, workers=2)


def test_sample_covers_both_roots(outcomes):
    assert len(outcomes) > 100
    assert sum(o.mentions_torch for o in outcomes) > 30
    assert sum(not o.mentions_torch for o in outcomes) > 30


@pytest.mark.parametrize("problem", corpus_run.PROBLEMS)
def test_no_file_has(outcomes, problem):
    bad = [f"{o.path}: {o.detail}" for o in outcomes if o.problem == problem]
    assert not bad, "\n".join(bad)


def test_the_sample_exercises_the_rewriter(outcomes):
    assert sum(o.findings for o in outcomes) > 0
