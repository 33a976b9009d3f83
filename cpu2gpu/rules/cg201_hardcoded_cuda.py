"""CG201 hardcoded-cuda."""

from __future__ import annotations

from typing import Iterator, cast

import libcst as cst

from ..rewrite.fixes import Fix, Replace
from .base import Build, Hit, Invalid, Rule, RuleContext, keyword_added, method_called, parsed
from .runtimeside import RULE_FIX, RuntimeRepair, RuntimeSide, Symptom


class HardcodedCuda(Rule):
    """CUDA named with no fallback to the CPU.

    What it finds: ``.cuda()``, ``.to("cuda")``, ``device="cuda"``,
    ``torch.device("cuda")`` and ``device = "cuda"`` outside any check of
    ``torch.cuda.is_available()`` (or a ``use_cuda``/``args.cuda`` flag).

    Why it breaks: the script works on the GPU box and crashes everywhere else
    ("Torch not compiled with CUDA enabled", "No CUDA GPUs are available"): CI, a
    laptop, the CPU fallback a migrated script must keep.

    Example::

        model = Net().cuda()        # before
        model = Net().to(device)    # after, with device chosen once:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    """

    code = "CG201"
    name = "hardcoded-cuda"
    message = "`{code}` requires CUDA; use the device variable so the script still runs on the CPU"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "no-cuda", "CUDA asked for in a run without it (torch.cuda.is_available() is False); where the run has "
            "the simulated GPU, the same words are a CUDA API the simulation lacks, which no rule is to blame for",
            "the script requires CUDA at {at} and fails on a machine without a GPU; pick the device with "
            "torch.cuda.is_available()",
            ("Torch not compiled with CUDA enabled", "No CUDA GPUs are available", "Found no NVIDIA driver",
             "no CUDA-capable device", "CUDA driver initialization failed",
             "Cannot initialize CUDA without ATen_cuda library")),),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nx = torch.ones(1).to(device)\n",
        "import torch\nif torch.cuda.is_available():\n    x = torch.ones(1).cuda()\n",
        "import torch\nif use_cuda:\n    model.cuda()\n",
    ]
    INVALID = [
        Invalid(
            "import torch\nx = torch.ones(1).cuda()\n",
            "import torch\n\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\nx = torch.ones(1, device=device)\n",
        ),
        Invalid(
            "import torch\nmodel = torch.nn.Linear(1, 1).cuda()\n",
            "import torch\n\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\n"
            "model = torch.nn.Linear(1, 1).to(device)\n",
        ),
        Invalid(
            "import torch\ndevice = torch.device('cuda')\nx = torch.ones(1, device='cuda')\n",
            "import torch\ndevice = torch.device(\"cuda\" if torch.cuda.is_available() else \"cpu\")\nx = torch.ones(1, device=device)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        torch_name = facts.torch_alias or "torch"
        fallback = f'"cuda" if {torch_name}.cuda.is_available() else "cpu"'
        for found in facts.hardcoded:
            device, needs_setup = ctx.device_for(found.scope, found.time)
            node = found.node
            if found.form == "cuda-index":
                # .cuda(args.gpu): a chosen GPU; the fallback needs a decision the tool cannot make.
                code = cst.Module([]).code_for_node(node)
                yield self.hit(node, None, self.message.format(code=code))
                continue
            if found.form == "cuda-call" and found.on_fresh_factory:
                build: Build = _of_receiver(keyword_added("device", device))
            elif found.form == "cuda-call":
                assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                build = _of_receiver(method_called("to", device))
            elif found.form in ("to-string", "device-kwarg"):
                build = _value_set(device)
            elif found.form == "torch-device" and found.binding_name is not None:
                # device = torch.device("cuda"): this is the script's device; give it the fallback.
                needs_setup = False
                build = lambda n: n.with_changes(  # noqa: E731
                    args=[cst.Arg(cst.parse_expression(fallback))]
                )
            elif found.form == "device-string":
                needs_setup = False
                build = parsed(fallback)
            else:
                build = parsed(device)
            code = cst.Module([]).code_for_node(node)
            yield self.hit(node, Fix([Replace(node, build)], needs_device_setup=needs_setup),
                           self.message.format(code=code))


def _of_receiver(build: Build) -> Build:
    """``build`` applied to the ``x`` of the ``x.cuda()`` the fix replaces (a call on an attribute:
    the form the analysis reports as "cuda-call")."""
    return lambda node: build(cast(cst.Attribute, cast(cst.Call, node).func).value)


def _value_set(code: str) -> Build:
    """The argument (``.to("cuda")``'s, a factory's ``device="cuda"``) with ``code`` as its value."""
    return lambda node: node.with_changes(value=cst.parse_expression(code))
