import os

import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "runtime")

# The markers (runtime, slow) are registered in pyproject.toml.


@pytest.fixture(autouse=True)
def _one_thread_per_child(monkeypatch):
    # Many small children at once: one intra-op thread each runs them faster.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture
def fixtures_dir():
    return os.path.abspath(FIXTURES)
