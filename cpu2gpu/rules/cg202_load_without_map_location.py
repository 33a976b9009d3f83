"""CG202 load-without-map-location."""

from __future__ import annotations

from typing import Iterator

from ..analysis.ddpcode import reading
from ..rewrite.fixes import Fix, Replace
from .base import Hit, Invalid, Rule, RuleContext, keyword_added
from .runtimeside import RuntimeSide, Symptom


class LoadWithoutMapLocation(Rule):
    """``torch.load`` without ``map_location``.

    What it finds: a call of ``torch.load(...)`` that does not say where the
    loaded tensors go.

    Why it breaks: a checkpoint saved on a GPU loads its tensors back to the GPU
    they were saved from. On a machine without CUDA that fails ("Attempting to
    deserialize object on a CUDA device but torch.cuda.is_available() is False"),
    and on a multi-GPU machine it fills GPU 0.

    In a distributed script (DistributedDataParallel, ``init_process_group``, a
    DistributedSampler) the call is CG405's (load-without-rank-map-location), which gives it the
    rank's device: one finding per call.

    Example::

        state = torch.load("model.pt")                       # before
        state = torch.load("model.pt", map_location=device)  # after
    """

    code = "CG202"
    name = "load-without-map-location"
    message = "`torch.load` without `map_location` fails on a machine without the GPU the file was saved on"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "torch-load", "torch.load, in the failing traceback, meets tensors saved on a GPU in a run without CUDA",
            "torch.load without map_location at {at} cannot read a GPU checkpoint on a machine without one; pass "
            "map_location=device", ("Attempting to deserialize object on a CUDA device",)),),
        unrepaired="it fails only where there is no GPU (the original's run, the CPU fallback), and migrate "
                   "repairs what the device run locates; round 0's rewrite passes map_location",
    )
    VALID = [
        "import torch\nstate = torch.load('m.pt', map_location=device)\n",
        "import torch\nstate = torch.load('m.pt', 'cpu')\n",
    ]
    INVALID = [
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nstate = torch.load('m.pt')\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "state = torch.load('m.pt', map_location=device)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        if ctx.facts.loads_without_map_location and reading(ctx).distributed:
            return  # CG405's: the rank's device, not the script's one device
        for call, scope, time in ctx.facts.loads_without_map_location:
            if id(call) in ctx.facts.host_loads:
                # torch.load(f).numpy(): read on the host, where a device map would break it
                yield self.hit(call, Fix([Replace(call, keyword_added("map_location", '"cpu"'))]))
                continue
            device, needs_setup = ctx.device_for(scope, time)
            fix = Fix([Replace(call, keyword_added("map_location", device))], needs_device_setup=needs_setup)
            yield self.hit(call, fix)
