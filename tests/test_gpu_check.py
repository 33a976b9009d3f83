"""benchmarks/gpu_check.py without a GPU and without torch: the kinds of error it tells apart, when the
simulator and the device agree, which items it runs. (Its --device sim run: tests/runtime/test_gpu_check_sim.py.)

Static: this module never imports torch.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from .conftest import FIXTURES, ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gc = _load()


def test_importing_the_check_loads_neither_torch_nor_the_runtime():
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('g', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); sys.modules['g'] = m; s.loader.exec_module(m); "
            "print(sorted(n for n in sys.modules if n == 'torch' or n.startswith('cpu2gpu')))")
    out = subprocess.run([sys.executable, "-c", code, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("message, kind", [
    # real CUDA's words (torch 2.x), and the simulator's, which copies them
    ("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! (when "
     "checking argument for argument mat1 in method wrapper_CUDA_addmm)", gc.MISMATCH),
    ("Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on "
     "cuda:0 (when checking argument in method wrapper_CUDA_addmm)", gc.MISMATCH),
    ("Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same or input should "
     "be a MKLDNN tensor and weight is a dense tensor", gc.MISMATCH),
    ("Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same", gc.MISMATCH),
    ("Expected object of device type cuda but got device type cpu for argument #1 'self' in call to _th_addmm",
     gc.MISMATCH),
    ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
     gc.NUMPY),
    ("can't convert mps:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.",
     gc.NUMPY),
    ("indices should be either on cpu or on the same device as the indexed tensor (cpu)", gc.INDEX),
    ("Expected a 'cuda' device type for generator but found 'cpu'", gc.GENERATOR),
    ("Input and hidden tensors are not at the same device, found input tensor at cuda:0 and hidden tensor at cpu",
     gc.RNN_HIDDEN),
    ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. Please use "
     "float32 instead.", gc.FLOAT64_MPS),
    ("Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n ...\n"
     "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
     "use the 'spawn' start method", gc.FORKED),
    # not about devices
    ("Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same", gc.OTHER),
    ("mat1 and mat2 shapes cannot be multiplied (4x3 and 2x5)", gc.OTHER),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", gc.OTHER),
    ("", gc.OTHER),
    (None, gc.OTHER),
])
def test_error_kind(message, kind):
    assert gc.error_kind(message) == kind


def test_every_kind_the_task_names_is_a_kind():
    assert set(gc.KINDS) >= {"device mismatch", "numpy of a device tensor", "index device", "generator device",
                             "RNN hidden device", "float64 on mps", "other"}


def _report(status, message=None, sim_limit=False):
    run = {"role": "migrated", "status": status, "exception": {"type": "RuntimeError", "message": message}}
    return {"verdict": "fail", "runs": [{"role": "original", "status": "ok"}, run],
            "reasons": [{"cause": "x", "sim_limit": sim_limit}]}


def test_the_outcome_of_a_run_and_when_the_devices_agree():
    hidden = "Input and hidden tensors are not at the same device, found input tensor at cuda:0 and hidden tensor at cpu"
    assert gc.outcome(_report("max_steps")) == gc.RAN
    assert gc.outcome(_report("error", hidden)) == gc.RNN_HIDDEN
    assert gc.outcome(_report("error", "Could not run 'aten::x' with arguments from the 'cuda' backend",
                              sim_limit=True)) == gc.SIM_LIMIT
    assert gc.outcome(_report("timeout")) == "timeout"
    assert gc.outcome(None) == "no result"
    assert gc.agrees(gc.RNN_HIDDEN, gc.RNN_HIDDEN) and gc.agrees(gc.RAN, gc.RAN)
    assert not gc.agrees(gc.RNN_HIDDEN, gc.MISMATCH)  # refused, but for another reason
    assert not gc.agrees(gc.RAN, gc.MISMATCH)  # the simulator let through what CUDA refuses
    assert not gc.agrees(gc.MISMATCH, gc.RAN)  # the simulator refused what CUDA runs
    assert gc.agrees(gc.SIM_LIMIT, gc.RAN) and not gc.agrees(gc.SIM_LIMIT, gc.SIM_LIMIT)


def test_the_items_cover_every_bug_report_and_mistake_once():
    names = [i.name for i in gc.all_items()]
    assert len(names) == len(set(names))
    bugs = sorted(p for p in (FIXTURES / "bugs").glob("*/bug.py"))
    assert bugs and all(f"fidelity:{p.relative_to(FIXTURES)}" in names for p in bugs)
    assert all(f"fidelity:{p.relative_to(FIXTURES)}" in names for p in (FIXTURES / "runtime").glob("mistake_*.py"))
    assert {i.part for i in gc.all_items()} | {i.part for i in gc.speed_items("H100")} == set(gc.PARTS)
    assert "migrate:migrate/original_fails" in names and gc.MIGRATE_RC["original_fails"] == 3


def test_only_and_limit_pick_the_items():
    items = gc.all_items()
    picked = gc.select(items, ["bugs/18_", "mlp_ddp"], None)
    assert [i.name for i in picked] == ["distributed:runtime/ddp/mlp_ddp.py",
                                        "fidelity:bugs/18_lstm_hidden_state_in_forward/bug.py",
                                        "fidelity:bugs/18_lstm_hidden_state_in_forward/fixed.py"]
    one_each = gc.select(items, [], 1)
    assert sorted(i.part for i in one_each) == sorted(p for p in gc.PARTS if p != "speed")
    speed = [i.name for i in gc.speed_items("H100")]  # the speed part is a command of its own (--speed)
    assert speed == [f"speed:{name}" for name in gc.SPEED_SCRIPTS]
    assert all((FIXTURES / "speed" / f"{name}.py").is_file() for name in gc.SPEED_SCRIPTS)
