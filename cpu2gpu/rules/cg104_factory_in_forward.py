"""CG104 factory-in-forward."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..facts import Kind, Origin
from ..fixes import Fix, Replace, add_keyword, method_call
from .base import Hit, Invalid, Rule, RuleContext, draws_with_generator, follows_input


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
    VALID = [
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def forward(self, x):\n"
        "        return x + torch.zeros(x.shape, device=x.device)\n",
        "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def forward(self, x, lengths):\n"
        "        steps = torch.arange(5)\n        return x, steps.tolist()\n",
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
            device = f"{value.method_input}.device" if value.method_input else "next(self.parameters()).device"
            if value.origin is Origin.FACTORY and not draws_with_generator(value.node):
                edit = Replace(value.node, lambda n, d=device: add_keyword(n, "device", cst.parse_expression(d)))
            else:
                anchor = value.fix_node or value.node
                edit = Replace(anchor, lambda n, d=device: method_call(n, "to", cst.parse_expression(d)))
            code = cst.Module([]).code_for_node(value.node)
            if len(code) > 40:
                code = code[:37] + "..."
            source = f"`{value.method_input}`" if value.method_input else "the module's parameters"
            message = self.message.format(code=code, method=value.method.name.value, source=source)
            yield self.hit(value.node, Fix([edit]), message)
