"""migrate --speed: once the migration is proven, the edits that remove what keeps the GPU idle, each kept
only where verify proves it keeps the losses.

Each round takes the causes verify --speed ranked in the last proven report, in their order, and the
first one that has an edit (cpu2gpu.migration.speededits) not tried yet is made in the draft. A cause that
explains under 1% of the estimated step gets none: it would be a change for a share of the step that this
machine's load moves by as much. The draft is
verified again, with --speed: the edit stays where the run still passes, the device run's losses are the
same as before any speed edit (equal, float for float: these edits change where and when work is done,
not the arithmetic), the CPU fallback still runs alike, and the cause is gone (or explains less than half
the time it did). Otherwise it is taken back and its next form, if it has one, is tried. What an edit saves is the estimate's, from the run before it (the cause's time:
the same step replayed without it), not the difference of two runs' host times, which this machine's
load moves by more than a small cause is worth. The rounds end when no cause has an edit left to try.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from cpu2gpu.migration import speededits
from cpu2gpu.migration.speededits import SpeedEdit

from .verify import cpu_fallback_ok, device_run
from ..records import SpeedCause, SpeedEditRecord, SpeedMigration, VerifyReport

MAX_SPEED_ROUNDS = 6
EDIT_SHARE = 0.01  # a cause is edited where it explains this share of the estimated step or more (cuDNN's: no time)
MAX_MOVED_ONCE = 2e9  # a tensor copied in slices is moved whole only up to this size (the GPU holds the model too)


def _losses(report: Mapping) -> list[float] | None:
    run = device_run(report)
    return list(run["losses"]) if run is not None and run.get("losses") else None


def plan(cause: SpeedCause, read: Callable[[str], bytes], loaders: dict[int, int], device_line: int | None
         ) -> list[SpeedEdit] | str:
    """The edits for ``cause`` (in the order to try them), or why it has none. ``loaders``: the run's
    DataLoaders made in the cause's file, line -> num_workers."""
    path, line = cause["file"], cause["line"]
    if path is None or line is None:
        return "its line is not in the script's files"
    if cause["kind"] != "cudnn" and cause["share"] < EDIT_SHARE:
        return (f"it explains {cause['share']:.2%} of the estimated step, under {EDIT_SHARE:.0%}: not worth an edit "
                f"(a share this machine's load can make or unmake)")
    data = read(path)
    kind = cause["kind"]
    if kind == "loader":
        if loaders.get(line, 0) > 0:
            return "its DataLoader already has workers: more work per item than they keep up with is the script's"
        return speededits.workers(data, line)
    if kind == "copy" and cause.get("copied") == "batch":
        return speededits.pinned(data, sorted(loaders), line)
    if kind == "made":
        return speededits.on_device(data, line)
    if kind == "sync":
        dtypes = cause.get("dtypes") or []
        if not dtypes:
            return "not a value read back with .item() at this line"
        return speededits.sum_on_device(data, line, floating=all(d.startswith(("float", "bfloat")) for d in dtypes))
    if kind == "cudnn":
        if device_line is None:
            return "no device line found in the script's file"
        return speededits.cudnn_benchmark(data, device_line)
    if kind == "copy":
        if cause.get("source_bytes", 0) > MAX_MOVED_ONCE:
            return (f"the whole tensor is {cause['source_bytes'] / 1e9:.1f} GB: kept on the host, where it may be "
                    f"the only place it fits")
        return speededits.move_once(data, line)
    return "no automatic edit: " + cause["fix"]


def _loaders_in(profile: Mapping, path: str, user_path: Callable[[str], str | None]) -> dict[int, int]:
    """The run's DataLoaders made in the user's file ``path``: line -> num_workers."""
    places = profile.get("places") or []
    return {places[loader["place"]]["line"]: loader["num_workers"] for loader in profile.get("loaders") or []
            if 0 <= loader["place"] < len(places) and user_path(places[loader["place"]]["file"]) == path}


def speed_rounds(report: VerifyReport, *, read: Callable[[str], bytes], write: Callable[[str, bytes], None],
                 user_path: Callable[[str], str | None], shown: Callable[[str], str],
                 device_line: Callable[[str], int | None], run_verify: Callable[[], VerifyReport],
                 original_line: Callable[[str, bytes, int], int]) -> tuple[VerifyReport, SpeedMigration]:
    """The speed rounds from the proven ``report`` (made with --speed); the last proven report and the story."""
    before = report.get("speed") or {}
    base_losses = _losses(report)
    kept: list[SpeedEditRecord] = []
    refused: list[SpeedEditRecord] = []
    tried: set = set()
    for _ in range(MAX_SPEED_ROUNDS):
        device = device_run(report)
        profile: Mapping = (device.get("speed") if device else None) or {}
        change = None
        for cause in (report.get("speed") or {}).get("causes") or []:
            path = user_path(cause["file"]) if cause["file"] else None
            # by the user's line: an edit that adds a line moves the draft's lines below it
            user_line = original_line(path, read(path), cause["line"]) if path and cause["line"] else None
            key = (cause["kind"], path, cause["line"] if user_line is None else user_line)
            if key in tried:
                continue
            tried.add(key)
            local = {**cause, "file": path}
            loaders = _loaders_in(profile, path, user_path) if path else {}
            outcome = plan(local, read, loaders, device_line(path) if path else None)  # type: ignore[arg-type]
            if isinstance(outcome, str):
                refused.append(_record(cause, None, path, shown, outcome, user_line))
                continue
            change = (cause, path, outcome)
            break
        if change is None:
            break
        cause, path, forms = change
        assert path is not None  # plan() gives no edit for a cause outside the files
        old = read(path)
        for form in forms:
            write(path, form.data)
            new = run_verify()
            why = _refusal(new, base_losses) or _still_there(cause, form, new)
            line = original_line(path, old, form.line)
            if why is None:
                kept.append(_record(cause, form, path, shown, None, line))
                report = new
                break
            write(path, old)
            refused.append(_record(cause, form, path, shown, why, line))
    after = report.get("speed") or {}
    return report, {"gpu": before.get("gpu") or after.get("gpu") or "", "before": before.get("estimate"),
                    "after": after.get("estimate"), "summary_before": before.get("summary", ""),
                    "summary_after": after.get("summary", ""), "edits": kept, "not_edited": refused,
                    "losses_same": len(base_losses or []), "note": ""}


def no_speed_rounds(gpu: str, why: str) -> SpeedMigration:
    """The story of a migrate --speed that made no speed round, and why."""
    return {"gpu": gpu, "before": None, "after": None, "summary_before": "", "summary_after": "", "edits": [],
            "not_edited": [], "losses_same": 0, "note": why}


def _refusal(new: Mapping, base_losses: Sequence[float] | None) -> str | None:
    """Why the edit that made ``new`` is taken back, or None."""
    losses = _losses(new)
    if losses and base_losses and losses != list(base_losses):
        at = next((i for i, (a, b) in enumerate(zip(losses, base_losses)) if a != b), min(len(losses), len(base_losses)))
        shown = (f": {base_losses[at]:.6g} before, {losses[at]:.6g} after" if at < min(len(losses), len(base_losses))
                 else f": {len(base_losses)} losses before, {len(losses)} after")
        return f"the losses changed (the device run's, first at step {at + 1}{shown})"
    if new["verdict"] != "pass":
        first = new["reasons"][0]["cause"] if new["reasons"] else new["verdict"]
        return f"verify no longer passes: {first}"
    if not cpu_fallback_ok(new):
        return "the CPU fallback no longer runs alike"
    if not losses or not base_losses:
        return "the device run recorded no losses to compare"
    return None


def _still_there(cause: SpeedCause, form: SpeedEdit, new: Mapping) -> str | None:
    """Why the edit did not remove its cause: the new run's causes still have one of its kind at the edited
    line, explaining half the time it did or more."""
    for other in (new.get("speed") or {}).get("causes") or []:
        if other["kind"] == cause["kind"] and other["source"] == form.edit and other["seconds"] >= cause["seconds"] / 2:
            return "the cause remained: the run after the edit still finds it at the edited line"
    return None


def _record(cause: SpeedCause, form: SpeedEdit | None, path: str | None, shown: Callable[[str], str],
            why: str | None, line: int | None) -> SpeedEditRecord:
    out: SpeedEditRecord = {"cause": cause["kind"], "what": cause["what"],
                            "file": shown(path) if path else None,
                            "line": line if line is not None else cause["line"], "seconds": cause["seconds"]}
    if form is not None:
        out["edit"] = form.edit
        out["how"] = form.how
        out["kind"] = form.kind
    if why is not None:
        out["why"] = why
    return out


def device_line_of(data: bytes) -> int | None:
    """The line that makes the file's device variable (``device = torch.device(...)``)."""
    for number, text in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        stripped = text.strip()
        if not text[:1].isspace() and "=" in stripped and "torch.device(" in stripped:
            return number
    return None
