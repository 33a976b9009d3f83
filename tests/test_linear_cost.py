"""The analysis's cost grows with the file, not faster: the lines run in cpu2gpu's own code (a count, not a
time: every turn of a loop is a line) for a file of 4N small training functions stay within 4x (plus slack) of
those for N."""

from __future__ import annotations

import sys
from pathlib import Path

from cpu2gpu.engine import check_module, parse, select_rules

PACKAGE = str(Path(__file__).resolve().parents[1] / "cpu2gpu")

FUNCTION = """def train_{i}(epochs=1):
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    for epoch in range(epochs):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

"""


def _source(functions: int) -> bytes:
    head = "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
    return (head + "".join(FUNCTION.format(i=i) for i in range(functions))).encode()


def _lines_in_cpu2gpu(functions: int) -> tuple[int, int]:
    """(lines run in cpu2gpu's own code, every turn of a loop counted; findings) while checking the file."""
    module = parse(_source(functions))
    rules = select_rules()
    count = 0

    def line(frame, event, _arg):
        nonlocal count
        if event == "line":
            count += 1
        return line

    def call(frame, _event, _arg):
        return line if frame.f_code.co_filename.startswith(PACKAGE) else None

    sys.settrace(call)
    try:
        findings = check_module(module, "many.py", rules)
    finally:
        sys.settrace(None)
    return count, len(findings)


def test_the_checks_work_grows_linearly_with_the_number_of_functions():
    small, small_findings = _lines_in_cpu2gpu(40)
    large, large_findings = _lines_in_cpu2gpu(160)
    assert large_findings == 4 * small_findings > 0
    assert large <= 4 * small * 1.05, f"{large} lines run for 160 functions against {small} for 40"
