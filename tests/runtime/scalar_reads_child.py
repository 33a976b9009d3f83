"""Scalar reads on the simulated device equal the same reads on the CPU (run by test_sim_scalar_reads.py).

A value is made by a source (an RNN/GRU/LSTM output through a Linear and log_softmax, as a decoder
makes its next word, a hidden or cell state, a fused cell's output, a Linear, an embedding lookup,
arange, randn), taken through a chain of 1-3 steps (topk(1), argmax, max(dim), sort, squeeze,
view(-1), [0], detach, .data, .float()), then read into Python (item, int, float, bool, tolist,
__index__, a list index, format, or a new tensor built from a list that holds it). Each composition
runs on the CPU and on the simulated device; the outcomes (the value, or the type of the exception)
must be the same. Run in a fresh process: ``python -m tests.runtime.scalar_reads_child N``; it
installs the simulator, checks a fixed grid (every source with every read), then N compositions
drawn by hypothesis, and prints one JSON line: the sources, the reads and how often each ran.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import warnings
from collections import Counter
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpu2gpu.runtime.device import sim

VOCAB, HIDDEN = 7, 6
WORDS = [f"w{i}" for i in range(64)]  # index2word: read with a tensor as the index


def _modules() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {
        "rnn": nn.RNN(HIDDEN, HIDDEN), "gru": nn.GRU(HIDDEN, HIDDEN, batch_first=True),
        "lstm": nn.LSTM(HIDDEN, HIDDEN), "gru_cell": nn.GRUCell(HIDDEN, HIDDEN),
        "lstm_cell": nn.LSTMCell(HIDDEN, HIDDEN), "out": nn.Linear(HIDDEN, VOCAB),
        "embedding": nn.Embedding(VOCAB, HIDDEN),
    }


_CPU_MODULES = _modules()
_INPUT = torch.randn(1, 1, HIDDEN)  # one decoder step: (seq_len 1, batch 1, features)
_BATCH = torch.randn(2, 3, HIDDEN)  # batch_first: (batch 2, seq_len 3, features)
_TOKENS = torch.tensor([[3, 1], [0, 5]])
_RANDN = torch.randn(3, VOCAB)  # drawn on the CPU: a draw on the device uses the device's generator


def _word_scores(m: dict, h: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(m["out"](h), dim=-1)


# Each source makes its value from the modules and inputs of one device.
SOURCES: dict[str, Callable[[dict, Callable], torch.Tensor]] = {
    "rnn_output": lambda m, on: _word_scores(m, m["rnn"](on(_INPUT))[0]),
    "gru_output": lambda m, on: _word_scores(m, m["gru"](on(_BATCH))[0]),
    "lstm_output": lambda m, on: _word_scores(m, m["lstm"](on(_INPUT))[0])[0],  # decoder_output[0]
    "gru_hidden": lambda m, on: m["gru"](on(_BATCH))[1],
    "lstm_cell_state": lambda m, on: m["lstm"](on(_INPUT))[1][1],
    "gru_cell": lambda m, on: _word_scores(m, m["gru_cell"](on(_INPUT[0]))),
    "lstm_cell": lambda m, on: _word_scores(m, m["lstm_cell"](on(_BATCH[:, 0]))[0]),
    "linear": lambda m, on: m["out"](on(_BATCH)),
    "embedding": lambda m, on: m["embedding"](on(_TOKENS)),
    "arange": lambda m, on: on(torch.arange(12)).view(3, 4),
    "randn": lambda m, on: on(_RANDN),
}

STEPS: dict[str, Callable[[Any], Any]] = {
    "topk_values": lambda t: t.topk(1)[0],
    "topk_indices": lambda t: t.topk(1)[1],
    "data_topk_indices": lambda t: t.data.topk(1)[1],
    "argmax": lambda t: t.argmax(),
    "argmax_dim": lambda t: t.argmax(dim=-1),
    "max_values": lambda t: t.max(-1)[0],
    "max_indices": lambda t: t.max(-1)[1],
    "sort_indices": lambda t: t.sort(-1, descending=True)[1],
    "squeeze": lambda t: t.squeeze(),
    "view": lambda t: t.view(-1),
    "first": lambda t: t[0],
    "detach": lambda t: t.detach(),
    "data": lambda t: t.data,
    "float": lambda t: t.float(),
}

READS: dict[str, Callable[[Any], Any]] = {
    "item": lambda t: t.item(),
    "int": int,
    "float": float,
    "bool": bool,
    "if": lambda t: "yes" if t else "no",
    "tolist": lambda t: t.tolist(),
    "index": lambda t: t.__index__(),
    "list_index": lambda t: WORDS[t],
    "format": lambda t: f"{t:.4f}",
    "tensor_of_list": lambda t: torch.tensor([t]),
    "long_tensor_of_list": lambda t: torch.LongTensor([[t]]),
    "as_tensor_of_list": lambda t: torch.as_tensor([t, t]),
    "tensor_of_list_on_device": lambda t: torch.tensor([[t]], device=t.device),
    "new_tensor": lambda t: t.new_tensor([t]),
}

MODES = ("grad", "no_grad", "inference_mode")


def _mode(mode: str):
    if mode == "inference_mode":
        return torch.inference_mode()
    return torch.set_grad_enabled(mode == "grad")


def _plain(value: Any) -> Any:
    """A read's result as plain Python, for comparing across devices (a tensor: its values and dtype)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.tolist())
    if isinstance(value, str) and value.startswith("tensor("):
        return "tensor text"  # format of a tensor with more than one element: its repr, device included
    return value


def _outcome(source: str, chain: tuple, read: str, mode: str, device: str) -> tuple:
    modules = _CPU_MODULES if device == "cpu" else _SIM_MODULES
    on: Callable = (lambda t: t) if device == "cpu" else (lambda t: t.to(device))
    try:
        with _mode(mode):
            value = SOURCES[source](modules, on)
            for step in chain:
                value = STEPS[step](value)
            return ("ok", _plain(READS[read](value)))
    except NotImplementedError:
        raise  # the simulation's limit ("Could not run ... backend"): never an outcome to compare
    except Exception as e:  # noqa: BLE001 - the CPU's own refusals (a read of many elements ...) are outcomes
        return ("raise", type(e).__name__)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        # The device's RNN runs the fused cells' stand-ins: the same math, rounded differently.
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
    if isinstance(a, str) and isinstance(b, str) and a != b:
        try:
            return _close(float(a), float(b))
        except ValueError:
            return False
    return type(a) is type(b) and a == b


covered: Counter = Counter()


def check(source: str, chain: tuple, read: str, mode: str) -> None:
    label = f"{source} -> {' -> '.join(chain)} -> {read} ({mode})"
    try:
        cpu = _outcome(source, chain, read, mode, "cpu")
        device = _outcome(source, chain, read, mode, "cuda")
    except NotImplementedError as e:
        raise AssertionError(f"{label}: {str(e).splitlines()[0]}") from None
    assert _close(cpu, device), f"{label}: cpu {cpu}, sim {device}"
    covered[f"read:{read}:{cpu[0]}"] += 1
    covered[f"source:{source}"] += 1


GRID_CHAINS = (("argmax",), ("topk_indices", "view", "first"), ("max_values", "view", "first", "detach"))


def check_grid() -> None:
    """Every source with every read, through the chains of a greedy decoder."""
    for source in SOURCES:
        for read in READS:
            for chain in GRID_CHAINS:
                check(source, chain, read, "no_grad")


def check_drawn(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(source=st.sampled_from(sorted(SOURCES)),
           chain=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=3).map(tuple),
           read=st.sampled_from(sorted(READS)), mode=st.sampled_from(MODES))
    def property_(source: str, chain: tuple, read: str, mode: str) -> None:
        check(source, chain, read, mode)

    property_()


_SIM_MODULES: dict[str, nn.Module] = {}


def main(examples: int) -> None:
    sim.install()  # for the rest of this process
    _SIM_MODULES.update({name: copy.deepcopy(module).to("cuda") for name, module in _CPU_MODULES.items()})
    warnings.simplefilter("ignore")  # item() of a tensor that requires grad, and the like
    check_grid()
    check_drawn(examples)
    print(json.dumps({"sources": sorted(SOURCES), "reads": sorted(READS), "covered": dict(covered)}))


if __name__ == "__main__":
    main(int(sys.argv[1]))
