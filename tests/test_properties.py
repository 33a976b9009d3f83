"""Properties over random PyTorch-style scripts and notebooks built from pieces (tests/strategies.py).

For every script (strategies.script_failures): check and rewrite do not raise, the rewrite parses,
a second rewrite changes nothing, every finding's line and column lie inside the file, and the
rewrite drops none of the user's code (identifiers and comments). Notebooks
(strategies.notebook_failures): the same, plus the rewrite is a valid notebook with the same cells.
Then the minimal examples that long fuzz runs (benchmarks/fuzz.py) found, as plain tests.
"""

from __future__ import annotations

import ast
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpu2gpu import rewrite_source

from .strategies import notebook_failures, notebook_file, rich_source_file, script_failures, source_file

# CI runs a few dozen examples per property; set CPU2GPU_PROPERTY_EXAMPLES=2000 for a long hunt
# (benchmarks/fuzz.py runs the same generators for thousands, reporting every failure).
EXAMPLES = int(os.environ.get("CPU2GPU_PROPERTY_EXAMPLES", "50"))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(code=source_file(), unsafe=st.booleans())
def test_rewrite_properties(code, unsafe):
    ast.parse(code)  # the generator makes valid Python
    assert script_failures(code, unsafe) == []


@settings(max_examples=max(EXAMPLES // 4, 1), deadline=None)
@given(code=source_file())
def test_bytes_and_text_agree(code):
    assert rewrite_source(code.encode()) == rewrite_source(code)


@settings(max_examples=EXAMPLES, **SETTINGS)
@given(code=rich_source_file(), unsafe=st.booleans())
def test_rich_script_properties(code, unsafe):
    ast.parse(code)
    assert script_failures(code, unsafe) == []


@settings(max_examples=max(EXAMPLES // 2, 1), **SETTINGS)
@given(code=st.one_of(source_file(), rich_source_file()))
def test_ddp_migration_refuses_or_writes_valid_code(code):
    """`rewrite --distributed ddp` on generated training scripts: a refusal with its reason, or Python
    that parses, wraps the model once, sets up one process group, and is refused when given again
    (it is distributed now)."""
    import libcst as cst

    from cpu2gpu.distributed import Refusal, migrate_bytes_to_ddp

    migrated = rewrite_source(code).encode()
    try:
        new, summary = migrate_bytes_to_ddp(code.encode(), migrated)
    except Refusal as refusal:
        assert str(refusal) and "\n" not in str(refusal)
        return
    text = new.decode()
    ast.parse(text)
    assert text.count("init_process_group(") == 1 and text.count("DDP(") == 1 and summary
    with pytest.raises(Refusal, match="already distributed"):
        migrate_bytes_to_ddp(new, rewrite_source(new))
    cst.parse_module(text)


@settings(max_examples=max(EXAMPLES // 2, 1), **SETTINGS)
@given(text=notebook_file())
def test_notebook_properties(text):
    assert notebook_failures(text) == []


STATELESS_MODULE_MOVED_WITH_CUDA = """import torch
from torch import nn
from torch.utils.data import DataLoader


class Net(nn.Module):
    def forward(self, x):
        return x * 2


model = Net()
model.cuda()
loader = DataLoader(dataset, batch_size=1)
for inputs, targets in loader:
    outputs = model(inputs)
model(torch.ones(2))
"""


def test_stateless_module_moved_with_cuda_is_a_fixed_point():
    # A module without parameters computes wherever its input is: moving it asks nothing of its inputs.
    once = rewrite_source(STATELESS_MODULE_MOVED_WITH_CUDA)
    assert rewrite_source(once) == once


# -- minimal examples from the fuzz runs -------------------------------------------------------


def _rewritten_twice(code: str) -> tuple[str, str]:
    once = rewrite_source(code)
    ast.parse(once)
    return once, rewrite_source(once)


# Python counts neither a form feed nor U+2028 (nor \x1c, \x85) as a line break, str.splitlines
# does: a ``# noqa`` read from the wrong line used to suppress the wrong finding, so that the
# second rewrite saw what the first had skipped.
ODD_PREVIOUS_LINES = ["\x0c", "\x0c# a", "# a\x0cb", "x = 1\x0c", "# a\u2028b", "x = 1  # a\u2028b",
                      's = "a\u2028b"', "# a\x1cb", "# a\x85b"]


@pytest.mark.parametrize("previous", ODD_PREVIOUS_LINES)
def test_noqa_after_an_odd_line_break_on_the_previous_line(previous):
    code = (f"import torch\n{previous}\nmodel = torch.nn.Linear(1, 1)  # noqa\n"
            "other = torch.nn.Linear(1, 1)\nother(torch.ones(1))\n")
    once, twice = _rewritten_twice(code)
    assert twice == once
    assert "model = torch.nn.Linear(1, 1)  # noqa\n" in once  # the noqa'd line is left alone
    assert "other = torch.nn.Linear(1, 1).to(device)\n" in once  # and only that line


@pytest.mark.parametrize("before_noqa", ["\x0c  ", "  # a\x0c", "  # a\u2028"])
def test_noqa_after_an_odd_line_break_on_its_own_line(before_noqa):
    code = f"import torch\nmodel = torch.nn.Linear(1, 1){before_noqa}# noqa\nmodel(torch.ones(1))\n"
    once, twice = _rewritten_twice(code)
    assert twice == once
    assert f"model = torch.nn.Linear(1, 1){before_noqa}# noqa\n" in once


# A script that reaches torch without binding it (``torch.ones`` with only ``from torch import nn``)
# fails with NameError as it stands. The first rewrite adds ``import torch`` for the device line,
# and must already read ``torch.ones(1)`` as the factory it will be, or a second rewrite changes it.
UNBOUND_TORCH = [
    "from torch import nn\nmodel = nn.Linear(1, 1)\nmodel(torch.ones(1))\n",
    "import torch.nn as nn\nmodel = nn.Linear(1, 1)\nmodel(torch.ones(1))\n",
]


@pytest.mark.parametrize("code", UNBOUND_TORCH)
def test_torch_used_without_import_is_rewritten_once(code):
    once, twice = _rewritten_twice(code)
    assert twice == once


@pytest.mark.parametrize("code", UNBOUND_TORCH)
def test_torch_used_without_import_rewrites_to_valid_code(code):
    once, _ = _rewritten_twice(code)
    assert "import torch\n" in once
