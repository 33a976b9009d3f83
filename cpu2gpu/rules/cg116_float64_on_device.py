"""CG116 float64-on-device."""

from __future__ import annotations

import typing
from typing import Iterator, Optional

import libcst as cst

from ..analysis.classdefs import walk
from ..analysis.facts import Kind
from ..rewrite.fixes import Fix, Replace, method_call
from ..analysis.syntaxindex import SyntaxIndex
from .base import Hit, Invalid, Rule, RuleContext, as_expression
from .runtimeside import RuntimeSide

# NumPy makes float64 unless told otherwise: these calls, without dtype=, give float64 arrays.
_NUMPY_FLOAT64 = {"randn", "rand", "normal", "uniform", "random", "standard_normal", "random_sample",
                  "loadtxt", "genfromtxt", "linspace", "zeros", "ones", "empty", "full", "array", "asarray"}
_NEEDS_FLOAT_LITERAL = {"array", "asarray"}
_CASTS = {"float", "half", "bfloat16", "int", "long", "short", "bool", "byte"}
_CONVERSIONS = {"from_numpy", "tensor", "as_tensor", "asarray"}


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _doubled(call: cst.Call) -> cst.Attribute:
    """The ``x.double`` of a call read as ``x.double()`` (``_method`` found its attribute's name)."""
    return typing.cast(cst.Attribute, call.func)


def _kw(call: cst.Call, name: str) -> Optional[cst.Arg]:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _is_float64(expr: cst.BaseExpression, torch: str) -> bool:
    return _code(expr) in (f"{torch}.float64", f"{torch}.double")


def _is_dtype(expr: cst.BaseExpression, torch: str) -> bool:
    return isinstance(expr, cst.Attribute) and _code(expr.value) == torch and expr.attr.value not in ("device",)


def _is_cpu(expr: cst.BaseExpression) -> bool:
    return "'cpu'" in _code(expr) or '"cpu"' in _code(expr)


class _Tree:
    """What the rule reads of the file's syntax index: parents, the calls in source order, and the
    values of ``name = ...`` assignments."""

    def __init__(self, syntax: SyntaxIndex) -> None:
        self.parent = syntax.parents
        self.calls: list[cst.Call] = syntax.calls
        self.assigned: dict[str, list[cst.BaseExpression]] = {}
        for node in syntax.of_type(cst.Assign):
            if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
                self.assigned.setdefault(node.targets[0].target.value, []).append(node.value)


class Float64OnDevice(Rule):
    """A float64 tensor on the device: ``dtype=torch.float64``, ``.double()``, or a NumPy array made into a tensor.

    What it finds: a tensor of dtype float64 that is moved to the device or made there:
    ``torch.zeros(..., dtype=torch.float64, device=device)``, ``x.double().to(device)``,
    and ``torch.from_numpy(a).to(device)`` (or ``torch.tensor(a)``) where ``a`` comes from
    NumPy, whose arrays are float64 by default (``np.random.randn``, ``np.loadtxt``,
    ``np.array([0.5, 1.5])``, ``rng.standard_normal``). A float64 tensor that stays on the
    CPU is left alone. The fix (``.float()`` at the source) is offered only where the value
    meets a model, whose parameters are float32 anyway: there the script mixes dtypes and
    float32 is what it computes in. Elsewhere the finding has no fix: float64 may be meant.

    Why it breaks on the GPU: Apple's MPS has no float64: "Cannot convert a MPS Tensor to
    float64 dtype as the MPS framework doesn't support float64". On CUDA it runs, but
    consumer cards compute float64 30 to 60 times slower than float32.

    Example::

        x = torch.from_numpy(np.random.randn(64, 3)).to(device)           # before
        x = torch.from_numpy(np.random.randn(64, 3)).float().to(device)   # after
    """

    code = "CG116"
    name = "float64-on-device"
    message = "`{code}` is float64 on the device: MPS refuses it and CUDA runs it many times slower; use float32"
    runtime = RuntimeSide(
        unseen="on a CUDA device float64 runs, only slower; Apple's MPS refuses it ('Cannot convert a MPS Tensor "
               "to float64'), which the diagnosis names no rule for",
        unrepaired="no located cause names it; round 0's rewrite applies the fix where the value meets a model "
                   "(elsewhere float64 may be meant)",
    )
    VALID = [
        # float64 that stays on the CPU
        "import numpy as np\nimport torch\na = np.random.randn(4, 3)\nx = torch.from_numpy(a)\nprint(x.sum())\n",
        "import torch\nx = torch.zeros(3, dtype=torch.float64)\nprint(x.mean())\n",
        # cast to float32 before the move
        "import numpy as np\nimport torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "a = np.random.randn(4, 3)\nx = torch.from_numpy(a).float().to(device)\n",
        "import numpy as np\nimport torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
        "a = np.array([1.0, 2.0], dtype=np.float32)\nx = torch.from_numpy(a).to(device)\n",
    ]
    INVALID = [
        Invalid(  # meets the model: made float32 at the source
            "import numpy as np\nimport torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\na = np.random.randn(4, 3)\n"
            "x = torch.from_numpy(a).to(device)\nprint(model(x.float()))\n",
            "import numpy as np\nimport torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\na = np.random.randn(4, 3)\n"
            "x = torch.from_numpy(a).float().to(device)\nprint(model(x.float()))\n",
        ),
        Invalid(  # .double() of a model input
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\nx = torch.randn(4, 3).double().to(device)\nmodel(x.float())\n",
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "model = torch.nn.Linear(3, 1).to(device)\nx = torch.randn(4, 3).float().to(device)\nmodel(x.float())\n",
        ),
        Invalid(  # no model in sight: reported, not changed
            "import torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "acc = torch.zeros(10, dtype=torch.float64, device=device)\nprint(acc.sum())\n",
            fixable=False,
        ),
        Invalid(  # moved later, by name
            "import numpy as np\nimport torch\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n"
            "t = torch.tensor(np.loadtxt('data.txt'))\nt = t.to(device)\nprint(t.mean())\n",
            fixable=False,
        ),
    ]

    def check(self, ctx: RuleContext) -> Iterator[Hit]:
        facts = ctx.facts
        torch = facts.torch_alias or "torch"
        numpy_names = self._numpy_names(facts.module)
        syntax = ctx.syntax
        # float64 is spelled out (dtype=torch.float64, .double()), or comes from NumPy (imported at the
        # top of the file) or from a RandomState: without one of them there is nothing to find.
        if not numpy_names and not syntax.mentions("float64", "double", "RandomState"):
            return
        tree = _Tree(syntax)
        model_args = [arg for use in facts.uses if use.kind == "call" for arg in use.arg_nodes]
        module_names = {v.name for v in facts.values if v.kind is Kind.MODULE and v.name}
        doubled_model = any(self._method(c) == "double" and _code(_doubled(c).value) in module_names
                            for c in tree.calls)
        for call in tree.calls:
            kind = self._source(call, torch, numpy_names, tree)
            if kind is None:
                continue
            if kind == "double" and _code(_doubled(call).value) in module_names:
                continue  # a model made float64: its own choice (the inputs follow it)
            top, on_device, cast = self._chain(call, torch, tree)
            if cast:
                continue
            if not on_device and kind == "double":
                on_device = self._receiver_on_device(_doubled(call).value, torch)
            if not on_device and kind == "dtype":
                device = _kw(call, "device")
                on_device = device is not None and not _is_cpu(device.value)
            name = self._bound_name(top, tree)
            if not on_device and name is not None:
                on_device = self._moved_later(name, torch, tree)
            if not on_device:
                on_device = any(v.node is call or v.node is top for v in facts.values
                                if v.kind is Kind.TENSOR and facts.is_bound(v))
            if not on_device:
                continue
            meets_model = not doubled_model and any(
                arg is top or (name is not None and name in self._names(arg)) for arg in model_args)
            fix = self._fix(call, kind, torch) if meets_model else None
            shown = _code(call)
            if len(shown) > 40:
                shown = shown[:37] + "..."
            yield self.hit(call, fix, self.message.format(code=shown))

    # -- what makes float64 -------------------------------------------------------------

    @staticmethod
    def _method(call: cst.Call) -> Optional[str]:
        return call.func.attr.value if isinstance(call.func, cst.Attribute) else None

    def _source(self, call: cst.Call, torch: str, numpy_names: set, tree: _Tree) -> Optional[str]:
        dtype = _kw(call, "dtype")
        if dtype is not None and _is_float64(dtype.value, torch):
            return "dtype"
        if self._method(call) == "double" and not call.args:
            return "double"
        # (the code of the callee ends with its attribute's name only when it is a plain attribute)
        if dtype is None and call.args and call.args[0].keyword is None and type(call.func) is cst.Attribute \
                and call.func.attr.value in _CONVERSIONS:
            func = _code(call.func)
            if func.startswith(torch + ".") and func.rsplit(".", 1)[-1] in _CONVERSIONS:
                arg = call.args[0].value
                if self._numpy_float64(arg, numpy_names, tree):
                    return "numpy"
        return None

    def _numpy_float64(self, expr: cst.BaseExpression, numpy_names: set, tree: _Tree, depth: int = 0) -> bool:
        if isinstance(expr, cst.Name) and depth < 3:
            bound = tree.assigned.get(expr.value, [])
            return len(bound) == 1 and self._numpy_float64(bound[0], numpy_names, tree, depth + 1)
        if not isinstance(expr, cst.Call) or not isinstance(expr.func, cst.Attribute):
            return False
        attr = expr.func.attr.value
        if attr not in _NUMPY_FLOAT64 or _kw(expr, "dtype") is not None:
            return False
        root = expr.func.value
        while isinstance(root, (cst.Attribute, cst.Call)):
            root = root.value if isinstance(root, cst.Attribute) else root.func
        if not isinstance(root, cst.Name):
            return False
        from_numpy = root.value in numpy_names or any(
            isinstance(v, cst.Call) and _code(v.func).split(".")[0] in numpy_names and "default_rng" in _code(v.func)
            or isinstance(v, cst.Call) and "RandomState" in _code(v.func)
            for v in tree.assigned.get(root.value, []))
        if not from_numpy:
            return False
        if attr in _NEEDS_FLOAT_LITERAL:
            return bool(expr.args) and "." in _code(expr.args[0].value) and any(
                isinstance(n, cst.Float) for n in walk(expr.args[0].value))
        return True

    @staticmethod
    def _numpy_names(module: cst.Module) -> set:
        names = set()
        for stmt in module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        for alias in small.names:
                            if _code(alias.name) == "numpy":
                                names.add(alias.asname.name.value if alias.asname else "numpy")  # type: ignore[union-attr]
        return names

    # -- where it goes ------------------------------------------------------------------

    def _chain(self, call: cst.Call, torch: str, tree: _Tree) -> tuple[cst.BaseExpression, bool, bool]:
        """The method chain on the value: (its outermost call, moved to the device, cast to another dtype)."""
        cur: cst.BaseExpression = call
        on_device = False
        while True:
            attr = tree.parent.get(id(cur))
            outer = tree.parent.get(id(attr)) if attr is not None else None
            if not isinstance(attr, cst.Attribute) or not isinstance(outer, cst.Call) or outer.func is not attr:
                return cur, on_device, False
            method = attr.attr.value
            if method in _CASTS:
                return outer, on_device, True
            if method in ("to", "type"):
                args = [a.value for a in outer.args if a.keyword is None or a.keyword.value in ("dtype", "device")]
                if any(_is_dtype(a, torch) and not _is_float64(a, torch) for a in args):
                    return outer, on_device, True
                if method == "to" and any(not _is_dtype(a, torch) and not _is_cpu(a) for a in args):
                    on_device = True
            elif method == "cuda":
                on_device = True
            cur = outer

    def _receiver_on_device(self, expr: cst.BaseExpression, torch: str) -> bool:
        while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            method = expr.func.attr.value
            if method == "cuda" or method == "to" and any(
                    not _is_dtype(a.value, torch) and not _is_cpu(a.value) for a in expr.args if a.keyword is None):
                return True
            expr = expr.func.value
        if isinstance(expr, cst.Call):
            device = _kw(expr, "device")
            return device is not None and not _is_cpu(device.value)
        return False

    @staticmethod
    def _bound_name(top: cst.BaseExpression, tree: _Tree) -> Optional[str]:
        parent = tree.parent.get(id(top))
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
            return parent.targets[0].target.value
        return None

    def _moved_later(self, name: str, torch: str, tree: _Tree) -> bool:
        for call in tree.calls:
            if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                    and call.func.value.value == name and call.func.attr.value in ("to", "cuda"):
                if call.func.attr.value == "cuda" or any(
                        not _is_dtype(a.value, torch) and not _is_cpu(a.value) for a in call.args if a.keyword is None):
                    return True
        return False

    @staticmethod
    def _names(node: cst.CSTNode) -> set:
        return {n.value for n in walk(node) if isinstance(n, cst.Name)}

    # -- the fix ------------------------------------------------------------------------

    @staticmethod
    def _fix(call: cst.Call, kind: str, torch: str) -> Fix:
        if kind == "double":
            return Fix([Replace(_doubled(call).attr, lambda n: n.with_changes(value="float"))])
        if kind == "dtype":
            arg = _kw(call, "dtype")
            assert arg is not None
            return Fix([Replace(arg.value, lambda n: cst.parse_expression(f"{torch}.float32"))])

        def build(node: cst.CSTNode) -> cst.CSTNode:
            # Another fix may have chained the move here already: cast before it, not on the device.
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                    and node.func.attr.value in ("to", "cuda") and _code(node.func.value) == _code(call):
                return node.with_changes(func=node.func.with_changes(value=method_call(node.func.value, "float")))
            return method_call(as_expression(node), "float")

        return Fix([Replace(call, build)])
