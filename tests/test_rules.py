"""Every rule's VALID and INVALID examples, as tests."""

from __future__ import annotations

import libcst as cst
import pytest

from cpu2gpu import check_source, rewrite_source
from cpu2gpu.rules import ALL_RULES, RULES_BY_CODE

VALID = [(rule.code, i, src) for rule in ALL_RULES for i, src in enumerate(rule.VALID)]
INVALID = [(rule.code, i, case) for rule in ALL_RULES for i, case in enumerate(rule.INVALID)]


@pytest.mark.parametrize("code,index,source", VALID, ids=[f"{c}-valid-{i}" for c, i, _ in VALID])
def test_valid_examples_are_not_flagged(code, index, source):
    assert [f for f in check_source(source, select=[code]) if f.code == code] == []


@pytest.mark.parametrize("code,index,case", INVALID, ids=[f"{c}-invalid-{i}" for c, i, _ in INVALID])
def test_invalid_examples_are_flagged_and_fixed(code, index, case):
    findings = [f for f in check_source(case.code, select=[code]) if f.code == code]
    assert findings, f"{code} not reported"
    has_fix = RULES_BY_CODE[code].fix_safety is not None and case.fixable
    for finding in findings:
        assert finding.fix_available == has_fix
        assert 1 <= finding.line <= finding.end_line <= case.code.count("\n") + 1
    # performance rules touch a device-aware script (as these examples are) only when named
    named = [code] if RULES_BY_CODE[code].only_for_cpu_scripts_unless_selected else ()
    fixed = rewrite_source(case.code, unsafe_fixes=True, select=named)
    cst.parse_module(fixed)
    if case.fixed is not None:
        assert fixed == case.fixed
    assert rewrite_source(fixed, unsafe_fixes=True, select=named) == fixed
    remaining = [f for f in check_source(fixed, select=[code]) if f.code == code]
    if has_fix:
        assert remaining == []
    else:
        assert remaining, "a finding without a fix is still there after rewrite"


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_rule_is_documented(rule):
    doc = rule.__doc__ or ""
    assert "What it finds" in doc and ("Why it breaks" in doc or "Why it is slower" in doc) and "Example" in doc
    assert rule.VALID and rule.INVALID
    assert rule.name == rule.name.lower() and " " not in rule.name
    assert rule.fix_safety in ("safe", "unsafe", None)


def test_codes_are_unique_and_sorted():
    codes = [rule.code for rule in ALL_RULES]
    assert codes == sorted(set(codes))


def test_unsafe_fixes_need_the_flag():
    unsafe = [(rule, case) for rule in ALL_RULES if rule.fix_safety == "unsafe" for case in rule.INVALID]
    assert unsafe
    for rule, case in unsafe:
        assert [f for f in check_source(rewrite_source(case.code)) if f.code == rule.code]


def test_hints_are_off_unless_selected():
    source = RULES_BY_CODE["CG303"].INVALID[0].code
    assert "CG303" not in {f.code for f in check_source(source)}
    assert "CG303" in {f.code for f in check_source(source, select=["CG303"])}


def test_noqa_model_keeps_its_inputs_on_the_cpu():
    # A model left on the CPU on purpose: its inputs must not be moved to the device either.
    source = ("import torch\nfrom torch import nn\nmodel = nn.Linear(3, 1)  # noqa: CG101\n"
              "x = torch.randn(4, 3)\nprint(model(x))\n")
    assert check_source(source) == []
    assert rewrite_source(source) == source


AWARE = ("import torch\nfrom torch.utils.data import DataLoader\n"
         "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
         "model = torch.nn.Linear(2, 1).to(device)\n"
         "loss_fn = torch.nn.CrossEntropyLoss(weight=torch.ones(2, device=device))\n"
         "for x, y in DataLoader(ds):\n    x, y = x.to(device), y.to(device)\n    loss = loss_fn(model(x), y)\n")


def test_a_device_aware_script_comes_out_byte_for_byte():
    # no performance fix unless CG3 is named, no move of a loss whose weight is made on the device
    assert rewrite_source(AWARE, unsafe_fixes=True) == AWARE
    assert check_source(AWARE) == []
    assert [f.code for f in check_source(AWARE, select=["CG3"])] == ["CG301"]
    assert "pin_memory" in rewrite_source(AWARE, select=["CG301"])
    assert check_source(AWARE, select=["CG"]) == []  # the family's prefix is not named by "CG"


def test_a_cpu_script_still_gets_the_performance_fixes():
    cpu = "import torch\nfrom torch.utils.data import DataLoader\nmodel = torch.nn.Linear(2, 1)\n" \
          "for x, y in DataLoader(ds):\n    loss = model(x) - y\n"
    assert "pin_memory=torch.cuda.is_available()" in rewrite_source(cpu)


# A device-aware script is judged against its authors' own placements.
AWARE_HEAD = ("import torch\nfrom torch.utils.data import DataLoader\n"
              "device = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n")


def test_a_cpu_demo_in_a_device_aware_script_is_left_on_the_cpu():
    # a book chapter: a small model tried on the CPU first, then the real model trained on the device
    source = AWARE_HEAD + ("demo = torch.nn.Linear(4, 2)\nprint(demo(torch.ones(3, 4)).shape)\n"
                           "model = torch.nn.Linear(4, 2).to(device)\n"
                           "for x, y in DataLoader(ds):\n    x, y = x.to(device), y.to(device)\n"
                           "    loss = torch.nn.functional.cross_entropy(model(x), y)\n")
    assert [f.code for f in check_source(source)] == []
    assert rewrite_source(source, unsafe_fixes=True) == source


def test_a_model_trained_on_the_cpu_then_moved_is_not_moved_earlier():
    source = AWARE_HEAD + ("model = torch.nn.Linear(4, 2)\nfor x, y in DataLoader(ds):\n"
                           "    loss = torch.nn.functional.cross_entropy(model(x), y)\n"
                           "model.to(device)\nprint(model(torch.ones(1, 4, device=device)))\n")
    assert check_source(source) == []


def test_labels_left_behind_in_a_half_migrated_loop_are_still_found():
    source = AWARE_HEAD + ("model = torch.nn.Linear(4, 2).to(device)\n"
                           "for x, y in DataLoader(ds):\n    x = x.to(device)\n"
                           "    loss = torch.nn.functional.cross_entropy(model(x), y)\n")
    findings = check_source(source)
    assert [(f.code, f.line) for f in findings] == [("CG103", 5)]  # the loop that binds y
    assert "y = y.to(device)" in rewrite_source(source)


def test_a_model_fed_the_authors_device_tensors_is_still_found():
    source = AWARE_HEAD + ("model = torch.nn.Linear(4, 2)\n"
                           "for x, y in DataLoader(ds):\n    x, y = x.to(device), y.to(device)\n"
                           "    loss = torch.nn.functional.cross_entropy(model(x), y)\n")
    assert [f.code for f in check_source(source)] == ["CG101"]
    assert "model = torch.nn.Linear(4, 2).to(device)" in rewrite_source(source)


def test_batches_that_the_collate_function_moves_are_on_the_device():
    source = AWARE_HEAD + ("def collate(items):\n    x = torch.stack([i[0] for i in items])\n"
                           "    y = torch.stack([i[1] for i in items])\n    return x.to(device), y.to(device)\n"
                           "model = torch.nn.Linear(4, 2).to(device)\n"
                           "for x, y in DataLoader(ds, collate_fn=collate):\n"
                           "    loss = torch.nn.functional.cross_entropy(model(x), y)\n")
    assert check_source(source) == []


def test_lengths_that_forward_moves_to_the_cpu_itself_need_no_move():
    source = AWARE_HEAD + (
        "class RNN(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.rnn = torch.nn.LSTM(4, 8)\n"
        "    def forward(self, x, lengths):\n"
        "        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths.to('cpu'))\n"
        "        return self.rnn(packed)[1][0]\n"
        "model = RNN().to(device)\nlengths = torch.tensor([3, 2])\n"
        "print(model(torch.randn(3, 2, 4, device=device), lengths))\n")
    assert check_source(source) == []


def test_a_lambda_that_a_function_calls_is_fixed_once():
    source = ("import torch\ndev = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n\n\n"
              "def raises(fn):\n    try:\n        fn()\n    except RuntimeError:\n        pass\n\n\n"
              "x = torch.randn(4, 3).to(dev)\nraises(lambda: x + torch.ones(4, 3))\n")
    assert len(check_source(source)) == 1
    assert rewrite_source(source).endswith("raises(lambda: x + torch.ones(4, 3, device=dev))\n")


def test_a_layer_made_by_from_pretrained_is_a_module():
    source = ("import torch\nimport torch.nn as nn\n\n\nclass Encoder(nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n        self.pos = nn.Embedding.from_pretrained(torch.randn(6, 4), freeze=True)\n\n"
              "    def forward(self, x):\n        return x + self.pos(torch.LongTensor([[1, 2, 3, 4, 0]]))\n\n\n"
              "model = Encoder()\nprint(model(torch.randn(1, 5, 4)))\n")
    assert "self.pos(torch.LongTensor([[1, 2, 3, 4, 0]]).to(x.device))" in rewrite_source(source)
    assert "model = Encoder().to(device)" in rewrite_source(source)


# -- the DDP rules (CG4xx), on their fixtures --

DDP_CODES = ["CG401", "CG402", "CG403", "CG404", "CG405"]


@pytest.mark.parametrize("code", DDP_CODES)
def test_a_distributed_fixture_reports_its_rule_and_keeps_only_the_findings_without_a_fix(code):
    from .conftest import FIXTURES

    path = FIXTURES / "rules" / f"{code.lower()}_{RULES_BY_CODE[code].name.replace('-', '_')}.py"
    before = [f for f in check_source(path.read_bytes(), str(path)) if f.code == code]
    after = [f for f in check_source(path.with_name(path.stem + ".expected.py").read_bytes()) if f.code == code]
    assert before
    assert [(f.line, f.message) for f in after] == [(f.line, f.message) for f in before if not f.fix_available]


def test_a_load_in_a_distributed_script_is_reported_once():
    ddp = ("import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"
           "state = torch.load('m.pt')\n")
    assert [f.code for f in check_source(ddp, select=["CG2", "CG4"])] == ["CG405"]
    plain = "import torch\nstate = torch.load('m.pt')\n"
    assert [f.code for f in check_source(plain, select=["CG2", "CG4"])] == ["CG202"]
