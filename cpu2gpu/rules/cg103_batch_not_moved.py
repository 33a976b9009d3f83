"""CG103 batch-not-moved."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ..analysis.facts import Kind, Origin
from ..rewrite.fixes import Edit, Fix, InsertAfter, InsertAtLoopStart, Replace
from .base import Hit, Invalid, Rule, RuleContext, moved_to
from .runtimeside import BINDING, DEVICE_MISMATCH, RuntimeRepair, RuntimeSide, Symptom


class BatchNotMoved(Rule):
    """A DataLoader loop variable is used without a move to the device.

    What it finds: the variables of ``for x, y in loader`` (also under
    ``enumerate``, ``tqdm``, ``iter``), the names a batch is unpacked into
    (``inputs, labels = data``, ``x, y = next(iter(loader))``, ``data[0]``) and
    dict batches (``batch["input"]``) that reach the model or meet its output while
    still on the CPU.

    Why it breaks on the GPU: a DataLoader yields CPU tensors; the model's weights
    are on the device, so the forward pass or the loss fails with "Expected all
    tensors to be on the same device".

    Example::

        for images, labels in loader:                                    # before
            outputs = model(images)

        for images, labels in loader:                                    # after
            images, labels = images.to(device), labels.to(device)
            outputs = model(images)
    """

    code = "CG103"
    name = "batch-not-moved"
    message = "batch variable `{name}` from a DataLoader is used without a move to the device"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "batch", "a device mismatch where a CPU tensor on the failing line is a batch the DataLoader loop gave",
            "{name} stayed on the CPU at {at}: a batch from the DataLoader loop was not moved to the device",
            DEVICE_MISMATCH),),
        repair=RuntimeRepair(BINDING),
    )
    VALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nmodel = torch.nn.Linear(2, 1).to(device)\n"
        "for x, y in DataLoader(ds):\n    x, y = x.to(device), y.to(device)\n    loss = model(x) - y\n",
        "import torch\nfrom torch.utils.data import DataLoader\nmodel = torch.nn.Linear(2, 1).to(device)\n"
        "for x, _ in DataLoader(ds):\n    print(x.shape)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 1).to(device)\na = DataLoader(ds, pin_memory=True)\nb = DataLoader(extra, pin_memory=True)\n"
            "for (x, y), u in zip(a, b):\n    loss = (model(x) - y).mean() + model(u).mean()\n",
            "import torch\nfrom torch.utils.data import DataLoader\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 1).to(device)\na = DataLoader(ds, pin_memory=True)\nb = DataLoader(extra, pin_memory=True)\n"
            "for (x, y), u in zip(a, b):\n    x, y, u = x.to(device), y.to(device), u.to(device)\n"
            "    loss = (model(x) - y).mean() + model(u).mean()\n",
        ),
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader as DL\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 1).to(device)\nloader = DL(ds, pin_memory=True)\n"
            "for i, (x, y) in enumerate(loader):\n    # forward\n    loss = (model(x) - y).pow(2).mean()\n",
            "import torch\nfrom torch.utils.data import DataLoader as DL\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(2, 1).to(device)\nloader = DL(ds, pin_memory=True)\n"
            "for i, (x, y) in enumerate(loader):\n    x, y = x.to(device), y.to(device)\n    # forward\n"
            "    loss = (model(x) - y).pow(2).mean()\n",
        ),
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 1).to(device)\n"
            "loader = DataLoader(ds, pin_memory=True)\nfor i, data in enumerate(loader, 0):\n    inputs, labels = data\n"
            "    loss = (model(inputs) - labels).sum()\nx, y = next(iter(loader))\nprint(model(x))\n",
            "import torch\nfrom torch.utils.data import DataLoader\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 1).to(device)\n"
            "loader = DataLoader(ds, pin_memory=True)\nfor i, data in enumerate(loader, 0):\n    inputs, labels = data\n"
            "    inputs, labels = inputs.to(device), labels.to(device)\n"
            "    loss = (model(inputs) - labels).sum()\nx, y = next(iter(loader))\nx = x.to(device)\n"
            "print(model(x))\n",
        ),
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 1).to(device)\n"
            "for batch in DataLoader(ds, pin_memory=True):\n    out = model(batch['input'])\n",
            "import torch\nfrom torch.utils.data import DataLoader\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 1).to(device)\n"
            "for batch in DataLoader(ds, pin_memory=True):\n"
            "    batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}\n"
            "    out = model(batch['input'])\n",
        ),
        Invalid(  # Variable(x) is x; labels meet the predictions in a comparison
            "import torch\nfrom torch.autograd import Variable\nfrom torch.utils.data import DataLoader\n"
            "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 3).to(device)\n"
            "for data, target in DataLoader(ds, pin_memory=True):\n    data, target = Variable(data), Variable(target)\n"
            "    loss = torch.nn.functional.cross_entropy(model(data), target)\n"
            "correct = 0\nfor images, labels in DataLoader(test, pin_memory=True):\n    outputs = model(images)\n"
            "    _, predicted = torch.max(outputs.data, 1)\n    correct += (predicted == labels).sum().item()\n",
            "import torch\nfrom torch.autograd import Variable\nfrom torch.utils.data import DataLoader\n"
            "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 3).to(device)\n"
            "for data, target in DataLoader(ds, pin_memory=True):\n    data, target = data.to(device), target.to(device)\n"
            "    data, target = Variable(data), Variable(target)\n"
            "    loss = torch.nn.functional.cross_entropy(model(data), target)\n"
            "correct = 0\nfor images, labels in DataLoader(test, pin_memory=True):\n"
            "    images, labels = images.to(device), labels.to(device)\n    outputs = model(images)\n"
            "    _, predicted = torch.max(outputs.data, 1)\n    correct += (predicted == labels).sum().item()\n",
        ),
        Invalid(  # tensors made by map() from a batch of lists, then unpacked
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Embedding(10, 4).to(device)\n"
            "ids, targets = map(torch.LongTensor, zip(*batch))\nprint(model(ids).sum(-1) - targets)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Embedding(10, 4).to(device)\n"
            "ids, targets = map(torch.LongTensor, zip(*batch))\nids, targets = ids.to(device), targets.to(device)\n"
            "print(model(ids).sum(-1) - targets)\n",
        ),
        Invalid(  # a TensorDataset read without a loader: its items and its tensors
            "import torch\nfrom torch.utils.data import TensorDataset\n"
            "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 1).to(device)\n"
            "test_ds = TensorDataset(a, b)\nx, y = test_ds[0]\nprint(model(x) - y)\n"
            "for xi, yi in test_ds:\n    print(model(xi) - yi)\ntx, ty = test_ds.tensors\nprint(model(tx[:, :2]))\n",
            "import torch\nfrom torch.utils.data import TensorDataset\n"
            "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nmodel = torch.nn.Linear(2, 1).to(device)\n"
            "test_ds = TensorDataset(a, b)\nx, y = test_ds[0]\nx, y = x.to(device), y.to(device)\nprint(model(x) - y)\n"
            "for xi, yi in test_ds:\n    xi, yi = xi.to(device), yi.to(device)\n    print(model(xi) - yi)\n"
            "tx, ty = test_ds.tensors\ntx = tx.to(device)\nprint(model(tx[:, :2]))\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        groups: dict[int, list] = {}
        for value in facts.values:
            if value.kind is Kind.BATCH and value.is_root and facts.is_bound(value):
                anchor = value.loop if value.origin is Origin.LOOP else value.binding_stmt
                if value.origin is Origin.COMPREHENSION:
                    anchor = None  # each on its own
                groups.setdefault(id(anchor) if anchor is not None else id(value), []).append(value)
        for values in groups.values():
            fix = self._fix(ctx, values)
            for value in values:
                message = self.message.format(name=value.name or "batch")
                if value.loader is None and value.origin_file is not None:
                    message = f"tensor `{value.name}` returned by {value.origin_file} is used without a move to the device"
                if value.loader is not None and value.loader.origin_file is not None:
                    message += f" (the loader is given by {value.loader.origin_file})"
                yield self.hit(value.node, fix, message)

    @staticmethod
    def _fix(ctx: RuleContext, values: list) -> Optional[Fix]:
        first = values[0]
        device, needs_setup = ctx.device_for(first.scope, first.time)
        if first.origin is Origin.COMPREHENSION:
            # No statement to add in a comprehension: each read of the batch is moved.
            return Fix([Replace(n, moved_to(device)) for n in first.use_nodes],
                       needs_device_setup=needs_setup)
        if first.name is None or "." in first.name:
            # next(iter(loader)) or data[0] used in place: move it there.
            return Fix([Replace(first.node, moved_to(device))], needs_device_setup=needs_setup)
        names = [v.name for v in values]
        tensor_type = f"{ctx.facts.torch_alias or 'torch'}.Tensor"
        # a dict batch may hold ids or file names beside its tensors: only the tensors are moved
        moved = ", ".join(
            f"{{k: v.to({device}) if isinstance(v, {tensor_type}) else v for k, v in {n}.items()}}"
            if v.dict_batch else f"{n}.to({device})"
            for n, v in zip(names, values)
        )
        code = f"{', '.join(names)} = {moved}"
        if first.origin is Origin.LOOP:
            edit: Edit = InsertAtLoopStart(first.loop, code)
        elif isinstance(first.binding_stmt, cst.SimpleStatementLine):
            edit = InsertAfter(first.binding_stmt, code)
        else:
            return None
        return Fix([edit], needs_device_setup=needs_setup)
