import os

import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "runtime")


def pytest_configure(config):
    config.addinivalue_line("markers", "runtime: runs scripts under cpu2gpu verify (needs torch; spawns processes)")


@pytest.fixture(autouse=True)
def _one_thread_per_child(monkeypatch):
    # Many small children at once: one intra-op thread each runs them faster.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


@pytest.fixture
def fixtures_dir():
    return os.path.abspath(FIXTURES)
