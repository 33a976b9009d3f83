"""CG104 factory-in-forward."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ..analysis import classdefs
from ..analysis.facts import Kind, Origin, class_has_parameters
from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext, draws_with_generator, follows_input, keyword_added, method_called
from .runtimeside import BINDING, DEVICE_MISMATCH, RuntimeRepair, RuntimeSide, Symptom


class FactoryInForward(Rule):
    """A tensor made inside a module's method, or a function given device tensors, without a device.

    What it finds: ``torch.zeros(...)``, ``torch.arange(...)``, ``torch.from_numpy(...)``
    and the like in ``forward()``, ``init_hidden()`` or another method of an
    ``nn.Module`` that runs on every step, whose result meets the module's inputs or
    its layers; and in a plain function that receives device tensors (a custom loss,
    a mask helper), whose result meets them. The fix takes the device of the input,
    so the function stays right wherever it is called from.

    Why it breaks on the GPU: ``model.to(device)`` moves parameters and buffers, not
    the tensors a method makes on each call; they are born on the CPU. An RNN fails
    with "Input and hidden tensors are not at the same device", arithmetic with
    "Expected all tensors to be on the same device".

    Example::

        h0 = torch.zeros(1, x.size(0), self.hidden)                    # before
        h0 = torch.zeros(1, x.size(0), self.hidden, device=x.device)   # after
    """

    code = "CG104"
    name = "factory-in-forward"
    message = "`{code}` in `{method}()` is made on the CPU; give it the device of {source}"
    runtime = RuntimeSide(
        symptoms=(
            Symptom("given-device-tensors", "a device mismatch where a tensor bound in a plain function is on the "
                      "CPU on the failing line while an argument of the function is a device tensor",
                      "{name} was created on the CPU in {func}() at {at}, which works on device tensors; "
                      "create it with device={source}.device", DEVICE_MISMATCH),
            Symptom("in-forward", "a device mismatch where a tensor bound in a module's method is on the CPU on "
                      "the failing line",
                      "{name} was created on the CPU in {owner}.{func}() at {at}; create it with device= "
                      "(e.g. device=x.device)", DEVICE_MISMATCH),
            Symptom("conversion", "a device mismatch where no value on the failing line is to blame, a device "
                      "tensor is there, and the line makes a tensor from host data (torch.from_numpy, torch.tensor)",
                      "a tensor made from host data at {at} stayed on the CPU; make it on the device ({source} is "
                      "there)", DEVICE_MISMATCH),
            Symptom("hidden", "an RNN given a hidden state on another device than its input, where no tensor made "
                      "on the failing lines is to blame",
                      "an RNN hidden state was created on the CPU at {at}; create it with device=",
                      ("Input and hidden tensors are not at the same device",)),
        ),
        repair=RuntimeRepair(BINDING),
    )
    VALID = [
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def forward(self, x):\n"
        "        return x + torch.zeros(x.shape, device=x.device)\n",
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def forward(self, x, lengths):\n"
        "        steps = torch.arange(5)\n        return x, steps.tolist()\n",
        # made while the module is built, by a method __init__ calls before any layer exists: a device
        # from the parameters would raise StopIteration there (kept on self, it is CG105's buffer)
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "        self.fc = nn.Linear(n, 1)\n        self.fc.weight.data.copy_(self.start(n))\n"
        "    def start(self, n):\n        return torch.ones(1, n)\n"
        "    def forward(self, x):\n        return self.fc(x)\n",
    ]
    INVALID = [
        Invalid(  # a layer of an nn.ModuleDict, called by its name
            "import torch\nfrom torch import nn\nclass GPT(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.tr = nn.ModuleDict(dict(wte=nn.Embedding(9, 4), wpe=nn.Embedding(8, 4)))\n"
            "    def forward(self, idx):\n        pos = torch.arange(idx.size(1))\n"
            "        return self.tr.wte(idx) + self.tr.wpe(pos)\n",
            "import torch\nfrom torch import nn\nclass GPT(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.tr = nn.ModuleDict(dict(wte=nn.Embedding(9, 4), wpe=nn.Embedding(8, 4)))\n"
            "    def forward(self, idx):\n        pos = torch.arange(idx.size(1), device=idx.device)\n"
            "        return self.tr.wte(idx) + self.tr.wpe(pos)\n",
        ),
        Invalid(  # made in either branch of an if: both are given the input's device
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "def masked(x, keep):\n    if keep:\n        m = torch.ones(x.shape[0])\n    else:\n"
            "        m = torch.zeros(x.shape[0])\n    return x * m\nprint(masked(torch.ones(3, device=device), True))\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "def masked(x, keep):\n    if keep:\n        m = torch.ones(x.shape[0], device=x.device)\n    else:\n"
            "        m = torch.zeros(x.shape[0], device=x.device)\n    return x * m\nprint(masked(torch.ones(3, device=device), True))\n",
        ),
        Invalid(  # the pre-0.4 wrapper hides nothing: Variable(t) is t
            "import torch\nfrom torch import nn\nfrom torch.autograd import Variable\nclass RNN(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        self.rnn = nn.GRU(4, 8)\n"
            "    def forward(self, x):\n        h0 = Variable(torch.zeros(1, x.size(1), 8))\n"
            "        return self.rnn(x, h0)[0]\n",
            "import torch\nfrom torch import nn\nfrom torch.autograd import Variable\nclass RNN(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        self.rnn = nn.GRU(4, 8)\n"
            "    def forward(self, x):\n        h0 = Variable(torch.zeros(1, x.size(1), 8, device=x.device))\n"
            "        return self.rnn(x, h0)[0]\n",
        ),
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "def length_mask(lengths):\n    return torch.arange(int(lengths.max()))[None, :] < lengths[:, None]\n"
            "mask = length_mask(torch.tensor([3, 1], device=device))\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "def length_mask(lengths):\n    return torch.arange(int(lengths.max()), device=lengths.device)[None, :] < lengths[:, None]\n"
            "mask = length_mask(torch.tensor([3, 1], device=device))\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\nclass RNN(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.rnn = nn.GRU(4, 8, batch_first=True)\n"
            "    def forward(self, x):\n        h0 = torch.zeros(1, x.size(0), 8)\n        out, _ = self.rnn(x, h0)\n"
            "        return out\n",
            "import torch\nfrom torch import nn\nclass RNN(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.rnn = nn.GRU(4, 8, batch_first=True)\n"
            "    def forward(self, x):\n        h0 = torch.zeros(1, x.size(0), 8, device=x.device)\n"
            "        out, _ = self.rnn(x, h0)\n        return out\n",
        ),
        Invalid(
            "import torch\nfrom torch import nn\nclass RNN(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.lstm = nn.LSTM(4, 8)\n"
            "    def init_hidden(self, batch):\n        return (torch.zeros(1, batch, 8), torch.zeros(1, batch, 8))\n"
            "    def forward(self, x):\n        return self.lstm(x, self.init_hidden(x.size(1)))\n",
            "import torch\nfrom torch import nn\nclass RNN(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.lstm = nn.LSTM(4, 8)\n"
            "    def init_hidden(self, batch):\n        return (torch.zeros(1, batch, 8, device=next(self.parameters()).device), "
            "torch.zeros(1, batch, 8, device=next(self.parameters()).device))\n"
            "    def forward(self, x):\n        return self.lstm(x, self.init_hidden(x.size(1)))\n",
        ),
        Invalid(  # a module with no parameters: next(self.parameters()) raises; the file's device instead
            "import torch\nfrom torch import nn\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "class Noise(nn.Module):\n    def __init__(self, scale):\n        super().__init__()\n        self.scale = scale\n"
            "    def draw(self, n):\n        return torch.ones(n) * self.scale\n"
            "    def forward(self, x):\n        return x + self.draw(x.shape[-1])\n",
            "import torch\nfrom torch import nn\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "class Noise(nn.Module):\n    def __init__(self, scale):\n        super().__init__()\n        self.scale = scale\n"
            "    def draw(self, n):\n        return torch.ones(n, device=device) * self.scale\n"
            "    def forward(self, x):\n        return x + self.draw(x.shape[-1])\n",
        ),
        Invalid(  # forward takes a dict of tensors: it has no .device (that would raise on the CPU too)
            "import torch\nfrom torch import nn\nclass Head(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = nn.Linear(3, 1)\n    def forward(self, batch):\n        bias = torch.zeros(1)\n"
            "        return self.fc(batch['x']) + bias\n",
            "import torch\nfrom torch import nn\nclass Head(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = nn.Linear(3, 1)\n    def forward(self, batch):\n"
            "        bias = torch.zeros(1, device=next(self.parameters()).device)\n"
            "        return self.fc(batch['x']) + bias\n",
        ),
        Invalid(  # buffers only: the device of a buffer __init__ registers
            "import torch\nfrom torch import nn\nclass Center(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.register_buffer('mean', torch.zeros(4))\n    def offsets(self):\n        return torch.arange(4.0)\n"
            "    def forward(self, x):\n        return (x - self.mean) * self.offsets()\n",
            "import torch\nfrom torch import nn\nclass Center(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.register_buffer('mean', torch.zeros(4))\n    def offsets(self):\n"
            "        return torch.arange(4.0, device=self.mean.device)\n"
            "    def forward(self, x):\n        return (x - self.mean) * self.offsets()\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for value in facts.values:
            if value.kind is not Kind.TENSOR or value.explicit is not None:
                continue
            if value.context != "module-method" and not follows_input(facts, value):
                continue
            if not facts.is_bound(value) or value.method is None:
                continue
            needs_setup = False
            if value.method_input:
                device = f"{value.method_input}.device"
            else:
                found = _module_device(ctx, value)
                if found is None:
                    continue  # made while the module is built (CG105 where __init__ keeps it on self)
                device, needs_setup, source = found
            if value.origin is Origin.FACTORY and not draws_with_generator(value.node):
                edit = Replace(value.node, keyword_added("device", device))
            else:
                anchor = value.fix_node or value.node
                edit = Replace(anchor, method_called("to", device))
            code = cst.Module([]).code_for_node(value.node)
            if len(code) > 40:
                code = code[:37] + "..."
            if value.method_input:
                source = f"`{value.method_input}`"
            message = self.message.format(code=code, method=value.method.name.value, source=source)
            yield self.hit(value.node, Fix([edit], needs_device_setup=needs_setup), message)


def _module_device(ctx: RuleContext, value) -> Optional[tuple[str, bool, str]]:
    """The device for a tensor a module's method makes with no input tensor to follow: (expression,
    whether the file needs the device line, what the message names), or None where the method runs
    while the module is built (called from ``__init__``): its parameters are on the CPU then, or do
    not exist yet (``next(self.parameters())`` raises StopIteration).

    ``next(self.parameters()).device`` only where ``__init__`` certainly makes parameters; else the
    device of a buffer it registers; else the file's device variable."""
    method = value.method
    cls = ctx.facts.method_classes.get(id(method))
    classdef = cls.definition if cls is not None else None
    me = classdefs.self_name(method)
    if cls is None or not isinstance(classdef, cst.ClassDef) or me is None:
        device, needs_setup = ctx.device_for(value.scope, value.time)
        return device, needs_setup, f"`{device}`"
    if method.name.value in _called_from_init(classdef):
        return None
    if class_has_parameters(cls):
        return f"next({me}.parameters()).device", False, "the module's parameters"
    buffer = _registered_buffer(classdef)
    if buffer is not None:
        return f"{me}.{buffer}.device", False, f"the buffer `{buffer}`"
    device, needs_setup = ctx.device_for(value.scope, value.time)
    return device, needs_setup, f"`{device}`"


def _called_from_init(classdef: cst.ClassDef) -> set[str]:
    """``__init__`` and the methods it calls on ``self``, and those they call, by name."""
    by_name = {m.name.value: m for m in classdefs.methods(classdef)}
    reached: set[str] = set()
    pending = ["__init__"] if "__init__" in by_name else []
    while pending:
        name = pending.pop()
        if name in reached:
            continue
        reached.add(name)
        function = by_name[name]
        me = classdefs.self_name(function)
        for node in classdefs.walk(function.body):
            if isinstance(node, cst.Call):
                called = classdefs.self_attribute(node.func, me)
                if called in by_name and called not in reached:
                    pending.append(called)
    return reached


def _registered_buffer(classdef: cst.ClassDef) -> Optional[str]:
    """A buffer that ``__init__`` registers on every construction (a statement of its own body, with a
    tensor, not None): ``self.register_buffer("mask", torch.ones(4))``."""
    init = classdefs.method(classdef, "__init__")
    me = classdefs.self_name(init) if init is not None else None
    if init is None or me is None:
        return None
    for stmt in init.body.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            call = small.value if isinstance(small, cst.Expr) else None
            if not isinstance(call, cst.Call) or classdefs.self_attribute(call.func, me) != "register_buffer":
                continue
            args = [a for a in call.args if a.keyword is None]
            name = args[0].value if args else None
            if len(args) >= 2 and isinstance(name, cst.SimpleString) and not (
                    isinstance(args[1].value, cst.Name) and args[1].value.value == "None"):
                text = name.evaluated_value
                if isinstance(text, str) and text.isidentifier():
                    return text
    return None
