"""Positions from the statements alone agree with libcst's PositionProvider over the whole file."""

from __future__ import annotations

from pathlib import Path

import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from cpu2gpu.engine import analyze_module, parse, select_rules, source_text
from cpu2gpu.sources.positions import node_positions

BODY = (
    "model = nn.Linear(2, 1)\nx = torch.randn(4, 2)\nprint(model(x))\n"
)
CASES = {
    "header comments": "# a header\n\n# more\nimport torch\nfrom torch import nn\n\n\n" + BODY,
    "decorators and comments": "import torch\nfrom torch import nn\n\n# note\n@staticmethod\n\n# between\n@property\n"
                               "def f():\n    return 1\n" + BODY,
    "semicolons": "import torch; from torch import nn\na = 1; b = 2\n" + BODY,
    "continuation": "import torch\nfrom torch import nn\nmodel = \\\n    nn.Linear(2, 1)\nx = torch.randn(\n    4, 2)\n"
                    "print(model(x))\n",
    "no final newline": "import torch\nfrom torch import nn\n" + BODY.rstrip("\n"),
    "crlf": ("import torch\nfrom torch import nn\n" + BODY).replace("\n", "\r\n"),
    "nested": "import torch\nfrom torch import nn\nif True:\n    # inside\n    model = nn.Linear(2, 1)\n"
              "    x = torch.randn(4, 2)\n    print(model(x))\n",
    "docstring and strings": '"""Doc\n\nmore"""\nimport torch\nfrom torch import nn\ns = """\n# not a comment\n"""\n'
                             + BODY,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_statement_positions_match_the_whole_file(name):
    module = parse(CASES[name])
    analysis = analyze_module(module, select_rules((), ()))
    assert analysis.hits
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    fast = node_positions(module, [hit.node for hit in analysis.hits], source_text(module))
    assert {id(h.node): fast[h.node] for h in analysis.hits} == {id(h.node): whole[h.node] for h in analysis.hits}


NESTED = '''import torch
from torch import nn


class Net(nn.Module):
    """A model."""

    # a comment before the method
    @staticmethod
    @some.decorator(
        1, 2)
    def helper(x, y=torch.zeros(1)):
        for step in range(3):
            if step:
                x = x + torch.ones(1)
            elif step > 1:
                x = x - torch.ones(2)
            else:
                x = torch.randn(
                    4, 2)
        while x.sum() > torch.tensor(0.0):
            with torch.no_grad():
                try:
                    x = x - 1
                except (ValueError, TypeError) as error:
                    print(torch.arange(3), error)
                else:
                    y = torch.eye(2); z = torch.eye(3)
                finally:
                    pass
        if x: y = torch.ones(5)
        match x:
            case 1:
                y = torch.full((2,), 1.0)
        return x \\
            + torch.zeros(1)


def tabs():
\tif True:
\t\treturn torch.zeros(3) + torch.ones(\t3)
'''


def _all_nodes(module):
    import libcst as cst

    from cpu2gpu.analysis.classdefs import walk

    return [n for n in walk(module) if n is not module
            and isinstance(n, (cst.BaseExpression, cst.BaseStatement, cst.BaseSmallStatement))]


def _assert_same_as_whole_file(source: str, one_at_a_time: bool = False) -> None:
    module = parse(source)
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = _all_nodes(module)
    fast = node_positions(module, nodes, source_text(module))
    mismatched = [(type(n).__name__, fast[n], whole[n]) for n in nodes if fast[n] != whole[n]]
    assert not mismatched
    for node in nodes if one_at_a_time else ():  # one node at a time: the fast path for a lone statement deep inside
        assert node_positions(module, [node], source_text(module))[node] == whole[node]


def test_every_node_of_nested_blocks_headers_and_clauses_matches_the_whole_file(monkeypatch):
    import cpu2gpu.sources.positions as positions

    def no_fallback(module):
        raise AssertionError("fell back to the whole module")

    monkeypatch.setattr(positions, "_whole", no_fallback)  # the statement path itself is what is tested
    _assert_same_as_whole_file(NESTED, one_at_a_time=True)
    _assert_same_as_whole_file(NESTED.replace("\n", "\r\n"), one_at_a_time=True)


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.rglob("*.py"))
DEFAULT_EVERY = 8  # the default tier: every 8th file of each fixtures folder (its first among them)


def _tier(name: str) -> list:
    by_folder: dict = {}
    for path in FIXTURE_FILES:
        by_folder.setdefault(path.relative_to(FIXTURES).parts[0], []).append(path)
    default = [path for files in by_folder.values() for path in files[::DEFAULT_EVERY]]
    return default if name == "default" else [path for path in FIXTURE_FILES if path not in default]


# Every fixture in both tiers together: a sample of every folder by default, the others in the slow tier.
@pytest.mark.parametrize("tier", ["default", pytest.param("others", marks=pytest.mark.slow)])
def test_every_node_of_every_fixture_matches_the_whole_file(tier):
    assert len(FIXTURE_FILES) > 50
    files = _tier(tier)
    for path in files:
        source = path.read_bytes()
        if b"cpu2gpu-fixture: unparsable" in source:
            continue
        try:
            parse(source)
        except Exception:
            continue  # the fixtures of bad input
        _assert_same_as_whole_file(source.decode("utf-8", errors="replace"))
