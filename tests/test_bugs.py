"""The bug-report corpus (fixtures/bugs/NN_slug/): `check` flags every bug on its line, the fixes check clean.

Each case is modelled on a public report (README.md: the links, the error, what
the maintainers said). bug.py carries machine-readable headers:

    # rule: CG109          the rule that must catch it
    # bug-line: 14, 16     the line(s) where that rule may report it (any one will do)
    # same-loss-as-fixed: no   (optional) its rewrite need not learn what fixed.py learns

Static: this module never imports torch.
"""

from __future__ import annotations

import re

import pytest

import cpu2gpu

from .conftest import FIXTURES

BUGS = FIXTURES / "bugs"
CASES = sorted(p.name for p in BUGS.iterdir() if p.is_dir() and (p / "bug.py").is_file())

# Every pattern of issue 9 has at least one case.
COVERED = {"CG102", "CG104", "CG109", "CG110", "CG111", "CG112", "CG113", "CG114", "CG203"}


def header(text: str, key: str):
    m = re.search(rf"^# {re.escape(key)}: *(.+?) *$", text, re.M)
    return m.group(1) if m else None


def bug_lines(text: str) -> set:
    return {int(x) for x in header(text, "bug-line").split(",")}


def test_the_corpus_is_complete():
    assert len(CASES) >= 15, CASES
    rules = set()
    for case in CASES:
        folder = BUGS / case
        assert re.fullmatch(r"\d\d_[a-z0-9_]+", case), case
        for name in ("README.md", "bug.py", "fixed.py"):
            assert (folder / name).is_file(), f"{case}/{name} is missing"
        bug = (folder / "bug.py").read_text()
        rule = header(bug, "rule")
        assert rule and re.fullmatch(r"CG\d{3}", rule), f"{case}: no '# rule: CGnnn' header"
        assert header(bug, "bug-line"), f"{case}: no '# bug-line: N' header"
        assert header(bug, "same-loss-as-fixed") in (None, "no")
        lines = bug.splitlines()
        for n in bug_lines(bug):
            assert 1 <= n <= len(lines) and lines[n - 1].strip(), f"{case}: bug-line {n} is not a line of code"
        readme = (folder / "README.md").read_text()
        assert "https://" in readme and rule in readme, f"{case}: README.md needs the link(s) and the rule"
        for name in ("bug.py", "fixed.py"):
            src = (folder / name).read_text()
            assert 'torch.device("cuda" if torch.cuda.is_available() else "cpu")' in src, f"{case}/{name}"
            assert "torch.manual_seed(" in src and 'print(f"step {i} loss {loss.item():.6f}")' in src, f"{case}/{name}"
        rules.add(rule)
    assert COVERED <= rules, f"no case for {sorted(COVERED - rules)}"


@pytest.mark.parametrize("case", CASES)
def test_check_flags_the_bug_on_its_line(case):
    path = BUGS / case / "bug.py"
    src = path.read_text()
    rule, lines = header(src, "rule"), bug_lines(src)
    findings = cpu2gpu.check_source(src, path=str(path))
    hits = [f for f in findings if f.code == rule and f.line in lines]
    assert hits, (f"{case}: no {rule} on line(s) {sorted(lines)}; got "
                  + ", ".join(f"{f.code}@{f.line}" for f in findings))


@pytest.mark.parametrize("case", CASES)
def test_the_fix_has_no_placement_finding(case):
    path = BUGS / case / "fixed.py"
    findings = cpu2gpu.check_source(path.read_text(), path=str(path))
    placement = [f"{f.code}@{f.line}: {f.message}" for f in findings if f.code.startswith("CG1")]
    assert not placement, f"{case}/fixed.py: " + "; ".join(placement)


def test_a_dataloader_generator_is_never_flagged():
    # A CPU generator given to a DataLoader (or random_split, a sampler) is right.
    for case in CASES:
        src = (BUGS / case / "fixed.py").read_text()
        if "DataLoader(" in src and "generator=" in src:
            findings = cpu2gpu.check_source(src, path=case)
            assert not [f for f in findings if f.code == "CG113"], case
            break
    else:
        pytest.fail("no fixed.py builds a DataLoader with a generator")
