"""Properties over random PyTorch-style scripts built from pieces.

For every script: ``rewrite_source`` does not raise, its output parses, a second rewrite
changes nothing, and every finding's line and column lie inside the file.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Union

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpu2gpu import check_source, rewrite_source

Item = Union[str, "Block"]
# CI runs a few dozen scripts; set CPU2GPU_PROPERTY_EXAMPLES=2000 for a long hunt.
EXAMPLES = int(os.environ.get("CPU2GPU_PROPERTY_EXAMPLES", "40"))


@dataclass
class Block:
    header: str
    body: list = field(default_factory=list)


@dataclass
class Names:
    """How the script spells torch and its parts."""

    torch: str
    nn: str
    functional: str
    loader_class: str
    dataset_class: str
    bare: bool = False  # torch's functions imported by name: ``randn(...)``, not ``torch.randn(...)``

    def t(self, attribute: str) -> str:
        return attribute if self.bare else f"{self.torch}.{attribute}"


IMPORT_STYLES = {
    "plain": (["import torch", "import torch.nn as nn", "import torch.nn.functional as F",
               "from torch.utils.data import DataLoader, TensorDataset"],
              Names("torch", "nn", "F", "DataLoader", "TensorDataset")),
    "from": (["import torch", "from torch import nn", "from torch.nn import functional as F",
              "from torch.utils.data import DataLoader as DL, TensorDataset"],
             Names("torch", "nn", "F", "DL", "TensorDataset")),
    "alias": (["import torch as T", "import torch.utils.data"],
              Names("T", "T.nn", "T.nn.functional", "T.utils.data.DataLoader", "T.utils.data.TensorDataset")),
    "only-from": (["from torch import nn, optim, randn, zeros, ones, tensor, arange, float32, no_grad, save, load",
                   "import torch.nn.functional as F", "from torch.utils.data import DataLoader, TensorDataset"],
                  Names("torch", "nn", "F", "DataLoader", "TensorDataset", bare=True)),
}

comments = st.sampled_from(["# note", "#", "# x = x.to('cpu')", "# TODO: cuda", "#: odd ( comment", "# é ünïcode"])
sizes = st.integers(1, 16)


@st.composite
def model_class(draw, names: Names, index: int) -> tuple[Block, int]:
    width = draw(sizes)
    init = Block("def __init__(self):", ["super().__init__()"])
    layers = draw(st.lists(st.sampled_from(["linear", "seq", "buffer", "param", "plain"]), min_size=1, max_size=3))
    forward = Block("def forward(self, x):")
    for n, layer in enumerate(layers):
        if layer == "linear":
            init.body.append(f"self.fc{n} = {names.nn}.Linear({width}, {width})")
            forward.body.append(f"x = self.fc{n}(x)")
        elif layer == "seq":
            init.body.append(f"self.seq{n} = {names.nn}.Sequential(\n"
                             f"    {names.nn}.Linear({width}, {width}),  # first\n"
                             f"    # between\n"
                             f"    {names.nn}.ReLU(),\n)")
            forward.body.append(f"x = self.seq{n}(x)")
        elif layer == "buffer":
            init.body.append(f"self.register_buffer('scale{n}', {names.t('ones')}({width}))")
            forward.body.append(f"x = x * self.scale{n}")
        elif layer == "param":
            init.body.append(f"self.w{n} = {names.nn}.Parameter({names.t('randn')}({width}))")
            forward.body.append(f"x = x + self.w{n}")
        else:
            init.body.append(f"self.offset{n} = {names.t('zeros')}({width})")
            forward.body.append(f"x = x + self.offset{n}")
    if draw(st.booleans()):
        forward.body.append(f"noise = {names.t('randn')}(x.shape)")
        forward.body.append("x = x + noise")
    forward.body.append(draw(st.sampled_from(["return x", f"return {names.functional}.relu(x)"])))
    return Block(f"class Net{index}({names.nn}.Module):", [init, forward]), width


def factory(names: Names, what: str, rows: int, width: int) -> str:
    return {
        "randn": f"{names.t('randn')}({rows}, {width})",
        "zeros": f"{names.t('zeros')}({rows}, {width})",
        "tensor": f"{names.t('tensor')}([[0.5] * {width}] * {rows})",
        "arange": f"{names.t('arange')}({rows * width}, dtype={names.t('float32')}).reshape({rows}, {width})",
    }[what]


@st.composite
def training_loop(draw, names: Names, model: str, loader: str, optimizer: str) -> Block:
    shape = draw(st.sampled_from(["pair", "enumerate", "batch", "index"]))
    if shape == "pair":
        loop = Block(f"for inputs, targets in {loader}:")
    elif shape == "enumerate":
        loop = Block(f"for step, (inputs, targets) in enumerate({loader}):")
    elif shape == "batch":
        loop = Block(f"for batch in {loader}:", ["inputs, targets = batch"])
    else:
        loop = Block(f"for batch in {loader}:", ["inputs = batch[0]", "targets = batch[1]"])
    loss = draw(st.sampled_from([
        f"loss = {names.functional}.mse_loss(outputs, targets)",
        "loss = ((outputs - targets) ** 2).mean()",
        f"loss = {names.nn}.MSELoss()(outputs, targets)",
    ]))
    loop.body += [f"{optimizer}.zero_grad()", f"outputs = {model}(inputs)", loss, "loss.backward()",
                  f"{optimizer}.step()"]
    extra = draw(st.sampled_from(["", "print", "numpy", "item", "nested"]))
    if extra == "print":
        loop.body.append("print(loss.item())")
    elif extra == "numpy":
        loop.body.append("predictions = outputs.detach().numpy()")
    elif extra == "item":
        loop.body.append("total = loss.item() * inputs.size(0)")
    elif extra == "nested":
        loop.body.append(Block("if loss.item() < 0.1:", [Block(f"with {names.t('no_grad')}():",
                                                               [f"check = {model}(inputs).sum()"])]))
    return loop


@st.composite
def script(draw) -> str:
    style = draw(st.sampled_from(sorted(IMPORT_STYLES)))
    imports, names = IMPORT_STYLES[style]
    items: list[Item] = []
    if draw(st.booleans()):
        items.append('"""A training script."""')
    if draw(st.booleans()):
        items.append("from __future__ import annotations")
    items += draw(st.permutations(imports))
    if draw(st.booleans()):
        items.append("import numpy as np")
    classes = draw(st.integers(0, 2))
    widths = []
    for index in range(classes):
        block, class_width = draw(model_class(names, index))
        items.append(block)
        widths.append(class_width)
    width = draw(sizes)
    rows = draw(st.integers(2, 8))
    model_kind = draw(st.sampled_from(["class", "sequential", "linear"]) if classes else
                      st.sampled_from(["sequential", "linear"]))
    model = {
        "class": "Net0()",
        "sequential": f"{names.nn}.Sequential({names.nn}.Linear({width}, {width}), {names.nn}.Tanh())",
        "linear": f"{names.nn}.Linear({width}, {width})",
    }[model_kind]
    if model_kind == "class":
        width = widths[0]  # tensors that fit the model
    setup: list[Item] = [f"model = {model}"]
    if draw(st.booleans()):
        setup.append(draw(st.sampled_from(["model.cuda()", "model = model.cuda()", "model.train()",
                                           f"model.load_state_dict({names.t('load')}('weights.pt'))"])))
    features = factory(names, draw(st.sampled_from(["randn", "zeros", "tensor", "arange"])), rows, width)
    labels = factory(names, draw(st.sampled_from(["randn", "zeros"])), rows, width)
    setup += [f"features = {features}", f"labels = {labels}"]
    setup.append(f"dataset = {names.dataset_class}(features, labels)")
    setup.append(f"loader = {names.loader_class}(dataset, batch_size={draw(st.integers(1, 4))}, "
                 f"shuffle={draw(st.booleans())})")
    optim = names.t("optim")
    setup.append(f"optimizer = {optim}.SGD(model.parameters(), lr=0.1)")
    loop = draw(training_loop(names, "model", "loader", "optimizer"))
    where = draw(st.sampled_from(["top", "function", "main", "method"]))
    if where == "top":
        body = setup + [Block(f"for epoch in range({draw(st.integers(1, 3))}):", [loop])]
    elif where == "function":
        train = Block("def train(model, loader, optimizer):", [loop])
        body = [train] + setup + ["train(model, loader, optimizer)"]
    elif where == "main":
        main = Block("def main():", setup + [loop])
        body = [main, Block('if __name__ == "__main__":', ["main()"])]
    else:
        loop.header = loop.header.replace("loader", "self.loader")
        trainer = Block("class Trainer:", [
            Block("def __init__(self, model, loader, optimizer):",
                  ["self.model = model", "self.loader = loader", "self.optimizer = optimizer"]),
            Block("def fit(self):", ["model = self.model", "optimizer = self.optimizer", loop]),
        ])
        body = [trainer] + setup + ["Trainer(model, loader, optimizer).fit()"]
    if draw(st.booleans()):
        body.append(f"sample = {names.t('ones')}(1, {width})")
        body.append(draw(st.sampled_from(["print(model(sample))", "result = model(sample).numpy()",
                                          f"{names.t('save')}(model.state_dict(), 'model.pt')"])))
    items += body
    return render(draw, items)


def render(draw, items: list[Item], depth: int = 0) -> str:
    """The items as code, with comments and blank lines drawn into odd places."""
    pad = "    " * depth
    out = []
    for item in items:
        if draw(st.integers(0, 5)) == 0:
            out.append(" " * draw(st.integers(0, 4 * depth + 2)) + draw(comments))
        if draw(st.integers(0, 5)) == 0:
            out.append(draw(st.sampled_from(["", "   "])))
        if isinstance(item, Block):
            trailer = f"  {draw(comments)}" if draw(st.integers(0, 3)) == 0 else ""
            out.append(f"{pad}{item.header}{trailer}")
            out.append(render(draw, item.body or ["pass"], depth + 1))
        else:
            trailer = f"  {draw(comments)}" if draw(st.integers(0, 4)) == 0 and "\n" not in item else ""
            out.append("\n".join(pad + line for line in item.splitlines()) + trailer)
    return "\n".join(out)


@st.composite
def source_file(draw) -> str:
    code = draw(script()) + "\n"
    if draw(st.integers(0, 4)) == 0:
        code = code.rstrip("\n")  # no final newline
    if draw(st.integers(0, 4)) == 0:
        code = code.replace("\n", "\r\n")
    return code


def assert_inside(code: str, findings) -> None:
    lines = code.splitlines() or [""]
    for f in findings:
        assert 1 <= f.line <= f.end_line <= len(lines), f
        assert 1 <= f.column <= len(lines[f.line - 1]) + 1, f
        assert 1 <= f.end_column <= len(lines[f.end_line - 1]) + 1, f
        assert (f.line, f.column) <= (f.end_line, f.end_column), f


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(code=source_file(), unsafe=st.booleans())
def test_rewrite_properties(code, unsafe):
    ast.parse(code)  # the generator makes valid Python
    once = rewrite_source(code, unsafe_fixes=unsafe)
    ast.parse(once)
    assert rewrite_source(once, unsafe_fixes=unsafe) == once
    assert_inside(code, check_source(code))
    assert_inside(once, check_source(once))


@settings(max_examples=max(EXAMPLES // 4, 1), deadline=None)
@given(code=source_file())
def test_bytes_and_text_agree(code):
    assert rewrite_source(code.encode()) == rewrite_source(code)


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
