"""CG403 wrapper-state-dict."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ..analysis.ddpcode import DDP_CLASSES, DdpReading, reading, walk
from ..rewrite.fixes import Fix, Replace
from ..analysis.imports import dotted
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RuntimeSide

_HEAD = ("import torch\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
         "dist.init_process_group('nccl')\n")


class WrapperStateDict(Rule):
    """The state dict of the DistributedDataParallel wrapper saved instead of the model's.

    What it finds: ``torch.save(ddp_model.state_dict(), ...)``, directly, inside a dict given to
    ``torch.save``, or in a dict bound to a name that ``torch.save`` gets, where ``ddp_model`` is
    bound to ``DistributedDataParallel(...)`` (``DDP(...)`` and other import aliases) before the
    save. A file that loads a state dict into a wrapper (``ddp_model.load_state_dict(...)``) saves and
    loads the same keys, and is left alone.

    Why it breaks: the wrapper holds the model as ``.module``, so every key of its state dict
    starts with ``module.``: ``module.fc.weight`` instead of ``fc.weight``. A plain model (for
    evaluation, inference, or a single-GPU run) refuses the checkpoint with "Missing key(s) in
    state_dict ... Unexpected key(s) in state_dict: module.fc.weight".

    The fix saves the wrapped model's state dict, ``ddp_model.module.state_dict()``. It is safe
    where the name is bound to the wrapper on every path to the save; where the wrapping is
    conditional (``if args.distributed: model = DDP(model)``), ``model.module`` would not exist on
    the other path, and the finding is reported only.

    Example::

        model = DDP(net, device_ids=[local_rank])
        torch.save(model.state_dict(), "ckpt.pt")            # before: keys "module.fc.weight"
        torch.save(model.module.state_dict(), "ckpt.pt")     # after: keys "fc.weight"
    """

    code = "CG403"
    name = "wrapper-state-dict"
    message = ("`{name}.state_dict()` is the DistributedDataParallel wrapper's: its keys start with `module.`, "
               "which a plain model's `load_state_dict` refuses; save `{name}.module.state_dict()`")
    runtime = RuntimeSide(
        unseen="saving works; only a later load into a plain model fails, outside the run",
        unrepaired="no run fails for it; round 0's rewrite saves the wrapped model's state dict",
    )
    VALID = [
        _HEAD + "model = DDP(net)\ntorch.save(model.module.state_dict(), 'm.pt')\n",
        # the name is not the wrapper yet
        _HEAD + "model = Net()\ntorch.save(model.state_dict(), 'init.pt')\nmodel = DDP(model)\n",
        # saved and loaded into the wrapper: the same keys
        _HEAD + "model = DDP(net)\ntorch.save(model.state_dict(), 'm.pt')\n"
        "model.load_state_dict(torch.load('m.pt', map_location='cpu'))\n",
        "import torch\nmodel = torch.nn.DataParallel(net)\ntorch.save(model.state_dict(), 'm.pt')\n",
    ]
    INVALID = [
        Invalid(
            _HEAD + "model = DDP(net, device_ids=[0])\ntorch.save(model.state_dict(), 'm.pt')\n",
            _HEAD + "model = DDP(net, device_ids=[0])\ntorch.save(model.module.state_dict(), 'm.pt')\n",
        ),
        Invalid(
            _HEAD + "def train(net):\n    ddp = torch.nn.parallel.DistributedDataParallel(net)\n"
            "    state = {'model': ddp.state_dict(), 'epoch': 3}\n    torch.save(state, 'ckpt.pt')\n",
            _HEAD + "def train(net):\n    ddp = torch.nn.parallel.DistributedDataParallel(net)\n"
            "    state = {'model': ddp.module.state_dict(), 'epoch': 3}\n    torch.save(state, 'ckpt.pt')\n",
        ),
        Invalid(
            _HEAD + "model = Net()\nif args.distributed:\n    model = DDP(model)\n"
            "torch.save({'model': model.state_dict()}, 'm.pt')\n",
            None, fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        ddp = reading(ctx)
        if not ddp.distributed:
            return
        loads_into = {dotted(call.func.value) for call in ddp.calls
                      if type(call.func) is cst.Attribute and call.func.attr.value == "load_state_dict"}
        wrappers = {name for name, bound in ddp.bindings.items()
                    if any(ddp.is_call_of(value, DDP_CLASSES) for value, _ in bound)}
        if loads_into & wrappers:
            return  # the file loads its checkpoints into a wrapper: the `module.` keys are what it reads
        seen: set[int] = set()
        for call in ddp.calls:
            if ddp.resolve(call.func) != "torch.save" or not call.args:
                continue
            saved = call.args[0].value
            places = [saved]
            name = dotted(saved)
            if name is not None:  # state = {"model": model.state_dict(), ...}; torch.save(state, path)
                bound = ddp.last_binding(name, call)
                if bound is not None:
                    places.append(bound[0])
            for place in places:
                for state_call in _state_dict_calls(place):
                    receiver = state_call.func.value  # type: ignore[attr-defined]
                    wrapper = dotted(receiver)
                    if wrapper is None or id(state_call) in seen:
                        continue
                    binding = _wrapper_binding(ddp, wrapper, state_call)
                    if binding is None:
                        continue
                    seen.add(id(state_call))
                    fix = None
                    if not ddp.conditional_between(binding, call):
                        fix = Fix([Replace(receiver, _add_module)], description=f"save `{wrapper}.module.state_dict()`")
                    yield self.hit(state_call, fix, self.message.format(name=wrapper))


def _state_dict_calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    """``x.state_dict()`` calls in ``node``, outside lambdas and nested calls' other arguments."""
    for current in walk(node):
        if type(current) is cst.Call and type(current.func) is cst.Attribute \
                and current.func.attr.value == "state_dict" and not current.args:
            yield current


def _wrapper_binding(ddp: DdpReading, name: str, at: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The statement that binds ``name`` to ``DistributedDataParallel(...)``, if that is the binding
    that ``at`` sees (for ``self.x``: every assignment to it in the file is a wrapper)."""
    if name.startswith("self."):
        bound = ddp.bindings.get(name, [])
        if bound and all(ddp.is_call_of(value, DDP_CLASSES) for value, _ in bound):
            return bound[-1][1]
        return None
    found = ddp.last_binding(name, at)
    return found[1] if found is not None and ddp.is_call_of(found[0], DDP_CLASSES) else None


def _add_module(receiver: cst.CSTNode) -> cst.CSTNode:
    return cst.Attribute(value=receiver, attr=cst.Name("module"))  # type: ignore[arg-type]
