"""Positions from the statements alone agree with libcst's PositionProvider over the whole file."""

from __future__ import annotations

import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from cpu2gpu.engine import analyze_module, parse, select_rules, source_text
from cpu2gpu.positions import node_positions

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
