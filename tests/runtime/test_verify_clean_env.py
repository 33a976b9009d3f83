"""verify --clean-env: the runs do not see this process's variables, except those allowed."""

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

pytestmark = [pytest.mark.runtime, pytest.mark.slow]

SCRIPT = ("import os, torch\nprint('token', os.environ.get('API_TOKEN'), 'mode', os.environ.get('RUN_MODE'))\n"
          "print('home', os.environ['HOME'])\n"
          "m = torch.nn.Linear(1, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
          "m(torch.ones(1, 1)).sum().backward()\nopt.step()\n")


def test_a_clean_environment_hides_the_callers_secrets(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(SCRIPT)
    monkeypatch.setenv("API_TOKEN", "s3cr3t")
    monkeypatch.setenv("RUN_MODE", "fast")
    report = verify(str(tmp_path / "train.py"), device="cpu", cwd=str(tmp_path), jobs=1, clean_env=True,
                    env_allow=["RUN_*"])
    assert report["verdict"] == "pass", report["reasons"]
    out = report["runs"][0]["stdout_tail"]
    assert "token None mode fast" in out
    assert f"home {tmp_path}" not in out and "home /" in out  # a home of the run's own
    inherited = verify(str(tmp_path / "train.py"), device="cpu", cwd=str(tmp_path), jobs=1)
    assert "token s3cr3t" in inherited["runs"][0]["stdout_tail"]
