"""Random PyTorch-style training scripts and notebooks built from pieces, and the properties that
every rewrite of them must keep.

Two generators: ``source_file`` (the original one: a model, a loader, one training loop placed at
the top, in a function, in ``main()`` or in a Trainer) and ``rich_source_file`` (more statement kinds,
nesting, helper functions that loop over a loader they are given, nn.Module classes with helper
methods, dict batches, comprehensions). ``notebook_file`` cuts a rich script into notebook cells.
``mutated`` adds hand-style edits (the fuzz run only: a dropped import reproduces a known failure).
The tests (test_properties.py) and the long fuzz run (benchmarks/fuzz.py) share them, and the
properties: ``script_failures`` and ``notebook_failures`` list what does not hold.
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Union

from hypothesis import strategies as st

from cpu2gpu import check_source, rewrite_source
from cpu2gpu.engine import SourceError, select_rules
from cpu2gpu.notebooks.cells import check_notebook, rewrite_notebook
from cpu2gpu.sources.syntax import python_lines

Item = Union[str, "Block"]


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


# -- richer scripts ----------------------------------------------------------------------------

# How a Dataset subclass is named in each import style (an import line to add, and the base).
DATASET_BASE = {
    "plain": ("from torch.utils.data import Dataset", "Dataset"),
    "from": ("from torch.utils.data import Dataset", "Dataset"),
    "alias": (None, "T.utils.data.Dataset"),
    "only-from": ("from torch.utils.data import Dataset", "Dataset"),
}
# The progress bar: its import and how a loop calls it.
TQDM_STYLES = {
    "from tqdm import tqdm": "tqdm",
    "from tqdm.auto import tqdm": "tqdm",
    "import tqdm": "tqdm.tqdm",
}
# Conditions that are valid anywhere in a script (a generated name may not be bound where an
# ``if`` lands).
CONDITIONS = ["__debug__", "True", "len(__name__) > 0", "1 + 1 == 2"]


@dataclass
class Context:
    """What the pieces of one rich script share."""

    names: Names
    width: int
    tqdm: Optional[str]  # how the progress bar is called, None when the script does not import it
    dict_batches: bool  # the loader yields {"x": ..., "y": ...} batches
    device: Optional[str] = None  # the script's own device variable, when it is half migrated


@st.composite
def nested(draw, items: list, depth: int = 0) -> list:
    """The items with a slice of them wrapped in a block (if/else, with, try, while, for, def), maybe
    again inside. Items never hold ``break``/``continue`` of an outer loop, so any wrapper is valid."""
    if depth >= 2 or not items or draw(st.integers(0, 2)) == 0:
        return items
    start = draw(st.integers(0, len(items) - 1))
    end = draw(st.integers(start + 1, len(items)))
    inner = draw(nested(items[start:end], depth + 1))
    kind = draw(st.sampled_from(["if", "if-else", "if-elif", "with", "try", "try-finally", "while", "for", "def"]))
    condition = draw(st.sampled_from(CONDITIONS))
    if kind == "if":
        wrapped: list = [Block(f"if {condition}:", inner)]
    elif kind == "if-else":
        wrapped = [Block(f"if {condition}:", inner), Block("else:", ['print("skipped")'])]
    elif kind == "if-elif":
        wrapped = [Block("if not __debug__:", ["pass"]), Block(f"elif {condition}:", inner),
                   Block("else:", ["pass"])]
    elif kind == "with":
        context = draw(st.sampled_from(["contextlib.nullcontext()", "contextlib.suppress(KeyError) as _"]))
        wrapped = [Block(f"with {context}:", inner)]
    elif kind == "try":
        wrapped = [Block("try:", inner),
                   Block("except (RuntimeError, ValueError) as error:", ["print(error)", "raise"])]
    elif kind == "try-finally":
        wrapped = [Block("try:", inner), Block("except KeyError:", ["pass"]), Block("else:", ["pass"]),
                   Block("finally:", ['print("done")'])]
    elif kind == "while":
        wrapped = [Block("while True:", inner + ["break"])]
    elif kind == "for":
        wrapped = [Block("for _ in range(1):", inner)]
    else:
        name = f"run_part{depth}"
        wrapped = [Block(f"def {name}():", inner), f"{name}()"]
    return items[:start] + wrapped + items[end:]


@st.composite
def rich_model_class(draw, names: Names, index: int, width: int) -> Block:
    """An nn.Module with __init__, forward and helper methods that forward calls."""
    init = Block("def __init__(self):", ["super().__init__()", f"self.fc = {names.nn}.Linear({width}, {width})"])
    forward = Block("def forward(self, x):", ["x = self.fc(x)"])
    methods: list = []
    for n, helper in enumerate(draw(st.lists(st.sampled_from(
            ["state", "project", "static", "count", "branch", "layers", "buffer", "plain"]), max_size=4))):
        if helper == "state":
            methods.append(Block(f"def init_state{n}(self, batch_size):",
                                 [f"return {names.t('zeros')}(batch_size, {width})"]))
            forward.body += [f"state = self.init_state{n}(x.size(0))", "x = x + state"]
        elif helper == "project":
            init.body.append(f"self.head{n} = {names.nn}.Linear({width}, {width})")
            methods.append(Block(f"def project{n}(self, x):", [f"return self.head{n}(x)"]))
            forward.body.append(f"x = self.project{n}(x)")
        elif helper == "static":
            methods += ["@staticmethod", Block(f"def scale{n}(x):", ["return x * 2"])]
            forward.body.append(f"x = self.scale{n}(x)")
        elif helper == "count":
            methods.append(Block(f"def count{n}(self):",
                                 ["return sum(p.numel() for p in self.parameters() if p.requires_grad)"]))
        elif helper == "branch":
            forward.body += [Block("if self.training:", [f"x = x + {names.t('randn')}(x.shape)"]),
                             Block("else:", ["x = x.detach()"])]
        elif helper == "layers":
            init.body.append(f"self.blocks{n} = {names.nn}.ModuleList("
                             f"[{names.nn}.Linear({width}, {width}) for _ in range(2)])")
            forward.body.append(Block(f"for block in self.blocks{n}:", ["x = block(x)"]))
        elif helper == "buffer":
            init.body.append(f"self.register_buffer('mean{n}', {names.t('zeros')}({width}))")
            forward.body.append(f"x = x - self.mean{n}")
        else:
            init.body.append(f"self.offset{n} = {names.t('ones')}({width})")
            forward.body.append(f"x = x + self.offset{n}")
    forward.body.append("return x")
    return Block(f"class Model{index}({names.nn}.Module):", [init, forward] + methods)


def dict_dataset(names: Names, base: str) -> Block:
    return Block(f"class DictData({base}):", [
        Block("def __init__(self, rows, width):", [f"self.features = {names.t('randn')}(rows, width)",
                                                   f"self.labels = {names.t('randn')}(rows, width)"]),
        Block("def __len__(self):", ["return len(self.features)"]),
        Block("def __getitem__(self, index):", ['return {"x": self.features[index], "y": self.labels[index]}']),
    ])


@st.composite
def loop_over(draw, ctx: Context, loader: str, body: list, second: Optional[str] = None) -> list:
    """A loop over a loader in one of the forms scripts use, binding ``inputs`` and ``targets``."""
    forms = ["dict", "dict-enumerate", "dict-comprehension"] if ctx.dict_batches else \
        ["pair", "enumerate", "batch", "index", "while"]
    if ctx.tqdm and not ctx.dict_batches:
        forms += ["tqdm", "enumerate-tqdm"]
    if second and not ctx.dict_batches:
        forms.append("zip")
    form = draw(st.sampled_from(forms))
    unpack = {"pair": (f"for inputs, targets in {loader}:", []),
              "enumerate": (f"for step, (inputs, targets) in enumerate({loader}):", []),
              "batch": (f"for batch in {loader}:", ["inputs, targets = batch"]),
              "index": (f"for batch in {loader}:", ["inputs = batch[0]", "targets = batch[1]"]),
              "tqdm": (f"for inputs, targets in {ctx.tqdm}({loader}):", []),
              "enumerate-tqdm": (f"for step, (inputs, targets) in enumerate({ctx.tqdm}({loader}, leave=False)):", []),
              "zip": (f"for (inputs, targets), (more, _) in zip({loader}, {second}):",
                      ["inputs = inputs + 0 * more"]),
              "dict": (f"for batch in {loader}:", ['inputs = batch["x"]', 'targets = batch["y"]']),
              "dict-enumerate": (f"for step, batch in enumerate({loader}):",
                                 ['inputs, targets = batch["x"], batch["y"]']),
              "dict-comprehension": (f"for batch in {loader}:",
                                     ["batch = {key: value for key, value in batch.items()}",
                                      'inputs, targets = batch["x"], batch["y"]'])}
    if ctx.device and draw(st.booleans()):
        body = [f"inputs, targets = inputs.to({ctx.device}), targets.to({ctx.device})"] + body
    if form == "while":
        # A loop over ``next(iterator)``: the break is inside its own loop, whatever wraps it.
        fetch = [Block("try:", ["inputs, targets = next(iterator)"]), Block("except StopIteration:", ["break"])]
        return [f"iterator = iter({loader})", Block("while True:", fetch + body)]
    header, first = unpack[form]
    return [Block(header, first + body)]


@st.composite
def train_step(draw, ctx: Context, model: str, optimizer: str) -> list:
    """One optimisation step on ``inputs``/``targets``, plain or through a closure, plus extras."""
    nn, functional = ctx.names.nn, ctx.names.functional
    loss = draw(st.sampled_from([f"loss = {functional}.mse_loss(outputs, targets)",
                                 "loss = ((outputs - targets) ** 2).mean()",
                                 f"loss = {nn}.MSELoss()(outputs, targets)"]))
    if draw(st.integers(0, 3)) == 0:
        closure = Block("def closure():", [f"{optimizer}.zero_grad()", f"outputs = {model}(inputs)", loss,
                                           "loss.backward()", "return loss"])
        steps: list = [closure, f"loss = {optimizer}.step(closure)"]
    elif draw(st.integers(0, 3)) == 0:
        steps = [f"forward = lambda batch_inputs: {model}(batch_inputs)", f"{optimizer}.zero_grad()",
                 "outputs = forward(inputs)", loss, "loss.backward()", f"{optimizer}.step()"]
    else:
        steps = [f"{optimizer}.zero_grad()", f"outputs = {model}(inputs)", loss, "loss.backward()",
                 f"{optimizer}.step()"]
    for extra in draw(st.lists(st.sampled_from(["print", "numpy", "item", "list-comprehension", "dict-comprehension",
                                                "no_grad", "assert", "augmented", "del"]), max_size=3)):
        steps += {
            "print": ["print(loss.item())"],
            "numpy": ["predictions = outputs.detach().numpy()"],
            "item": ["total = loss.item() * inputs.size(0)"],
            "list-comprehension": ["labels_seen = [row.argmax().item() for row in targets]"],
            "dict-comprehension": ["norms = {name: p.grad.norm().item() for name, p in "
                                   f"{model}.named_parameters() if p.grad is not None}}"],
            "no_grad": [Block(f"with {ctx.names.t('no_grad')}():", [f"check = {model}(inputs).sum()"])],
            "assert": ["assert loss.item() == loss.item(), 'loss is nan'"],
            "augmented": ["running = 0.0", "running += loss.item()"],
            "del": ["del loss"],
        }[extra]
        if extra == "del":
            break  # nothing after it reads the loss
    return draw(nested(steps))


@st.composite
def helper_functions(draw, ctx: Context) -> tuple[list, list[str]]:
    """Plain functions that receive a model and a loader and loop over it; the calls that use them."""
    blocks: list = []
    calls: list[str] = []
    for kind in draw(st.lists(st.sampled_from(["train", "evaluate", "predict", "inner"]), max_size=3, unique=True)):
        if kind == "train":
            body = ["model.train()", "running = 0.0"]
            body += draw(loop_over(ctx, "loader", draw(train_step(ctx, "model", "optimizer")) + ["running += 1"]))
            blocks.append(Block("def train_epoch(model, loader, optimizer):", draw(nested(body + ["return running"]))))
            calls.append("train_loss = train_epoch(model, loader, optimizer)")
        elif kind == "evaluate":
            inner = ["outputs = model(inputs)",
                     "correct += (outputs.argmax(1) == targets.argmax(1)).sum().item()"]
            loop = draw(loop_over(ctx, "loader", inner))
            body = ["model.eval()", "correct = 0", Block(f"with {ctx.names.t('no_grad')}():", loop), "return correct"]
            blocks.append(Block("def evaluate(model, loader):", body))
            calls.append("score = evaluate(model, loader)")
        elif kind == "predict":
            source = '[model(batch["x"]) for batch in loader]' if ctx.dict_batches else \
                "[model(inputs) for inputs, _ in loader]"
            blocks.append(Block("def predict(model, loader):", [f"return {source}"]))
            calls.append("predictions = predict(model, loader)")
        else:
            # A function defined inside another, handed the tensors of each batch.
            step = Block("def train_on(inputs, targets):", draw(train_step(ctx, "model", "optimizer")))
            body = [step] + draw(loop_over(ctx, "loader", ["train_on(inputs, targets)"]))
            blocks.append(Block("def fit_once(model, loader, optimizer):", body))
            calls.append("fit_once(model, loader, optimizer)")
    return blocks, calls


@st.composite
def rich_items(draw, notebook: bool = False) -> list:
    """The top-level items of a rich script."""
    style = draw(st.sampled_from(sorted(IMPORT_STYLES)))
    imports, names = IMPORT_STYLES[style]
    width = draw(sizes)
    rows = draw(st.integers(2, 8))
    tqdm_import = draw(st.sampled_from([None] + sorted(TQDM_STYLES)))
    dict_batches = draw(st.booleans())
    half_migrated = style != "only-from" and draw(st.integers(0, 3)) == 0
    ctx = Context(names, width, TQDM_STYLES.get(tqdm_import), dict_batches, "device" if half_migrated else None)
    items: list = []
    if draw(st.booleans()):
        items.append('"""A training script."""')
    if not notebook and draw(st.booleans()):
        items.append("from __future__ import annotations")
    header = list(imports) + ["import contextlib"]
    if tqdm_import:
        header.append(tqdm_import)
    dataset_import, dataset_base = DATASET_BASE[style]
    if dict_batches and dataset_import:
        header.append(dataset_import)
    items += draw(st.permutations(header))
    if half_migrated:
        items.append(f'device = {names.torch}.device("cuda" if {names.torch}.cuda.is_available() else "cpu")')
    classes = draw(st.integers(0, 2))
    for index in range(classes):
        items.append(draw(rich_model_class(names, index, width)))
    if dict_batches:
        items.append(dict_dataset(names, dataset_base))
    helpers, calls = draw(helper_functions(ctx))
    items += helpers
    items += draw(rich_main(ctx, classes, rows, calls))
    return items


@st.composite
def rich_setup(draw, ctx: Context, classes: int, rows: int) -> tuple[list, bool]:
    """Model, data, loader(s) and optimizer; whether a second loader exists."""
    names, width = ctx.names, ctx.width
    choices = [f"{names.nn}.Sequential({names.nn}.Linear({width}, {width}), {names.nn}.ReLU())",
               f"{names.nn}.Linear({width}, {width})"] + [f"Model{index}()" for index in range(classes)]
    model = draw(st.sampled_from(choices))
    setup: list = [f"model = {model}"]
    if ctx.device:
        setup.append(draw(st.sampled_from([f"model = model.to({ctx.device})", f"model.to({ctx.device})", "pass"])))
    elif draw(st.integers(0, 3)) == 0:
        setup.append(draw(st.sampled_from(["model.cuda()", "model = model.cuda()", "model.train()"])))
    if ctx.dict_batches:
        setup.append(f"dataset = DictData({rows}, {width})")
    else:
        setup += [f"features = {factory(names, draw(st.sampled_from(['randn', 'zeros', 'tensor', 'arange'])), rows, width)}",
                  f"labels = {factory(names, 'randn', rows, width)}",
                  f"dataset = {names.dataset_class}(features, labels)"]
    setup.append(f"loader = {names.loader_class}(dataset, batch_size={draw(st.integers(1, 4))}, "
                 f"shuffle={draw(st.booleans())})")
    second = not ctx.dict_batches and draw(st.booleans())
    if second:
        setup.append(f"other_loader = {names.loader_class}(dataset, batch_size=2)")
    setup.append(f"optimizer = {names.t('optim')}.{draw(st.sampled_from(['SGD', 'Adam']))}(model.parameters(), lr=0.1)")
    if draw(st.booleans()):
        setup.append(draw(st.sampled_from([
            "sizes = {name: p.numel() for name, p in model.named_parameters()}",
            "total = sum(p.numel() for p in model.parameters())",
            "frozen = [name for name, p in model.named_parameters() if not p.requires_grad]",
        ])))
    return setup, second


@st.composite
def rich_main(draw, ctx: Context, classes: int, rows: int, calls: list[str]) -> list:
    """The setup and the epochs: helper calls and/or a loop written out, at the top, in main() or in a Trainer."""
    setup, second = draw(rich_setup(ctx, classes, rows))
    epoch_body: list = list(calls)
    if not calls or draw(st.booleans()):
        epoch_body += draw(loop_over(ctx, "loader", draw(train_step(ctx, "model", "optimizer")),
                                     "other_loader" if second else None))
    epochs = f"range({draw(st.integers(1, 3))})"
    if ctx.tqdm and draw(st.booleans()):
        epochs = f"{ctx.tqdm}({epochs})"
    epoch_loop = Block(f"for epoch in {epochs}:", draw(nested(epoch_body)))
    ending: list = []
    if draw(st.booleans()):
        ending = [f"sample = {ctx.names.t('ones')}(1, {ctx.width})",
                  draw(st.sampled_from(["print(model(sample))", "result = model(sample).detach().numpy()",
                                        f"{ctx.names.t('save')}(model.state_dict(), 'model.pt')"]))]
    where = draw(st.sampled_from(["top", "main", "trainer"]))
    if where == "top":
        return setup + [epoch_loop] + ending
    if where == "main":
        return [Block("def main():", setup + [epoch_loop] + ending), Block('if __name__ == "__main__":', ["main()"])]
    # A Trainer keeps the model, loader and optimizer on self; its methods read them back.
    fit = Block("def fit(self):", ["model, loader, optimizer = self.model, self.loader, self.optimizer",
                                   "other_loader = loader", epoch_loop])
    trainer = Block("class Trainer:", [
        Block("def __init__(self, model, loader, optimizer):",
              ["self.model = model", "self.loader = loader", "self.optimizer = optimizer"]),
        fit,
        Block("def evaluate(self, loader):", [
            "self.model.eval()",
            Block(f"with {ctx.names.t('no_grad')}():", draw(loop_over(ctx, "loader", ["outputs = self.model(inputs)"]))),
        ]),
    ])
    return [trainer] + setup + ["trainer = Trainer(model, loader, optimizer)", "trainer.fit()",
                                "trainer.evaluate(loader)"] + ending


@st.composite
def rich_source_file(draw) -> str:
    code = render(draw, draw(rich_items())) + "\n"
    if draw(st.integers(0, 4)) == 0:
        code = code.rstrip("\n")
    if draw(st.integers(0, 6)) == 0:
        code = code.replace("\n", "\r\n")
    return code


# -- notebooks ---------------------------------------------------------------------------------

MAGICS = ["%matplotlib inline", "!nvidia-smi", "%load_ext autoreload", "%autoreload 2"]
MARKDOWN = ["# Training", "Load the data.", "## The model\n\nA small network.", ""]


@st.composite
def notebook_file(draw) -> str:
    """A rich script cut into code cells between markdown cells, as nbformat writes it."""
    import nbformat

    items = draw(rich_items(notebook=True))
    cuts = sorted(draw(st.sets(st.integers(1, max(len(items) - 1, 1)), max_size=6)))
    groups = [items[a:b] for a, b in zip([0] + cuts, cuts + [len(items)]) if items[a:b]]
    cells = []
    for group in groups:
        if draw(st.integers(0, 3)) == 0:
            cells.append(nbformat.v4.new_markdown_cell(draw(st.sampled_from(MARKDOWN))))
        text = render(draw, group)
        if draw(st.integers(0, 4)) == 0:
            text = draw(st.sampled_from(MAGICS)) + "\n" + text
        if draw(st.booleans()):
            text += "\n"
        cells.append(nbformat.v4.new_code_cell(text))
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["language_info"] = {"name": "python"}
    for number, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{number}"  # nbformat draws random ids: the same example must give the same bytes
    return nbformat.writes(notebook)


def code_cells(notebook_text: str) -> list[str]:
    import nbformat

    return [cell.source for cell in nbformat.reads(notebook_text, as_version=4).cells if cell.cell_type == "code"]


def without_magics(cell: str) -> str:
    return "".join(line for line in python_lines(cell, keepends=True) if not re.match(r"\s*[%!]", line))


# -- what a rewrite keeps ----------------------------------------------------------------------

# Identifiers a documented fix may replace: ``.cuda()`` becomes ``.to(device)``.
REPLACED_IDENTIFIERS = frozenset({"cuda"})
_QUOTED_NAME = re.compile(r"^[rRbBuUfF]*(['\"])([A-Za-z_][A-Za-z0-9_]*)\1$")


def _tokens(code: str):
    return tokenize.generate_tokens(io.StringIO(code).readline)


def identifier_counts(code: str) -> Counter:
    """Every identifier of the code and every quoted identifier (``register_buffer("mean", ...)``
    keeps the name of ``self.mean = ...`` as a string)."""
    counts: Counter = Counter()
    for token in _tokens(code):
        if token.type == tokenize.NAME:
            counts[token.string] += 1
        elif token.type == tokenize.STRING:
            match = _QUOTED_NAME.match(token.string)
            if match:
                counts[match.group(2)] += 1
    return counts


def comment_tokens(code: str) -> list[str]:
    return [token.string for token in _tokens(code) if token.type == tokenize.COMMENT]


def _is_subsequence(small: list, big: list) -> bool:
    rest = iter(big)
    return all(any(item == other for other in rest) for item in small)


def lost_code(original: str, rewritten: str) -> list[str]:
    """What of the user's code the rewrite dropped: identifiers (a dropped statement drops its names)
    and comments (kept in order). Empty when the rewrite only added and edited in place."""
    lost = identifier_counts(original) - identifier_counts(rewritten)
    missing = sorted(name for name in lost.elements() if name not in REPLACED_IDENTIFIERS)
    if not _is_subsequence(comment_tokens(original), comment_tokens(rewritten)):
        missing.append("comments: " + repr([c for c in comment_tokens(original) if c not in comment_tokens(rewritten)]))
    return missing


# -- the properties, as lists of failures (the fuzz run groups them; a test asserts there are none) --


@dataclass(frozen=True)
class Failure:
    prop: str  # the property that does not hold
    kind: str  # what kind of failure (an exception's type, ...): like goes with like when grouping
    detail: str


def _raised(prop: str, error: Exception) -> Failure:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, SourceError) and message.startswith("internal error: the rewrite does not parse"):
        return Failure("rewrite parses", "SourceError", message)
    return Failure(prop, type(error).__name__, message)


def outside(code: str, findings) -> str:
    """The first finding whose span does not lie inside the code, as text; empty when all do.
    Lines are counted as Python counts them (``python_lines``), as findings are."""
    lines = python_lines(code)
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the text after the last line break is no line
    for f in findings:
        if not (1 <= f.line <= f.end_line <= len(lines)
                and 1 <= f.column <= len(lines[f.line - 1]) + 1
                and 1 <= f.end_column <= len(lines[f.end_line - 1]) + 1
                and (f.line, f.column) <= (f.end_line, f.end_column)):
            return repr(f)
    return ""


def _diff(before: str, after: str) -> str:
    changed = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return "\n".join(line for line in changed if line[:1] in "+-" and line[:3] not in ("+++", "---"))


def _check_failures(code: str, what: str) -> list[Failure]:
    try:
        problem = outside(code, check_source(code))
    except Exception as error:  # any exception: check must never crash on valid code
        return [_raised(f"check of the {what} runs", error)]
    return [Failure(f"check of the {what} stays inside the file", "outside", problem)] if problem else []


def script_failures(code: str, unsafe: bool = False) -> list[Failure]:
    """Every property of check and rewrite that does not hold on this (valid) script."""
    failures = _check_failures(code, "original")
    try:
        once = rewrite_source(code, unsafe_fixes=unsafe)
        ast.parse(once)
    except SyntaxError as error:
        return failures + [Failure("rewrite parses", "SyntaxError", f"{error.msg} (line {error.lineno})")]
    except Exception as error:
        return failures + [_raised("rewrite runs", error)]
    try:
        twice = rewrite_source(once, unsafe_fixes=unsafe)
    except Exception as error:
        failures.append(_raised("rewrite of the rewrite runs", error))
    else:
        if twice != once:
            failures.append(Failure("rewrite is idempotent", "changed", _diff(once, twice)))
    lost = lost_code(code, once)
    if lost:
        failures.append(Failure("rewrite keeps the user's code", "lost", ", ".join(lost)))
    return failures + _check_failures(once, "rewrite")


def _cells(raw: bytes) -> list:
    import nbformat

    return nbformat.reads(raw.decode("utf-8"), as_version=4).cells


def _program(cells) -> str:
    return "\n".join(without_magics(cell.source) for cell in cells if cell.cell_type == "code")


def _notebook_check_failures(raw: bytes, rules) -> list[Failure]:
    try:
        findings = check_notebook(raw, "train.ipynb", rules)
    except Exception as error:
        return [_raised("check of the notebook runs", error)]
    sources = [cell.source for cell in _cells(raw) if cell.cell_type == "code"]
    for f in findings:
        if not (f.cell is not None and 1 <= f.cell <= len(sources)
                and 1 <= f.line <= max(len(sources[f.cell - 1].splitlines()), 1)):
            return [Failure("check of the notebook stays inside its cells", "outside", repr(f))]
    return []


def notebook_failures(text: str) -> list[Failure]:
    """Every property of check and rewrite that does not hold on this notebook."""
    import nbformat

    rules = select_rules()
    raw = text.encode("utf-8")
    failures = _notebook_check_failures(raw, rules)
    try:
        once = rewrite_notebook(raw, "train.ipynb", rules)
        before, after = _cells(raw), _cells(once)
        nbformat.validate(nbformat.reads(once.decode("utf-8"), as_version=4))
    except Exception as error:
        return failures + [_raised("notebook rewrite runs and is a valid notebook", error)]
    if [(c.cell_type, c.source if c.cell_type != "code" else "") for c in after] != \
            [(c.cell_type, c.source if c.cell_type != "code" else "") for c in before]:
        failures.append(Failure("notebook rewrite keeps the cells", "cells", "cell types or markdown changed"))
    for number, cell in enumerate((c for c in after if c.cell_type == "code"), 1):
        try:
            ast.parse(without_magics(cell.source))
        except SyntaxError as error:
            failures.append(Failure("rewrite parses", "SyntaxError", f"cell {number}: {error.msg}"))
    try:
        twice = rewrite_notebook(once, "train.ipynb", rules)
    except Exception as error:
        failures.append(_raised("notebook rewrite of the rewrite runs", error))
    else:
        if twice != once:
            failures.append(Failure("rewrite is idempotent", "changed",
                                    _diff(_program(after), _program(_cells(twice)))))
    lost = lost_code(_program(before), _program(after))
    if lost:
        failures.append(Failure("rewrite keeps the user's code", "lost", ", ".join(lost)))
    return failures


# -- mutations (the fuzz run's): what hand-edited scripts do that the generators never do --------

ODD_LINES = ["\x0c", "\x0c# page", "# a\u2028b", "# a\x85b"]
NOQA_COMMENTS = ["  # noqa", "  # noqa: CG101", "  # noqa:CG102,CG103", "  # NOQA"]


@st.composite
def mutated(draw, code: str) -> str:
    """The script with one to three edits: an import line dropped (torch may end up used unbound), a
    line with a form feed or U+2028 inserted, a ``# noqa`` appended. Edits that break the syntax are
    not kept."""
    for _ in range(draw(st.integers(1, 3))):
        lines = python_lines(code, keepends=True)
        index = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.sampled_from(["drop-import", "odd-line", "noqa"]))
        line = lines[index]
        body = line.rstrip("\r\n")
        ending = line[len(body):] or "\n"
        if edit == "drop-import":
            imports = [i for i, text in enumerate(lines) if re.match(r"(import|from) (?!__future__)", text)]
            if not imports:
                continue
            del lines[draw(st.sampled_from(imports))]
        elif edit == "odd-line":
            lines.insert(index, draw(st.sampled_from(ODD_LINES)) + ending)
        elif body.strip():
            lines[index] = body + draw(st.sampled_from(NOQA_COMMENTS)) + ending
        candidate = "".join(lines)
        try:
            ast.parse(candidate)
        except SyntaxError:
            continue
        code = candidate
    return code
