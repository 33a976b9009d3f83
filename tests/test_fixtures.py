"""The fixture pairs: rewrite(input) == expected, and the expected file is a fixed point."""

from __future__ import annotations

import pytest

from cpu2gpu import check_source, rewrite_source
from cpu2gpu.rewrite.fixes import ACCELERATOR_DEVICE

from .conftest import FIXTURES

# fixtures/projects/ are whole projects: tests/test_projects.py rewrites each as one
PAIRS = sorted(p for p in FIXTURES.glob("**/*.py") if not p.name.endswith(".expected.py")
               and p.with_name(p.stem + ".expected.py").exists()
               and "projects" not in p.relative_to(FIXTURES).parts)


UNSAFE_MARK = b"# cpu2gpu-fixture: unsafe-fixes"


STYLE_MARK = b"# cpu2gpu-fixture: device-style accelerator"


def _rewrite(path, source):
    """A fixture that carries the mark is migrated with the unsafe fixes too; one that carries the
    style mark with `--device-style accelerator`."""
    data = path.read_bytes()
    expression = ACCELERATOR_DEVICE if STYLE_MARK in data else None
    return rewrite_source(source, unsafe_fixes=UNSAFE_MARK in data, device_expression=expression)


def _codes(path):
    return sorted({f.code for f in check_source(path.read_bytes(), str(path))})


@pytest.mark.parametrize("path", PAIRS, ids=[str(p.relative_to(FIXTURES)) for p in PAIRS])
def test_rewrite_matches_expected(path):
    expected = path.with_name(path.stem + ".expected.py").read_text(encoding="utf-8")
    assert _rewrite(path, path.read_bytes()) == expected


@pytest.mark.parametrize("path", PAIRS, ids=[str(p.relative_to(FIXTURES)) for p in PAIRS])
def test_expected_is_a_fixed_point_and_checks_clean(path):
    expected_path = path.with_name(path.stem + ".expected.py")
    expected = expected_path.read_text(encoding="utf-8")
    assert _rewrite(path, expected) == expected
    assert [c for c in _codes(expected_path) if c.startswith("CG1")] == []


def test_first_seed_findings():
    findings = check_source((FIXTURES / "seeds" / "linear_regression.py").read_bytes())
    by_code = {}
    for finding in findings:
        by_code.setdefault(finding.code, []).append(finding)
    assert len(by_code["CG101"]) == 1 and "model" in by_code["CG101"][0].message
    assert sorted(f.message.split("`")[1] for f in by_code["CG102"]) == ["x_train", "y_train"]
    # The prediction after the move back to the CPU.
    assert "CG108" in by_code or "CG107" in by_code
    assert {f.line for f in by_code.get("CG108", []) + by_code.get("CG107", [])} == {46}


@pytest.mark.parametrize("name", ["cifar_resnet.py", "cnn_synthetic.py"])
def test_second_seed_findings(name):
    findings = check_source((FIXTURES / "seeds" / name).read_bytes())
    assert [f.code for f in findings if f.code == "CG101"] == ["CG101"]
    moved = sorted(f.message.split("`")[1] for f in findings if f.code == "CG103")
    assert moved == ["images", "labels"]
