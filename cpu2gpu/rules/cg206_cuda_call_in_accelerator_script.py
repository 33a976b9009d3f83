"""CG206 cuda-call-in-accelerator-script."""

from __future__ import annotations

from typing import Iterator, Optional, cast

import libcst as cst

from ..rewrite.fixes import Fix, Replace, replaced_by, uses_accelerator_style
from .base import Build, Hit, Invalid, Rule, RuleContext
from .runtimeside import RuntimeSide

# torch.cuda.X -> torch.accelerator.Y, where both raise (or both answer 0) without a GPU: the same
# program on every machine.
_SAME_ON_THE_HOST = {
    "synchronize": "synchronize",
    "current_device": "current_device_index",
    "set_device": "set_device_index",
    "device_count": "device_count",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
}
# torch.cuda.X answers 0 (or does nothing) without a GPU, torch.accelerator.X raises: the same only
# where the call is guarded by a GPU check (or is a statement that CG204 guards).
_RAISES_ON_THE_HOST = {
    "empty_cache": "empty_cache",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "memory_reserved": "memory_reserved",
    "max_memory_reserved": "max_memory_reserved",
    "memory_stats": "memory_stats",
}
# The first PyTorch with each torch.accelerator function, where it is later than 2.6 (the floor the
# accelerator style allows): 2.6 had set_device_idx/current_device_idx, 2.7 added the *_index names,
# and the memory functions are absent from the 2.8 documentation (present in 2.9's). Their fixes
# need --unsafe-fixes: the project may run a torch that lacks them.
_SINCE = {
    "current_device_index": "2.7", "set_device_index": "2.7",
    "reset_peak_memory_stats": "2.9", "empty_cache": "2.9", "memory_allocated": "2.9",
    "max_memory_allocated": "2.9", "memory_reserved": "2.9", "max_memory_reserved": "2.9", "memory_stats": "2.9",
}
_SEEDS = ("manual_seed", "manual_seed_all")
_AUTOCAST_POSITIONS = ("enabled", "dtype", "cache_enabled")  # torch.cuda.amp.autocast's, in order


def accelerator_active(ctx: RuleContext) -> bool:
    """The script is migrated with the ``accelerator`` device style, or uses ``torch.accelerator``."""
    return uses_accelerator_style(ctx.setup) or _uses_accelerator(ctx)


def _uses_accelerator(ctx: RuleContext) -> bool:
    """The file reads ``torch.accelerator`` (``torch.accelerator.X``, or a name imported from it)."""
    cached = getattr(ctx, "_uses_accelerator", None)
    if cached is None:
        imports = ctx.facts.imports
        syntax = ctx.syntax
        cached = False
        # (an import alias of torch.accelerator is imported under that name: the text names it)
        if imports is not None and syntax.mentions("accelerator"):
            cached = any(type(node) is cst.Attribute and (imports.resolve(node) or "").startswith("torch.accelerator.")
                         or type(node) is cst.Name and (imports.names.get(node.value) or "").startswith("torch.accelerator")
                         for node in syntax.of_type(cst.Attribute, cst.Name))
        ctx._uses_accelerator = cached  # type: ignore[attr-defined]
    return cached


_GPU_WORDS = ("is_available", "cuda", "gpu", "accelerator")


def _cuda_calls(ctx: RuleContext, imports) -> list[tuple[cst.Call, str, bool, Optional[cst.SimpleStatementLine]]]:
    """The calls into ``torch.cuda``, in source order: (call, qualified name, whether an ``if`` that
    names the GPU holds it (its test, body or else), the statement line it is alone in, if it is)."""
    syntax = ctx.syntax
    found = []
    tests: dict[int, bool] = {}
    for call in syntax.calls:
        qual = imports.resolve(call.func) or ""
        if not qual.startswith("torch.cuda."):
            continue
        guarded = False
        for ancestor in syntax.ancestors(call):
            if type(ancestor) is cst.If:
                gpu = tests.get(id(ancestor))
                if gpu is None:
                    code = cst.Module([]).code_for_node(ancestor.test)
                    gpu = tests[id(ancestor)] = any(w in code for w in _GPU_WORDS)
                if gpu:
                    guarded = True
                    break
        expr = syntax.parent(call)
        line = syntax.parent(expr) if type(expr) is cst.Expr else None
        stmt = line if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 \
            and line.body[0] is expr else None
        found.append((call, qual, guarded, stmt))
    return found


class CudaCallInAcceleratorScript(Rule):
    """A ``torch.cuda`` call in a script that picks its device with ``torch.accelerator``.

    What it finds: ``torch.cuda.synchronize()``, ``empty_cache()``, ``memory_allocated()`` and the
    other memory statistics, ``current_device()``, ``set_device()``, ``manual_seed_all()``,
    ``torch.cuda.amp.GradScaler()`` and ``torch.cuda.amp.autocast(...)``, in a script migrated with
    the ``accelerator`` device style (``--device-style accelerator``) or that uses
    ``torch.accelerator`` itself.

    Why it breaks: on an Apple (MPS) or Intel (XPU) GPU the device is not CUDA: ``torch.cuda``
    calls raise there ("Torch not compiled with CUDA enabled"), or do nothing (``empty_cache``,
    the seeds), and a CUDA GradScaler or autocast is disabled with a warning, so the script
    trains in full precision. Their device-generic forms work on every accelerator:
    ``torch.accelerator.*`` (PyTorch 2.6; the memory functions from later releases),
    ``torch.amp.GradScaler(device.type)``, ``torch.amp.autocast(device.type)``, and
    ``torch.manual_seed``, which seeds every device. The fix is safe where the generic form
    behaves the same on the CPU fallback; ``autocast`` (it autocasts to bfloat16 on the CPU) and
    the seeds (``torch.manual_seed`` re-seeds the CPU generator too) need ``--unsafe-fixes``.

    Example::

        torch.cuda.synchronize()                                   # before
        scaler = torch.cuda.amp.GradScaler()

        torch.accelerator.synchronize()                            # after
        scaler = torch.amp.GradScaler(device.type)
    """

    code = "CG206"
    name = "cuda-call-in-accelerator-script"
    message = "`{call}` is CUDA only; use `{generic}` on every accelerator"
    runtime = RuntimeSide(
        unseen="the call fails only on an accelerator that is not CUDA, where the diagnosis says the script "
               "requires CUDA (CG201)",
        unrepaired="round 0's rewrite makes the call device-generic; the simulated CUDA device runs it as it is",
    )
    VALID = [
        # the cuda device style: torch.cuda is the script's own API
        "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "if torch.cuda.is_available():\n    torch.cuda.synchronize()\n",
        "import torch\ndevice = torch.accelerator.current_accelerator()\ntorch.accelerator.synchronize()\n"
        "scaler = torch.amp.GradScaler(device.type)\n",
    ]
    INVALID = [
        Invalid(
            "import torch\ndevice = torch.accelerator.current_accelerator()\n"
            "if torch.accelerator.is_available():\n    torch.cuda.synchronize()\n    torch.cuda.empty_cache()\n",
            "import torch\ndevice = torch.accelerator.current_accelerator()\n"
            "if torch.accelerator.is_available():\n    torch.accelerator.synchronize()\n"
            "    torch.accelerator.empty_cache()\n",
        ),
        Invalid(
            "import torch\ndevice = torch.accelerator.current_accelerator()\n"
            "scaler = torch.cuda.amp.GradScaler(enabled=True)\n",
            "import torch\ndevice = torch.accelerator.current_accelerator()\n"
            "scaler = torch.amp.GradScaler(device.type, enabled=True)\n",
        ),
        Invalid(  # the CPU fallback would autocast to bfloat16: --unsafe-fixes
            "import torch\ndevice = torch.accelerator.current_accelerator()\n"
            "with torch.cuda.amp.autocast(True, torch.float16):\n    pass\n",
            "import torch\ndevice = torch.accelerator.current_accelerator()\n"
            "with torch.amp.autocast(device.type, enabled=True, dtype=torch.float16):\n    pass\n",
        ),
        Invalid(  # memory statistics: 0 without a GPU from torch.cuda, an error from torch.accelerator
            "import torch\ndevice = torch.accelerator.current_accelerator()\n"
            "print(torch.cuda.memory_allocated())\n",
            "import torch\ndevice = torch.accelerator.current_accelerator()\n"
            "print(torch.accelerator.memory_allocated())\n",
        ),
        Invalid(  # torch.manual_seed seeds every device, and re-seeds the CPU: --unsafe-fixes
            "import torch\nfrom torch import accelerator\ntorch.cuda.manual_seed_all(0)\n",
            "import torch\nfrom torch import accelerator\ntorch.manual_seed(0)\n",
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        imports = ctx.facts.imports
        if imports is None or not accelerator_active(ctx):
            return
        torch_name = ctx.facts.torch_alias
        cg204 = {id(call) for call, _ in ctx.facts.unguarded_cuda_calls}  # CG204 guards them
        for call, qual, guarded, stmt in _cuda_calls(ctx, imports):
            attr = qual[len("torch.cuda."):]
            generic, fix, safe = None, None, True
            if attr in _SAME_ON_THE_HOST or attr in _RAISES_ON_THE_HOST:
                target = _SAME_ON_THE_HOST.get(attr) or _RAISES_ON_THE_HOST[attr]
                generic = f"torch.accelerator.{target}"
                fix = self._replace_func(call, generic, torch_name)
                since = _SINCE.get(target)
                safe = since is None
                if attr in _RAISES_ON_THE_HOST and not guarded:
                    # torch.accelerator's raises without a GPU: a statement of its own gets the check
                    # (from CG204 where it reports the call), any other use needs --unsafe-fixes
                    safe = safe and stmt is not None
                    if fix is not None and torch_name is not None and stmt is not None and id(call) not in cg204:
                        # (a fix is made only where torch is imported as a module: torch_name is set)
                        fix.edits.append(Replace(stmt, _guarded(torch_name)))
            elif attr in _SEEDS:
                generic, safe = "torch.manual_seed", False
                fix = self._replace_func(call, generic, torch_name)
            elif attr in ("amp.GradScaler", "amp.grad_scaler.GradScaler"):
                generic = "torch.amp.GradScaler(device.type)"
                fix = self._amp(ctx, call, "amp.GradScaler", torch_name, ())
            elif attr in ("amp.autocast", "amp.autocast_mode.autocast"):
                generic, safe = "torch.amp.autocast(device.type)", False
                fix = self._amp(ctx, call, "amp.autocast", torch_name, _AUTOCAST_POSITIONS)
            if generic is None:
                continue
            shown = cst.Module([]).code_for_node(call.func)
            message = self.message.format(call=shown, generic=generic)
            if generic.startswith("torch.accelerator.") and _SINCE.get(generic[len("torch.accelerator."):]):
                message += f" (PyTorch {_SINCE[generic[len('torch.accelerator.'):]]}+)"
            hit = self.hit(call, fix, message)
            if hit.fix is not None:
                hit.fix.safe = safe
            yield hit

    @staticmethod
    def _replace_func(call: cst.Call, generic: str, torch_name: Optional[str]) -> Optional[Fix]:
        if torch_name is None:  # torch is not imported as a module: the generic form cannot be spelled
            return None
        func = cst.parse_expression(torch_name + generic[len("torch"):])
        return Fix([replaced_by(call.func, func)])

    @staticmethod
    def _amp(ctx: RuleContext, call: cst.Call, generic: str, torch_name: Optional[str],
             positions: tuple[str, ...]) -> Optional[Fix]:
        if torch_name is None or any(arg.star for arg in call.args):
            return None
        # autocast's positional arguments become keywords (torch.amp.autocast orders them otherwise);
        # GradScaler's keep their places after the device
        if positions and len([arg for arg in call.args if arg.keyword is None]) > len(positions):
            return None
        name, needs_setup = ctx.device_for()
        device_type = f"{name}.type" if needs_setup or _is_torch_device(ctx, name) \
            else f'{torch_name}.device({name}).type'
        func = cst.parse_expression(f"{torch_name}.{generic}")

        def build(node: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(node, cst.Call)
            args = list(node.args)
            if positions:
                index = 0
                for i, arg in enumerate(args):
                    if arg.keyword is None:
                        args[i] = arg.with_changes(keyword=cst.Name(positions[index]),
                                                   equal=cst.AssignEqual(cst.SimpleWhitespace(""),
                                                                         cst.SimpleWhitespace("")))
                        index += 1
            first = cst.Arg(cst.parse_expression(device_type),
                            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if args else cst.MaybeSentinel.DEFAULT)
            return node.with_changes(func=func, args=[first, *args])

        fix = Fix([Replace(call, build)])
        fix.needs_device_setup = needs_setup
        return fix


def _guarded(torch_name: str) -> Build:
    """The call's statement line inside ``if torch.accelerator.is_available():``."""
    def build(node: cst.CSTNode) -> cst.CSTNode:
        line = cast(cst.SimpleStatementLine, node)  # the line, as the edits inside it left it: a line still
        test = cst.parse_expression(f"{torch_name}.accelerator.is_available()")
        inner = line.with_changes(leading_lines=[])
        return cst.If(test=test, body=cst.IndentedBlock(body=[inner]), leading_lines=line.leading_lines)
    return build


def _is_torch_device(ctx: RuleContext, name: str) -> bool:
    """Whether the script's device variable holds a ``torch.device`` (it has ``.type``), not a string."""
    scope = ctx.facts.global_scope
    binding = scope.device_binding() if scope is not None and hasattr(scope, "device_binding") else None
    if binding is None or binding[0] != name or binding[2] is None:
        return "." in name  # next(model.parameters()).device, x.device
    stmt = binding[2]
    code = cst.Module([]).code_for_node(stmt)
    value = code.split("=", 1)[1].strip() if "=" in code else code
    return value.startswith((f"{ctx.setup.torch_name}.device(", f"{ctx.setup.torch_name}.accelerator.",
                             f"{ctx.setup.torch_name}.get_default_device")) or ".device" in value
