"""CG113 cpu-generator-for-device-draw."""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from ..analysis import torchapi as api
from ..analysis.facts import Facts, Origin, Place
from ..rewrite.fixes import Fix, Replace, chain_to, method_call
from .base import Hit, Invalid, Rule, RuleContext
from .runtimeside import RULE_FIX, RuntimeRepair, RuntimeSide, Symptom

# Random functions whose first argument is the tensor they draw from (its device is the draw's).
_DRAW_FROM_INPUT = frozenset({"torch.multinomial", "torch.bernoulli", "torch.poisson", "torch.normal"})


class CpuGeneratorForDeviceDraw(Rule):
    """A ``torch.Generator()`` made on the CPU draws random numbers on the device.

    What it finds: ``generator=g`` on a random draw that happens on the device
    (``torch.randn(..., device=device, generator=g)``, ``x.new(shape).normal_(generator=g)``,
    ``torch.multinomial(probs, n, generator=g)`` of device probabilities) where ``g``
    is a generator made without a device. A generator given to a ``DataLoader``,
    ``random_split`` or a sampler is right on the CPU and is never flagged.

    Why it breaks on the GPU: a generator draws on its own device only: "Expected a
    'cuda' device type for generator but found 'cpu'". On the CPU everything is on
    one device, so it runs. Drawing on the CPU with that generator and moving the
    result keeps the random stream, so runs stay reproducible and match the CPU.

    Example::

        noise = torch.randn(n, 8, device=device, generator=g)        # before
        noise = torch.randn(n, 8, generator=g).to(device)            # after
    """

    code = "CG113"
    name = "cpu-generator-for-device-draw"
    message = "the CPU generator `{generator}` cannot draw on the device; draw on the CPU and move the result"
    runtime = RuntimeSide(
        symptoms=(Symptom(
            "generator", "a draw on the device given a CPU torch.Generator",
            "a CPU torch.Generator was used for a draw on the device at {at}; draw on the CPU with it and move the "
            "result (torch.randn(..., generator=g).to(device))", ("Expected a 'cuda' device type for generator",)),),
        repair=RuntimeRepair(RULE_FIX),
    )
    VALID = [
        "import torch\ng = torch.Generator()\ng.manual_seed(0)\nloader = torch.utils.data.DataLoader(ds, shuffle=True, generator=g)\n"
        "noise = torch.randn(4, generator=g).to(device)\n",
        "import torch\ng = torch.Generator(device=device)\nnoise = torch.randn(4, device=device, generator=g)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "g = torch.Generator()\nnoise = torch.randn(4, 8, device=device, generator=g)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "g = torch.Generator()\nnoise = torch.randn(4, 8, generator=g).to(device)\n",
        ),
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "g = torch.Generator()\nx = torch.ones(3, device=device)\nnoise = x.new(3, 8).normal_(generator=g)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "g = torch.Generator()\nx = torch.ones(3, device=device)\n"
            "noise = torch.empty(3, 8, dtype=x.dtype).normal_(generator=g).to(x.device)\n",
        ),
        Invalid(
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "g = torch.Generator()\nprobs = torch.ones(5, device=device)\npick = torch.multinomial(probs, 2, generator=g)\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "g = torch.Generator()\nprobs = torch.ones(5, device=device)\n"
            "pick = torch.multinomial(probs.cpu(), 2, generator=g).to(probs.device)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        for call, result, generator, _scope, _time in facts.generator_draws:
            if not _on_device(facts, result):
                continue
            name = generator.name or cst.Module([]).code_for_node(call)
            fix = _fix(facts, call)
            yield self.hit(call, fix, self.message.format(generator=name))


def _on_device(facts: Facts, result) -> bool:
    if result.is_root and result.origin is Origin.FACTORY:
        return result.explicit is Place.DEVICE  # device= given; a factory moved later draws on the CPU
    return facts.place(result) is Place.DEVICE


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _fix(facts: Facts, call: cst.Call) -> Optional[Fix]:
    qual = facts.imports.resolve(call.func) if facts.imports is not None else None
    torch_name = facts.torch_alias or "torch"
    device_kw = next((a for a in call.args if a.keyword is not None and a.keyword.value == "device"), None)
    if qual in api.FACTORIES and device_kw is not None:
        target = _code(device_kw.value)
        return Fix([Replace(call, lambda n: chain_to(_without(n, "device"), target))])  # (target is bound once)
    positional = [a for a in call.args if a.keyword is None]
    if qual in _DRAW_FROM_INPUT and positional and isinstance(positional[0].value, (cst.Name, cst.Attribute)):
        source = _code(positional[0].value)

        def draw_from_cpu(n: cst.CSTNode, source: str = source) -> cst.CSTNode:
            assert isinstance(n, cst.Call)
            args = list(n.args)
            args[0] = args[0].with_changes(value=method_call(args[0].value, "cpu"))
            return chain_to(n.with_changes(args=args), f"{source}.device")

        return Fix([Replace(call, draw_from_cpu)])
    func = call.func
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Attribute) \
            and func.value.func.attr.value in ("new", "new_empty") and isinstance(func.value.func.value, (cst.Name, cst.Attribute)):
        base = _code(func.value.func.value)

        def empty_on_cpu(n: cst.CSTNode, base: str = base) -> cst.CSTNode:
            # x.new(shape).normal_(generator=g) -> torch.empty(shape, dtype=x.dtype).normal_(generator=g).to(x.device)
            # (x.new_empty(shape) alike)
            assert isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and isinstance(n.func.value, cst.Call)
            new_call = n.func.value
            empty = cst.parse_expression(f"{torch_name}.empty()")
            assert isinstance(empty, cst.Call)
            dtype = cst.Arg(cst.parse_expression(f"{base}.dtype"), keyword=cst.Name("dtype"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
            empty = empty.with_changes(args=[*[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in new_call.args], dtype])
            drawn = n.with_changes(func=n.func.with_changes(value=empty))
            return chain_to(drawn, f"{base}.device")

        return Fix([Replace(call, empty_on_cpu)])
    return None


def _without(call: cst.CSTNode, keyword: str) -> cst.Call:
    assert isinstance(call, cst.Call)
    args = list(call.args)
    index = next(i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == keyword)
    removed = args.pop(index)
    if index == len(args) and args:
        args[-1] = args[-1].with_changes(comma=removed.comma)  # the last argument keeps the layout of the old last
    return call.with_changes(args=args)
