"""A script that turns the GPU on only when asked: ``--cuda`` / ``--gpu`` / ``--use_cuda`` (argparse options
that are off by default), or an environment variable such as ``USE_CUDA``.

Its run without the flag trains on the CPU whatever the migration did, so ``cpu2gpu migrate`` gives the flag
to the run on the device (and says so) while the original and the CPU fallback keep the script's default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from ..analysis.classdefs import walk
from ..analysis.imports import dotted

# An option or variable name that asks for the GPU (not --no-cuda, which turns it off).
_ASKS_FOR_GPU = re.compile(r"^(?:use[_-]?)?(?:cuda|gpu)s?(?:[_-]?(?:enabled|on))?$", re.I)


@dataclass(frozen=True)
class DeviceFlag:
    """How to ask the script for the GPU: command-line arguments, or an environment variable."""

    args: tuple = ()  # ("--cuda",)
    env: tuple = ()  # (("USE_CUDA", "1"),)

    def shown(self) -> str:
        return " ".join(self.args) or " ".join(f"{k}={v}" for k, v in self.env)


def opt_in_flag(data: bytes) -> Optional[DeviceFlag]:
    """The script's opt-in GPU flag, if it has one that its code reads; else None."""
    if not re.search(rb"cuda|gpu", data, re.I):
        return None
    try:
        module = cst.parse_module(data)
    except cst.ParserSyntaxError:
        return None
    read = {node.attr.value for node in walk(module) if type(node) is cst.Attribute}
    for node in walk(module):
        if type(node) is not cst.Call:
            continue
        name = dotted(node.func) or ""
        if name.endswith("add_argument"):
            flag = _store_true_option(node)
            if flag is not None and flag.lstrip("-").replace("-", "_") in read:
                return DeviceFlag(args=(flag,))
        elif name in ("os.environ.get", "os.getenv", "environ.get", "getenv") and node.args:
            variable = node.args[0].value
            if type(variable) is cst.SimpleString and isinstance(variable.evaluated_value, str) \
                    and _ASKS_FOR_GPU.match(variable.evaluated_value):
                return DeviceFlag(env=((variable.evaluated_value, "1"),))
    return None


def _store_true_option(call: cst.Call) -> Optional[str]:
    """``add_argument("--cuda", action="store_true")`` (no default of True): ``--cuda``."""
    names = [a.value.evaluated_value for a in call.args if a.keyword is None and type(a.value) is cst.SimpleString]
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    action = keywords.get("action")
    if type(action) is not cst.SimpleString or action.evaluated_value != "store_true":
        return None
    default = keywords.get("default")
    if default is not None and not (type(default) is cst.Name and default.value == "False"):
        return None
    long_names = [n for n in names if isinstance(n, str) and n.startswith("--")]
    flag = long_names[0] if long_names else None
    return flag if flag is not None and _ASKS_FOR_GPU.match(flag.lstrip("-")) else None
