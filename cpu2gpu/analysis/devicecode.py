"""Device placements read as plain syntax: ``x.to(device)``, ``x.cuda()``, ``device=device``.

Shared by the analysis (a collate function that returns moved tensors) and by the rules that read
the code directly (CUDA work in a DataLoader's worker processes).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

# The device types a string can name that are not the CPU (as torch.device reads them).
ACCELERATOR_TYPES = ("cuda", "mps", "xpu", "hip")


def keyword_value(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    """The value of the keyword argument ``name`` of ``call``, if it is given."""
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def names_a_device(node: cst.BaseExpression) -> bool:
    """``device``, ``args.device``, ``x.device``, ``"cuda:0"``: an expression that is an accelerator."""
    if isinstance(node, cst.Name):
        return "device" in node.value.lower()
    if isinstance(node, cst.Attribute):
        return "device" in node.attr.value.lower()
    if isinstance(node, cst.SimpleString):
        try:
            text = node.evaluated_value
        except Exception:  # odd prefixes: not a device string
            return False
        return isinstance(text, str) and text.strip().lower().split(":", 1)[0] in ACCELERATOR_TYPES
    return False


def places_on_device(call: cst.Call) -> bool:
    """``x.cuda()``, ``x.to(device)`` / ``x.to("cuda")``, ``torch.zeros(3, device=device)``."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
        return True
    if isinstance(func, cst.Attribute) and func.attr.value == "to":
        target = keyword_value(call, "device") or (
            call.args[0].value if call.args and call.args[0].keyword is None else None)
        if target is not None and names_a_device(target):
            return True
    device = keyword_value(call, "device")
    return device is not None and names_a_device(device)
