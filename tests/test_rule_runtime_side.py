"""Each rule declares its runtime side (cpu2gpu/rules/runtimeside.py), and the runtime reads nothing else.

A rule's runtime side says how a run shows the mistake the rule finds (the words of the exception, what
the failing frames hold, or the run's records), the cause the diagnosis gives for it, and the edit
``migrate`` makes for it, or why there is none. Here: every rule declares one; a rule with a fix has a
runtime repair or says why not; every cause the diagnosis (runtime/causes/) can give is declared by its
rule, in the declared words with the fields they name; and neither the diagnosis nor migrate keeps a
rule code of its own. Read from the rules and the runtime's source with ``ast``: torch is not needed.
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

from cpu2gpu.rules import ALL_RULES, RULES_BY_CODE, RUNTIME_REPAIRS
from cpu2gpu.rules.runtimeside import (BINDING, CPU_MODULE, REGISTERED_NAMES, RULE_FIX, TRAINED_TENSORS, RuntimeSide,
                                       Symptom)

ROOT = Path(__file__).resolve().parent.parent
CAUSES = ROOT / "runtime" / "causes"
CODE = re.compile(r"CG\d{3}")


HELPERS = ("found", "declared")  # the diagnosis's two ways to a rule's declaration: by its code and case


def _calls(name: str) -> list[tuple[str, ast.Call]]:
    """(file, call) for each call of ``name`` in the diagnosis's modules, but in the helpers themselves."""
    out = []
    for path in sorted(CAUSES.glob("*.py")):
        tree = ast.parse(path.read_text())
        inside = {id(node) for d in ast.walk(tree) if isinstance(d, ast.FunctionDef) and d.name in HELPERS
                  for node in ast.walk(d)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name \
                    and id(node) not in inside:
                out.append((path.name, node))
    return out


def _declared_case(call: ast.Call) -> tuple[str, str]:
    """The (code, case) a call of ``found`` or ``declared`` names, as literals."""
    assert len(call.args) >= 2 and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                       for a in call.args[:2]), ast.unparse(call)
    code, case = call.args[0], call.args[1]
    assert isinstance(code, ast.Constant) and isinstance(case, ast.Constant)
    return code.value, case.value


def _fields(symptom: Symptom) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(symptom.says) if name}


def _codes_in(path: Path) -> list[str]:
    """The string constants of ``path`` that are a rule code and nothing else."""
    return [node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.fullmatch(node.value)]


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_every_rule_declares_its_runtime_side(rule):
    assert "runtime" in vars(rule), f"{rule.code} declares no runtime side (runtime = RuntimeSide(...))"
    side = rule.runtime
    assert isinstance(side, RuntimeSide)
    if not side.symptoms and not side.records:
        assert side.unseen.strip(), f"{rule.code}: no run shows it, and it does not say why (unseen=...)"
    cases = [d.case for d in side.symptoms]
    assert len(cases) == len(set(cases)), f"{rule.code} names a case twice: {cases}"


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if r.fix_safety is not None], ids=lambda r: r.code)
def test_a_rule_with_a_fix_has_a_runtime_repair_or_says_why_not(rule):
    side = rule.runtime
    assert side.repair is not None or side.unrepaired.strip(), \
        f"{rule.code} has a static fix but declares neither a runtime repair nor why migrate makes none"


@pytest.mark.parametrize("code", sorted(RUNTIME_REPAIRS))
def test_a_runtime_repair_is_one_migrate_makes_for_a_cause_a_run_locates(code):
    rule, how = RULES_BY_CODE[code], RUNTIME_REPAIRS[code]
    assert how.edit in (BINDING, RULE_FIX), how
    assert how.located in (("", CPU_MODULE, TRAINED_TENSORS) if how.edit == BINDING else ("",)), how
    assert how.prepare in (("", REGISTERED_NAMES) if how.edit == RULE_FIX else ("",)), how
    assert rule.runtime.symptoms or rule.runtime.records, f"{code}: repaired, but no run shows it"
    if how.edit == RULE_FIX:
        assert rule.fix_safety is not None, f"{code}: the rule's own fix repairs it, and the rule has none"
    assert not rule.runtime.unrepaired, f"{code}: repaired, and says why not"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_the_words_of_a_cause_are_a_template(rule):
    for symptom in rule.runtime.symptoms:
        _fields(symptom)  # a malformed template raises here
        assert symptom.shown_by.strip() and symptom.says.strip(), symptom
        if symptom.pattern:
            re.compile(symptom.pattern)


def test_every_cause_the_diagnosis_gives_is_declared_by_its_rule_with_the_fields_it_names():
    calls = _calls("found")
    assert calls, "the diagnosis gives no rule's cause through found(): the test reads the wrong files"
    wrong = []
    for file, call in calls:
        code, case = _declared_case(call)
        if code not in RULES_BY_CODE:
            wrong.append(f"{file}: {code} is no rule")
            continue
        try:
            symptom = RULES_BY_CODE[code].runtime.symptom(case)
        except KeyError:
            wrong.append(f"{file}: {code} declares no case {case!r}")
            continue
        given = {k.arg for k in call.keywords if k.arg is not None}
        if given != _fields(symptom):
            wrong.append(f"{file}: {code} {case!r} is given {sorted(given)}, its words name {sorted(_fields(symptom))}")
    for file, call in _calls("declared"):
        code, case = _declared_case(call)
        if code not in RULES_BY_CODE or case not in [d.case for d in RULES_BY_CODE[code].runtime.symptoms]:
            wrong.append(f"{file}: reads {code} {case!r}, which no rule declares")
    assert not wrong, "\n".join(wrong)


def test_every_declared_cause_is_one_the_diagnosis_gives():
    given = {_declared_case(call) for _, call in _calls("found")}
    stale = [f"{rule.code} {d.case!r}" for rule in ALL_RULES for d in rule.runtime.symptoms
             if (rule.code, d.case) not in given]
    assert not stale, f"declared, but the diagnosis never gives them: {stale}"


def test_the_diagnosis_and_migrate_keep_no_rule_code_of_their_own():
    """A rule code the diagnosis uses is the first argument of found() or declared(); migrate reads the rules'
    repairs."""
    loose = []
    for path in sorted(CAUSES.glob("*.py")):
        tree = ast.parse(path.read_text())
        named = {id(call.args[0]) for call in ast.walk(tree) if isinstance(call, ast.Call) and call.args
                 and isinstance(call.func, ast.Name) and call.func.id in HELPERS}
        loose.extend(f"{path.name}:{node.lineno}: {node.value}" for node in ast.walk(tree)
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)
                     and CODE.fullmatch(node.value) and id(node) not in named)
    assert not loose, "rule codes outside found()/declared():\n" + "\n".join(loose)
    assert _codes_in(ROOT / "runtime" / "judge" / "migrate.py") == []


def test_the_rules_verify_blames_on_a_run_s_records_declare_them():
    """verify's judgement of a run that ended well (runtime/judge/verify.py) names rules too: those rules
    declare which records show them."""
    codes = set(_codes_in(ROOT / "runtime" / "judge" / "verify.py"))
    assert codes, "verify names no rule: the test reads the wrong file"
    undeclared = sorted(code for code in codes if code not in RULES_BY_CODE or not RULES_BY_CODE[code].runtime.records)
    assert not undeclared, f"verify blames these on a run's records, which they do not declare: {undeclared}"
