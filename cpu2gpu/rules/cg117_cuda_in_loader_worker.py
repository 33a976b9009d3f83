"""CG117 cuda-in-loader-worker."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from ..analysis import torchapi as api
from ..analysis.devicecode import keyword_value, places_on_device
from ..analysis.syntaxindex import preorder
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RULE_FIX, RuntimeRepair, RuntimeSide, Symptom

_DATASET_BASES = frozenset({"torch.utils.data.Dataset", "torch.utils.data.dataset.Dataset"})


class CudaInLoaderWorker(Rule):
    """CUDA work in code that a DataLoader runs in its worker processes.

    What it finds: a ``.cuda()``, a ``.to(device)`` or a ``device=`` that names the device
    inside ``__getitem__`` of a ``Dataset`` class, or inside a function given as
    ``collate_fn``, in a file whose DataLoader starts worker processes (``num_workers``
    greater than 0).

    Why it breaks on the GPU: the workers are forked from the training process; CUDA
    cannot be initialised again in a forked process, and the first batch fails with
    "Cannot re-initialize CUDA in forked subprocess" (on the CPU, and with
    ``num_workers=0``, the same code runs, which is why it is found late). Batches
    made on the CPU by the workers and moved in the training loop (with
    ``pin_memory=True``) are also the fast way. There is no automatic fix: the move
    belongs in the loop, which the rule does not write for you.

    Example::

        def __getitem__(self, i):
            return self.x[i].to(device), self.y[i].to(device)       # before
            return self.x[i], self.y[i]                              # after, and in the loop:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
    """

    code = "CG117"
    name = "cuda-in-loader-worker"
    message = ("`{call}` in `{where}` runs in the DataLoader's worker processes (num_workers > 0), where CUDA "
               "cannot be initialised; move the batch to the device in the training loop")
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "loader-worker", "a DataLoader worker process, forked after CUDA was initialised, uses CUDA (the "
            "loader re-raises the worker's error with its traceback in the message)",
            "{what} does CUDA work in a DataLoader worker process (num_workers > 0), forked from the training "
            "process after it initialised CUDA: CUDA cannot be initialised again in a forked process (\"Cannot "
            "re-initialize CUDA in forked subprocess\"); let the workers return CPU tensors and move the batch to "
            "the device in the training loop",
            ("Cannot re-initialize CUDA in forked subprocess",), pattern=r"in DataLoader worker process \d+"),),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        # no workers: the items are made in the training process
        "import torch\nfrom torch.utils.data import Dataset, DataLoader\n"
        "class DS(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].to(device)\n"
        "loader = DataLoader(DS(), batch_size=4)\n",
        # workers, and the move in the loop
        "import torch\nfrom torch.utils.data import Dataset, DataLoader\n"
        "class DS(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].to(torch.float32)\n"
        "loader = DataLoader(DS(), batch_size=4, num_workers=2)\nfor x in loader:\n    x = x.to(device)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch.utils.data import Dataset, DataLoader\n"
            "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "class DS(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].to(device), self.y[i].to(device)\n"
            "loader = DataLoader(DS(), batch_size=4, num_workers=4)\n",
            None, fixable=False,
        ),
        Invalid(
            "import torch\nfrom torch.utils.data import DataLoader\n"
            "def collate(items):\n    return torch.stack(items).cuda()\n"
            "loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate)\n",
            None, fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        imports = ctx.facts.imports
        syntax = ctx.syntax
        if imports is None or not syntax.mentions("num_workers"):  # no worker processes without it
            return
        collate_names: set[str] = set()
        workers = False
        for call in syntax.calls:
            if imports.resolve(call.func) not in api.DATALOADERS or not _starts_workers(call):
                continue
            workers = True
            collate = keyword_value(call, "collate_fn")
            if collate is not None and isinstance(collate, cst.Name):
                collate_names.add(collate.value)
        if not workers:
            return
        for node in syntax.of_type(cst.ClassDef, cst.FunctionDef):
            if isinstance(node, cst.ClassDef) and any(imports.resolve(b.value) in _DATASET_BASES for b in node.bases):
                for item in node.body.body:
                    if isinstance(item, cst.FunctionDef) and item.name.value == "__getitem__":
                        yield from self._cuda_work(item, f"{node.name.value}.__getitem__")
            elif isinstance(node, cst.FunctionDef) and node.name.value in collate_names:
                yield from self._cuda_work(node, node.name.value)

    def _cuda_work(self, function: cst.FunctionDef, where: str) -> Iterator[Hit]:
        for call in preorder(function):
            if type(call) is cst.Call and places_on_device(call):
                text = cst.Module([]).code_for_node(call)
                yield self.hit(call, None, self.message.format(call=text if len(text) <= 60 else text[:57] + "...",
                                                                where=where))


def _starts_workers(loader: cst.Call) -> bool:
    """``num_workers=`` a literal above 0 (a value the script computes is not judged)."""
    workers = keyword_value(loader, "num_workers")
    return isinstance(workers, cst.Integer) and int(workers.value, 0) > 0
