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
    fixed = rewrite_source(case.code, unsafe_fixes=True)
    cst.parse_module(fixed)
    if case.fixed is not None:
        assert fixed == case.fixed
    assert rewrite_source(fixed, unsafe_fixes=True) == fixed
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
