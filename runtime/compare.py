"""Compare two loss trajectories: step by step, or by their trend.

Step by step only when both runs drew the same random numbers; a run that
drew from the device RNG (dropout on CUDA, torch.randn(device=...)) computes
different, equally right numbers, so only its trend can be held to the other.
"""

from __future__ import annotations

import math

# cpu and sim compute the same numbers with the same kernels: tight.
# A real GPU sums in other orders (TF32 off): looser.
RTOL = {"cpu": 1e-5, "sim": 1e-5, "cuda": 2e-2}
ATOL = 1e-8
TREND_TOL = 0.25


def _rel(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return 0.0 if a == b else math.inf
    d = abs(a - b)
    if d <= ATOL:
        return 0.0
    return d / max(abs(a), abs(b))


def step_by_step(ref: list, other: list, rtol: float) -> dict:
    n = min(len(ref), len(other))
    max_rel = 0.0
    first = None
    for i in range(n):
        r = _rel(ref[i], other[i])
        max_rel = max(max_rel, r)
        if first is None and r > rtol:
            first = {"step": i + 1, "reference": ref[i], "value": other[i], "rel_diff": r}
    return {"method": "step", "compared": n, "rtol": rtol, "max_rel_diff": max_rel,
            "first_divergence": first, "ok": first is None}


def _means(xs: list):
    k = max(1, len(xs) // 5)
    return sum(xs[:k]) / k, sum(xs[-k:]) / k


def trend(ref: list, other: list, tol: float = TREND_TOL) -> dict:
    """Same direction, and either the last fifth's mean within `tol` of the
    reference's (relative to the larger of its value and how far the reference
    moved), or the same progress: last/first within a factor of 2 of the
    reference's. Runs that draw other random numbers may start elsewhere
    (other initial weights) and still learn alike."""
    n = min(len(ref), len(other))
    out = {"method": "trend", "compared": n, "rtol": tol, "max_rel_diff": None, "first_divergence": None}
    if n == 0:
        out["ok"] = True
        return out
    rh, rt = _means(ref[:n])
    oh, ot = _means(other[:n])
    scale = max(abs(rt), abs(rh - rt), 1e-12)
    tail_diff = abs(ot - rt) / scale
    same_way = (rt < rh) == (ot < oh) or abs(rt - rh) <= 0.01 * abs(rh) + ATOL
    progress_alike = False
    if min(rh, rt, oh, ot) > 0:
        progress_alike = abs(math.log((ot / oh) / (rt / rh))) <= math.log(2)
    out.update({"reference_first": rh, "reference_last": rt, "first": oh, "last": ot,
                "tail_rel_diff": tail_diff,
                "ok": bool(same_way and (tail_diff <= tol or progress_alike))})
    if not out["ok"]:
        out["first_divergence"] = {"step": n, "reference": rt, "value": ot, "rel_diff": tail_diff}
    return out


def compare(ref: dict, other: dict, rtol: float | None = None) -> dict:
    """Compare the losses of two child results."""
    mode = other.get("mode", "cpu")
    if other.get("device_rng") or ref.get("device_rng"):
        res = trend(ref["losses"], other["losses"])
        res["note"] = ("the run draws from the device RNG (e.g. dropout on the device), so its random "
                       "numbers differ from the CPU's: compared by trend, not step by step")
    else:
        res = step_by_step(ref["losses"], other["losses"], rtol if rtol is not None else RTOL.get(mode, 1e-5))
        res["note"] = None
    res["lengths"] = [len(ref["losses"]), len(other["losses"])]
    return res
