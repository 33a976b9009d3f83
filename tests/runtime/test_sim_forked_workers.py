"""The simulated CUDA device refuses CUDA in a process forked after CUDA was initialised (CG117).

On a GPU, a DataLoader worker (num_workers > 0, forked from the training process) that moves its
items to CUDA fails with torch.cuda._lazy_init's "Cannot re-initialize CUDA in forked subprocess";
`verify --device sim` must fail the same way, and blame CG117 at the user's line.
"""

import ast
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime


def _torch_bad_fork_message() -> str:
    """The message torch.cuda._lazy_init raises in a bad fork, read from torch's own source."""
    import torch.cuda

    with open(torch.cuda.__file__) as f:
        tree = ast.parse(f.read())
    lazy_init = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_lazy_init")
    for node in ast.walk(lazy_init):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            arg = node.exc.args[0]
            if isinstance(arg, ast.Constant) and "forked subprocess" in str(arg.value):
                return arg.value
    raise AssertionError("torch.cuda._lazy_init raises no bad-fork error")


# Run in a fresh process (the simulator cannot be uninstalled); prints one JSON object.
_FORKS = r"""
import json, os, sys
import torch
from cpu2gpu.runtime.device import sim

sim.install()
out = {}


def in_child(work):
    # What `work` does in a forked child: "ok: ..." or "TypeName: message".
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            text = "ok: " + repr(work())
        except BaseException as e:
            text = f"{type(e).__name__}: {e}"
        os.write(w, text.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return text


out["available_before"] = torch.cuda.is_available() and torch.cuda.device_count() == 1
out["initialized_before"] = torch.cuda.is_initialized()
# No device work in the parent yet: a child may initialise CUDA itself.
out["clean_fork"] = in_child(lambda: (torch.ones(3, device="cuda") * 2).sum().item())


def init_then_fork():
    torch.zeros(1).cuda()  # this child initialises CUDA itself
    return in_child(lambda: torch.zeros(1).cuda().device)


out["clean_fork_then_nested"] = in_child(init_then_fork)
out["initialized_after_clean_fork"] = torch.cuda.is_initialized()

x = torch.arange(4.0).to("cuda")  # the parent initialises CUDA
out["initialized_after"] = torch.cuda.is_initialized()
out["factory"] = in_child(lambda: torch.zeros(2, device="cuda"))
out["move"] = in_child(lambda: torch.zeros(2).to(torch.device("cuda")))
out["cuda_method"] = in_child(lambda: torch.zeros(2).cuda())
out["inherited"] = in_child(lambda: x + 1)
out["current_device"] = in_child(lambda: torch.cuda.current_device())
out["queries"] = in_child(lambda: (torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.is_initialized()))
out["cpu_work"] = in_child(lambda: torch.ones(2).sum().item())
out["seeding"] = in_child(lambda: torch.manual_seed(1) is not None)
out["parent_still_works"] = (x * 2).sum().item()
print(json.dumps(out))
"""


def test_fork_after_device_work_raises_pytorchs_error_and_a_clean_fork_works(tmp_path):
    expected = _torch_bad_fork_message()
    assert expected.startswith("Cannot re-initialize CUDA in forked subprocess")
    proc = subprocess.run([sys.executable, "-c", _FORKS], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    # is_available() and device_count() do not initialise CUDA; device work does.
    assert out["available_before"] is True and out["initialized_before"] is False
    assert out["clean_fork"] == "ok: 6.0"
    # The clean child initialised CUDA itself: its own fork is a bad one.
    assert out["clean_fork_then_nested"] == "ok: " + repr(f"RuntimeError: {expected}")
    assert out["initialized_after_clean_fork"] is False  # the children's CUDA is not the parent's
    assert out["initialized_after"] is True

    for work in ("factory", "move", "cuda_method", "inherited", "current_device"):
        assert out[work] == f"RuntimeError: {expected}", (work, out[work])
    # A bad fork may still ask, compute on the CPU and seed (torch.manual_seed skips its CUDA).
    assert out["queries"] == "ok: (True, 1, False)"
    assert out["cpu_work"] == "ok: 2.0"
    assert out["seeding"] == "ok: True"
    assert out["parent_still_works"] == 12.0


def test_cuda_in_loader_workers_fails_with_cg117_and_the_fix_passes(fixtures_dir):
    def one(case):
        script, kw = case
        if kw.get("against"):
            kw = dict(kw, against=os.path.join(fixtures_dir, kw["against"]))
        return verify(os.path.join(fixtures_dir, script), cwd=fixtures_dir, device="sim", timeout=HANG_GUARD_S, **kw)

    with ThreadPoolExecutor(2) as pool:
        bug, fixed = pool.map(one, [("worker_cuda_bug.py", {}),
                                    ("worker_cuda_fixed.py", {"against": "worker_cuda_original.py"})])

    assert bug["verdict"] == "fail"
    run = bug["runs"][0]
    assert run["status"] == "error" and run["steps"] == 0
    # The DataLoader re-raises the worker's error in the training process, with the worker's traceback.
    message = run["exception"]["message"]
    assert message.startswith("Caught RuntimeError in DataLoader worker process")
    assert message.rstrip().endswith("RuntimeError: " + _torch_bad_fork_message())
    reason = bug["reasons"][0]
    assert reason["rule"] == "CG117" and reason["rule_name"] == "cuda-in-loader-worker", reason
    assert reason["where"]["file"].endswith("worker_cuda_bug.py") and reason["where"]["line"] == 25, reason
    assert "Points.__getitem__() at worker_cuda_bug.py:25" in reason["cause"], reason["cause"]
    assert "DataLoader worker process" in reason["cause"]

    assert fixed["verdict"] == "pass", fixed["reasons"]
    sim_run = next(r for r in fixed["runs"] if r["label"] == "migrated (sim)")
    assert sim_run["steps"] == 16 and sim_run["device_forward_calls"] > 0
    cmp = next(c for c in fixed["comparisons"] if c["run"] == "migrated (sim)")
    assert cmp["ok"] and cmp["compared"] == 16


def test_the_static_rule_finds_the_same_line(fixtures_dir):
    from cpu2gpu import check_source

    path = os.path.join(fixtures_dir, "worker_cuda_bug.py")
    with open(path) as f:
        hits = [h for h in check_source(f.read(), path) if h.code == "CG117"]
    assert hits and {h.line for h in hits} == {25}
    with open(os.path.join(fixtures_dir, "worker_cuda_fixed.py")) as f:
        assert not [h for h in check_source(f.read(), "worker_cuda_fixed.py") if h.code == "CG117"]
