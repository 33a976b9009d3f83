"""Compare two loss trajectories: step by step, or by their trend.

Step by step only when both runs drew the same random numbers; a run that
drew from the device RNG (dropout on CUDA, torch.randn(device=...)) computes
different, equally right numbers, so only its trend can be held to the other.
"""

from __future__ import annotations

import math

from ..records import Batching, Comparison, Divergence, RunResult

# cpu and sim compute the same numbers with the same kernels, nearly all in the
# same order (the simulated fused RNN cells are not): tight. A real GPU sums in
# other orders (TF32 off): looser.
RTOL = {"cpu": 1e-5, "sim": 1e-5, "sim-mps": 1e-5, "cuda": 2e-2, "mps": 2e-2, "xpu": 2e-2}
# Two losses agree when |a - b| <= atol + rtol * max(|a|, |b|), as numpy.isclose,
# with atol = rtol * the reference's mean |loss| (at least ATOL). Rounding noise
# is relative to the magnitudes the loss is computed from, not to the loss
# itself: a loss that fell from 1 to 1e-4 carries noise on the scale of 1e-5 of
# the early losses, which rtol alone calls a divergence.
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


def loss_scale(losses: list) -> float:
    """The mean magnitude of a run's finite losses (0 when there is none)."""
    finite = [abs(x) for x in losses if math.isfinite(x)]
    return sum(finite) / len(finite) if finite else 0.0


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


# A measured band (two CPU runs of the original, one perturbed by an ulp: band.py) is widened by this
# factor: the device sums in another order at every op of every step, the perturbed run only once.
BAND_FACTOR = 10.0


def step_by_step(ref: list, other: list, rtol: float, atol: float | None = None,
                 band: list | None = None) -> Comparison:
    """Step by step, numpy.isclose-style; atol defaults to rtol times the reference's loss scale.

    The tolerance grows with the step: at step k it is k times rtol (and atol). Two runs that sum in
    another order (the simulated RNN kernels, a GPU's reductions) start a rounding apart, and
    training carries that difference on, step after step; a placement bug parts them by far more.
    With a measured `band` (the relative divergence of two CPU runs of the original, step by step),
    the tolerance at step k is at least BAND_FACTOR times the band's largest value up to k: the
    original's own sensitivity to rounding, which a fixed constant cannot know.
    """
    n = min(len(ref), len(other))
    scale = loss_scale(ref[:n])
    if atol is None:
        atol = max(ATOL, rtol * scale)
    max_rel = 0.0
    first: Divergence | None = None
    grown = False  # some step was within the grown tolerance only
    widest = 0.0  # the band's largest value so far
    by_band = False  # some step was within the measured band only
    for i in range(n):
        r = _rel(ref[i], other[i])
        max_rel = max(max_rel, r)
        k = i + 1
        tol, tol_abs = rtol * k, atol * k
        if band and i < len(band) and math.isfinite(band[i]):
            widest = max(widest, band[i])
        if BAND_FACTOR * widest > tol:
            tol, tol_abs = BAND_FACTOR * widest, max(tol_abs, BAND_FACTOR * widest * scale)
        if first is None and not _close(ref[i], other[i], tol, tol_abs):
            first = {"step": k, "reference": ref[i], "value": other[i], "rel_diff": r,
                     "abs_diff": abs(ref[i] - other[i]), "tolerance": tol}
        elif not _close(ref[i], other[i], rtol, atol):
            grown = True
            by_band = by_band or not _close(ref[i], other[i], rtol * k, atol * k)
    out: Comparison = {"method": "step", "compared": n, "rtol": rtol, "atol": atol, "max_rel_diff": max_rel,
           "first_divergence": first, "ok": first is None, "tolerance_grew": grown}
    if band is not None:
        out["band"] = {"max": widest, "factor": BAND_FACTOR, "used": by_band}
    return out


def _means(xs: list):
    k = max(1, len(xs) // 5)
    return sum(xs[:k]) / k, sum(xs[-k:]) / k


def trend(ref: list, other: list, tol: float = TREND_TOL) -> Comparison:
    """Same direction, and either the last fifth's mean within `tol` of the
    reference's (relative to the larger of its value and how far the reference
    moved), or the same progress: last/first within a factor of 2 of the
    reference's. Runs that draw other random numbers may start elsewhere
    (other initial weights) and still learn alike."""
    n = min(len(ref), len(other))
    out: Comparison = {"method": "trend", "compared": n, "rtol": tol, "max_rel_diff": None, "first_divergence": None}
    if n == 0:
        out["ok"] = True
        return out
    rh, rt = _means(ref[:n])
    oh, ot = _means(other[:n])
    scale = max(abs(rt), abs(rh - rt), 1e-12)
    tail_diff = abs(ot - rt) / scale
    same_way = (rt < rh) == (ot < oh) or abs(rt - rh) <= 0.01 * abs(rh) + ATOL
    # A reference that hardly moved (a few capped steps of a noisy loss) has no direction to keep:
    # ending where it ends is the agreement then. Where the other run drew another problem (targets,
    # data drawn on the device) it ends elsewhere: then only a run that rises shows a divergence.
    flat_reference = abs(rt - rh) <= tol * max(abs(rh), 1e-12)
    barely_moved = flat_reference and tail_diff <= tol
    does_not_rise = flat_reference and ot <= oh + tol * max(abs(oh), 1e-12)
    same_way = same_way or barely_moved
    progress_alike = False
    if min(rh, rt, oh, ot) > 0:
        progress_alike = abs(math.log((ot / oh) / (rt / rh))) <= math.log(2)
    held = same_way and (tail_diff <= tol or progress_alike)
    out.update({"reference_first": rh, "reference_last": rt, "first": oh, "last": ot,
                "tail_rel_diff": tail_diff, "ok": bool(held or does_not_rise),
                "reference_flat": bool(flat_reference and not held)})
    if not out["ok"]:
        out["first_divergence"] = {"step": n, "reference": rt, "value": ot, "rel_diff": tail_diff}
    return out


_BATCHING = ("sampler", "batch_size", "drop_last", "batch_sampler")


def batching_differs(ref: RunResult, other: RunResult) -> Batching | None:
    """The first DataLoader that the two runs made differently (the script shuffles, or batches, by the
    device it found), as {file, line, what, reference, value}; None when they batch alike."""
    for a, b in zip(ref.get("loaders") or (), other.get("loaders") or ()):
        for key in _BATCHING:
            if a.get(key) != b.get(key):
                return {"file": b["file"], "line": b["line"], "what": key, "reference": a.get(key),
                        "value": b.get(key)}
    return None


# The paired test over the steps: the device's own random numbers make the step-wise differences
# scatter around zero when the runs learn alike; a placement bug shifts them one way.
MIN_PAIRED_STEPS = 8
PAIRED_T = 3.0
REAL_DEVICES = ("cuda", "mps", "xpu")


def paired(ref: list, other: list) -> Comparison:
    """The trend, and, over MIN_PAIRED_STEPS or more steps, a paired t test of the step-wise differences:
    a mean difference further than PAIRED_T standard errors from zero (and more than TREND_TOL of the
    loss scale) is a divergence that the trend alone may miss."""
    res = trend(ref, other)
    n = res["compared"]
    res["method"] = "paired"
    if n < MIN_PAIRED_STEPS:
        res["paired"] = None
        return res
    diffs = [b - a for a, b in zip(ref[:n], other[:n]) if math.isfinite(a) and math.isfinite(b)]
    mean = sum(diffs) / len(diffs) if diffs else 0.0
    var = sum((d - mean) ** 2 for d in diffs) / max(1, len(diffs) - 1)
    stderr = math.sqrt(var / len(diffs)) if diffs else 0.0
    t = mean / stderr if stderr > 0 else (0.0 if mean == 0 else math.inf)
    shifted = abs(t) > PAIRED_T and abs(mean) > TREND_TOL * max(loss_scale(ref[:n]), ATOL)
    res["paired"] = {"steps": len(diffs), "mean_diff": mean, "t": t, "limit": PAIRED_T}
    if shifted and res["ok"]:
        res["ok"] = False
        res["first_divergence"] = {"step": n, "reference": res["reference_last"], "value": res["last"],
                                   "rel_diff": res["tail_rel_diff"]}
    return res


def compare(ref: RunResult, other: RunResult, rtol: float | None = None, band: list | None = None) -> Comparison:
    """Compare the losses of two child results; `band`: the original's measured sensitivity to rounding
    (band.py), per step, or None."""
    mode = other.get("mode", "cpu")
    if other.get("device_rng") or ref.get("device_rng"):
        if mode in REAL_DEVICES:
            res = paired(ref["losses"], other["losses"])
            res["note"] = ("the run draws from the device RNG (e.g. dropout on the GPU), so its random numbers "
                           "differ from the CPU's: compared by trend and by a paired test of the step-wise "
                           "differences" + ("" if res["paired"] else
                                            f" once there are {MIN_PAIRED_STEPS} steps or more (--max-steps)"))
        else:
            res = trend(ref["losses"], other["losses"])
            res["note"] = ("the run draws from the device RNG (e.g. dropout on the device), so its random "
                           "numbers differ from the CPU's: compared by trend, not step by step")
    elif (batching := batching_differs(ref, other)) is not None:
        res = trend(ref["losses"], other["losses"])
        res["note"] = (f"the script makes its DataLoader at {batching['file']}:{batching['line']} otherwise on the "
                       f"device ({batching['what']} {batching['value']} against {batching['reference']}): other "
                       f"batches, compared by trend, not step by step")
        res["batching"] = batching
    else:
        res = step_by_step(ref["losses"], other["losses"], rtol if rtol is not None else RTOL.get(mode, 1e-5),
                           band=band if rtol is None else None)
        res["note"] = None
        if other.get("mirrored_draws"):
            res["mirrored_draws"] = other["mirrored_draws"]
            res["note"] = (f"its {other['mirrored_draws']} random draws on the simulated device were mirrored from "
                           f"the CPU generator, as the original drew them: compared step by step")
    res["lengths"] = [len(ref["losses"]), len(other["losses"])]
    return res
