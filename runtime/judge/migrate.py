"""``cpu2gpu migrate``: the static rewrite, then runs that find and repair what it left out.

Round 0 is ``rewrite`` of every project file the script reaches, in a draft copy of its folder (the
user's files are not touched until the end). Each later round runs the draft as ``verify`` does (the
original on the CPU, the draft on the device and on the CPU fallback, capped, stand-in data where
asked), takes the first located cause whose value it can follow to its binding (the loop header of a
batch, the factory or assignment of a tensor, the attribute set in ``__init__``, the module's
construction) and writes the move there with the static engine (cpu2gpu.migration). An edit that
breaks the CPU fallback is taken back. It ends when verify passes, when no cause is left that it can
repair, or after ``max_rounds``; the user's files are written only when the final verify passed.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from cpu2gpu.engine import SourceError, rewrite_data, select_rules
from cpu2gpu.migration import Evidence, repair, rule_fix
from cpu2gpu.migration.deviceflags import opt_in_flag
from cpu2gpu.notebooks.cells import rewrite_notebook
from cpu2gpu.notebooks.repairs import repair_cell
from cpu2gpu.project.projectset import Project, find_root, project_seeds
from cpu2gpu.analysis.seeds import NO_SEEDS
from cpu2gpu.rules import RUNTIME_REPAIRS
from cpu2gpu.rules.runtimeside import BINDING, CPU_MODULE, RULE_FIX, TRAINED_TENSORS

from ..speed import gpus
from ..child.notebookrun import CELL_SEP, is_notebook, program_file
from ..records import MigrateReport, Reason, Round, RunResult, StaticMiss, Unreached, VerifyReport
from .runner import choose_root, copy_tree
from .speedup import device_line_of, no_speed_rounds, speed_rounds
from .verify import OK, VerifyError, cpu_fallback_ok, cpu_run, device_run, verify

MAX_ROUNDS = 8
# What a run locates that an edit at the binding repairs (diagnose.subject's kinds), and the located causes
# that the rule's own fix repairs (in the file and at the line verify names): as each rule declares (its runtime side).
REPAIRABLE = tuple(code for code, how in RUNTIME_REPAIRS.items() if how.edit == BINDING)
RULE_FIXED = tuple(code for code, how in RUNTIME_REPAIRS.items() if how.edit == RULE_FIX)
# Exit codes: proven, not proven (verify still fails), a usage error, cannot be judged here.
EXIT_PROVEN, EXIT_UNPROVEN, EXIT_ERROR, EXIT_CANNOT_RUN = 0, 1, 2, 3
SAME_FAILURE = "the same failure remained"  # why an edit was taken back: it repaired nothing


@dataclass
class Draft:
    """The copy of the script's folder that the rounds edit, and the user's bytes of each file."""

    root: str  # the user's folder that was copied
    work: str  # the copy
    tmp: str
    cwd_in_draft: str = ""  # the user's working folder, in the copy
    originals: dict = field(default_factory=dict)  # user's path -> bytes as read at the start

    @classmethod
    def make(cls, script: str, cwd: str) -> "Draft":
        root = choose_root(script, cwd)
        tmp = tempfile.mkdtemp(prefix="cpu2gpu-migrate-")
        work = os.path.join(tmp, os.path.basename(root) or "root")
        copy_tree(root, work)
        return cls(root, work, tmp)

    def in_draft(self, user_path: str) -> str:
        return os.path.join(self.work, os.path.relpath(os.path.abspath(user_path), self.root))

    def in_user(self, draft_path: str) -> str:
        return os.path.join(self.root, os.path.relpath(draft_path, self.work))

    def read(self, user_path: str) -> bytes:
        with open(self.in_draft(user_path), "rb") as f:
            return f.read()

    def write(self, user_path: str, data: bytes) -> None:
        """Into the draft only: a new file, never through a link to the user's."""
        if user_path not in self.originals:
            with open(os.path.abspath(user_path), "rb") as f:
                self.originals[user_path] = f.read()
        target = self.in_draft(user_path)
        tmp = target + ".cpu2gpu-tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, target)

    def changed(self) -> dict:
        """user's path -> (original bytes, migrated bytes), for the files that differ."""
        out = {}
        for path, old in self.originals.items():
            new = self.read(path)
            if new != old:
                out[path] = (old, new)
        return out

    def remove(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def reached_files(script: str) -> list[str]:
    """The project files the script's imports reach, the script first (as the project reads them)."""
    path = Path(os.path.abspath(script))
    project = Project(find_root(path))
    seen: list[Path] = [path]
    queue = [path]
    while queue:
        for found in project.project_imports(queue.pop()):
            found = Path(os.path.abspath(found))
            if found not in seen and found.suffix == ".py":
                seen.append(found)
                queue.append(found)
    return [str(p) for p in seen]


def _seeds(files: list[str]) -> dict:
    """What each reached file learns from the others, all read as one project: the entry script's (a
    folder without a project marker is its own root, and a package below it would be another)."""
    scripts = [Path(f) for f in files if not is_notebook(f)]
    if not scripts:
        return {}
    try:
        found = Project(find_root(scripts[0])).seeds_for(scripts)
    except Exception:  # as ProjectSet.seeds: a bug in the project reading never costs the rewrite
        return project_seeds([str(p) for p in scripts])
    return {str(path): seeds for path, seeds in found.items()}


def static_round(draft: Draft, files: list[str], rules, unsafe_fixes: bool, device_expression) -> list[dict]:
    """Round 0: the rewrite of each reached file, read with the project around it (in the user's tree:
    the same bytes as the draft's at this point), written into the draft."""
    notes: list[dict] = []
    seeds = _seeds(files)
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        try:
            if is_notebook(path):
                new = rewrite_notebook(data, path, rules, unsafe_fixes, device_expression)
            else:
                new = rewrite_data(data, path, rules, unsafe_fixes, device_expression, seeds.get(path, NO_SEEDS))[1]
        except SourceError as error:
            notes.append({"file": path, "error": error.message})
            continue
        draft.originals[path] = data
        if new != data:
            draft.write(path, new)
            notes.append({"file": path, "changed": True})
    return notes


def cannot_run(report: VerifyReport) -> str | None:
    """Why no verdict about the migration can be reached here (the original fails, data is missing or
    cannot be downloaded, a package the script imports is not installed)."""
    original = next((r for r in report["runs"] if r["role"] == "original"), None)
    if report["verdict"] == "needs-data":
        needs = report.get("needs_data") or []
        what = needs[0]["path"] if needs else "a data file"
        return f"needs data: {what} (or run with --synthetic-data)"
    missing = next((r["cause"] for r in report["reasons"] if r.get("missing_package")), None)
    if missing:  # the environment's, whichever run met it first
        return missing
    limit = next((r["cause"] for r in report["reasons"] if r.get("sim_limit")), None)
    if limit:
        return limit
    idle = next((r["cause"] for r in report["reasons"] if r.get("idle_original")), None)
    if idle:  # the original ends well but trains nowhere here: nothing to prove, nothing to repair
        return idle
    if original is not None and original["status"] not in OK:
        reason = next((r["cause"] for r in report["reasons"] if r["run"] == original["label"]), original["status"])
        return f"the original does not run here: {reason}"
    return None


def evidence_of(report: Mapping[str, Any], draft: Draft, tried: set,
                script: str | None = None) -> list[tuple[Evidence, str, Reason]]:
    """The located causes of the device run, as (evidence, user's file, verify's reason), first first.
    ``script``: the entry script, where the optimizer of plain tensors that stayed on the CPU is built."""
    device = device_run(report)
    if device is None:
        return []
    out = []
    for reason in report["reasons"]:
        if reason["run"] != device["label"]:
            continue
        if reason.get("rule") in RULE_FIXED and reason.get("where") and reason["where"].get("file"):
            ev = Evidence(rule=reason["rule"], kind="rule", name="", line=reason["where"]["line"])
            user_file = _user_path(reason["where"]["file"], draft)
            if user_file is not None and (ev, user_file) not in tried:
                out.append((ev, user_file, reason))
            continue
        if reason.get("rule") not in REPAIRABLE:
            continue
        diagnosis = device.get("diagnosis") or {}
        subject = diagnosis.get("subject") if diagnosis.get("cause") == reason["cause"] else None
        located = RUNTIME_REPAIRS[reason["rule"]].located  # where the rule's value is found when none was located
        if subject is None and located == CPU_MODULE:
            subject = _cpu_module(device)
        if subject is None and located == TRAINED_TENSORS and script is not None and _trains_plain_tensors(device):
            subject = {"name": "", "kind": "trained", "line": 0, "file": script}
        if not subject or not (subject.get("name") or subject.get("kind") in _UNNAMED_KINDS):
            continue
        ev = Evidence(rule=reason["rule"], kind=subject["kind"], name=subject["name"], line=subject["line"],
                      func=subject.get("func", "<module>"), def_line=subject.get("def_line", 0),
                      batches=tuple(subject.get("batches") or subject.get("cpu_tensors") or ()), device_from=subject.get("device_from"),
                      owner_class=subject.get("owner_class"), expressions=tuple(subject.get("expressions") or ()),
                      grad=tuple(subject.get("grad") or ()), leaf=bool(subject.get("leaf")))
        user_file = _user_path(subject["file"], draft)
        if user_file is None:
            continue
        # the value named first, then the other CPU tensors of its frame (each once): tried when the edit for
        # the first left the same failure, or found no binding
        alternatives = [ev] + [dataclasses.replace(ev, name=other) for other in subject.get("cpu_tensors") or ()
                               if other != ev.name and ev.kind == "tensor"]
        out.extend((alt, user_file, reason) for alt in alternatives if (alt, user_file) not in tried)
    return out


# Located without a name: a host call's device tensors, an unbound item or attribute, an unbound conversion,
# the tensors an optimizer trains.
_UNNAMED_KINDS = ("numpy", "use", "conversion", "trained")


def _trains_plain_tensors(run: RunResult) -> bool:
    """No module in the run, and the optimizer's tensors on the CPU: the leaves were made there."""
    return not run.get("modules") and bool(run.get("trained_devices")) \
        and all(d == "cpu" for d in run["trained_devices"])


def _cpu_module(run: RunResult) -> dict | None:
    """The module trained on the CPU that the script called most, and where the script held it."""
    cpu = [m for m in run.get("modules", ()) if m.get("bound") and m["device_calls"] == 0 and m["cpu_calls"]]
    if not cpu:
        return None
    module = max(cpu, key=lambda m: m["cpu_calls"])
    return dict(module["bound"], kind="module")


def _cell_of(place: str) -> tuple[str, int]:
    """``/x/train.ipynb:cell 4`` -> (``/x/train.ipynb``, 4); a script, or a notebook as a whole: cell 0."""
    path = program_file(place)
    return path, int(place[len(path) + len(CELL_SEP):]) if path != place else 0


def _user_path(shown: str, draft: Draft) -> str | None:
    """The user's file for a path as verify shows it (relative to the draft's working folder)."""
    candidate = shown if os.path.isabs(shown) else os.path.join(draft.cwd_in_draft, shown)
    candidate = os.path.normpath(candidate)
    if candidate.startswith(draft.work + os.sep):
        return os.path.normpath(draft.in_user(candidate))
    if candidate.startswith(draft.root + os.sep):
        return candidate
    return None


def migrate(script: str, args=(), *, device: str = "auto", max_steps=None, synthetic_data=False, timeout=600.0,
            seed=0, rtol=None, max_rounds=MAX_ROUNDS, cwd=None, rules=None, unsafe_fixes=False,
            device_expression=None, progress=None, speed=False, gpu=None) -> MigrateReport:
    """Migrate ``script`` in a draft and prove it; return the whole story as data (nothing written).
    ``speed``: once proven, the speed edits (speedup.py), estimated for ``gpu`` (speed.gpus' names)."""
    if not os.path.isfile(script):
        raise VerifyError(f"no such file: {script}")
    if speed:
        try:
            gpus.named(gpu)
        except KeyError:
            raise VerifyError(f"unknown GPU {gpu!r}: one of " + ", ".join(g.name for g in gpus.GPUS.values())) from None
    if rules is None:
        rules = select_rules()
    cwd = os.path.abspath(cwd or os.getcwd())
    script = os.path.abspath(script)
    started = time.perf_counter()
    draft = Draft.make(script, cwd)
    draft.cwd_in_draft = draft.in_draft(cwd) if (cwd + os.sep).startswith(draft.root + os.sep) \
        else os.path.dirname(draft.in_draft(script))
    try:
        files = [f for f in reached_files(script) if f.startswith(draft.root + os.sep)]
        static = static_round(draft, files, rules, unsafe_fixes, device_expression)
        rounds: list[Round] = [{"round": 0, "what": "static rewrite",
                               "files": [os.path.relpath(n["file"], cwd) for n in static if n.get("changed")],
                               "errors": [f"{os.path.relpath(n['file'], cwd)}: {n['error']}"
                                          for n in static if n.get("error")]}]

        # a script that uses the GPU only when asked (--cuda, USE_CUDA=1): asked on the device run only
        flag = next((found for found in (opt_in_flag(draft.read(f)) for f in files[:1] if not is_notebook(f))
                     if found is not None and not set(found.args) & set(args)), None)

        def run_verify(reference=None, reference_band=None) -> VerifyReport:
            if progress:
                progress(f"round {len(rounds) - 1}: verify")
            out = verify(draft.in_draft(script), args, against=script, device=device, max_steps=max_steps,
                         seed=seed, timeout=timeout, jobs=1, rtol=rtol, cwd=draft.cwd_in_draft,
                         against_cwd=cwd, synthetic_data=synthetic_data, with_cpu=True, reference=reference,
                         reference_band=reference_band, root=draft.work, device_flag=flag,
                         speed=speed and not is_notebook(script), gpu=gpu)
            out["settings"]["script"] = f"{os.path.relpath(script, cwd)} (migrated)"
            out["settings"]["against"] = os.path.relpath(script, cwd)
            return out

        report = run_verify()
        reference = next((r for r in report["runs"] if r["role"] == "original"), None)
        tried: set = set()
        misses: list[StaticMiss] = []
        taken_back: list[Round] = []
        ending = ""
        while True:
            why_not = cannot_run(report)
            if why_not:
                ending = why_not
                break
            if report["verdict"] == "pass":
                ending = "verify passed"
                break
            if report["verdict"] == "unproven":  # it learns alike, but not over all the code: nothing to repair
                ending = "unproven: " + next(r["cause"] for r in report["reasons"] if r.get("unproven"))
                break
            if len(rounds) > max_rounds:
                ending = f"stopped after {max_rounds} rounds"
                break
            candidates = evidence_of(report, draft, tried, script)
            applied = None
            unrepaired = []  # located, but no edit applies: why the rounds end, in the user's words
            for ev, place, reason in candidates:
                tried.add((ev, place))
                user_file, cell = _cell_of(place)
                old = draft.read(user_file)
                in_cell = None
                if is_notebook(user_file):  # repaired in the notebook's program, written back into its cells
                    in_cell = repair_cell(old, user_file, ev, cell)
                    fixed = dataclasses.replace(in_cell.repair, data=in_cell.data) if in_cell is not None else None
                else:
                    fixed = rule_fix(old, user_file, ev.rule, ev.line) if ev.kind == "rule" else repair(old, ev)
                if fixed is None:
                    unrepaired.append(f"{reason['cause']} ({ev.rule}'s fix does not apply to this code)"
                                      if ev.kind == "rule" else f"{reason['cause']} (its binding was not found)")
                    continue
                applied = (ev, user_file, reason, old, fixed, (cell, in_cell) if in_cell is not None else None)
                break
            if applied is None:
                if unrepaired:
                    ending = f"the located cause has no edit that repairs it: {unrepaired[0]}"
                elif taken_back and taken_back[-1]["taken_back"].startswith(SAME_FAILURE):
                    ending = (f"the edits for the located cause were taken back, since each left the same "
                              f"failure: {taken_back[-1]['evidence']}")
                elif taken_back:
                    ending = (f"the edit for the located cause was taken back, since it changed the CPU "
                              f"fallback's run: {taken_back[-1]['evidence']}")
                else:
                    first = report["reasons"][0]["cause"] if report["reasons"] else report["verdict"]
                    ending = f"no located cause left that an edit at its binding repairs ({first})"
                break
            ev, user_file, reason, old, fixed, notebook = applied
            draft.write(user_file, fixed.data)
            shown = os.path.relpath(user_file, cwd)
            if notebook is not None:  # places in a notebook: cell and line, as check and verify give them
                met_cell, in_cell = notebook
                line, bound_at, met = in_cell.line, f"{shown}:cell {in_cell.cell}:{in_cell.line}", \
                    f"{shown}:cell {met_cell}:{ev.line}"
            else:
                line = original_line(draft.originals[user_file], old, fixed.line)
                bound_at, met = f"{shown}:{line}", f"{shown}:{original_line(draft.originals[user_file], old, ev.line)}"
            entry: Round = {"round": len(rounds), "evidence": reason["cause"], "rule": ev.rule, "name": ev.name,
                            "bound_at": bound_at, "kind": ev.kind, "met": met, "file": shown, "line": line,
                            "how": fixed.how, "edit": fixed.edit}
            if notebook is not None:
                entry["cell"] = notebook[1].cell
            rounds.append(entry)
            new_report = run_verify(reference, report.get("band"))
            if cpu_fallback_ok(report) and not cpu_fallback_ok(new_report):
                draft.write(user_file, old)  # the edit broke the CPU fallback: taken back
                entry["taken_back"] = _first_reason(new_report, "cpu")
                taken_back.append(entry)
                continue
            failure = _device_failure(new_report)
            if failure is not None and failure == _device_failure(report):
                # the same failure at the same place: the edit moved the wrong value; the next one is tried
                draft.write(user_file, old)
                entry["taken_back"] = f"{SAME_FAILURE}: {_first_reason(new_report, 'device')}"
                taken_back.append(entry)
                continue
            report = new_report
            misses.append({"rule": ev.rule, "file": shown, "line": line, "name": ev.name, "how": fixed.how,
                           **({"cell": entry["cell"]} if "cell" in entry else {})})
        proven = report["verdict"] == "pass" and not cannot_run(report)
        speed_story = None
        if speed and proven and not is_notebook(script):
            band = report.get("band")
            report, speed_story = _speed_rounds(draft, report, lambda: run_verify(reference, band), cwd, progress)
        elif speed:
            speed_story = no_speed_rounds(gpus.named(gpu).name, "no speed edit is tried in a notebook" if
                                          is_notebook(script) else "no speed edit is tried before the migration is proven")
        changed = draft.changed()
        out: MigrateReport = {
            "script": os.path.relpath(script, cwd), "proven": proven,
            "ending": ending + (f" (the device run with {flag.shown()}, the script's opt-in GPU flag)"
                                if flag is not None and proven else ""),
            "device_flag": flag.shown() if flag is not None else None,
            "cannot_run": cannot_run(report), "rounds": rounds, "taken_back": taken_back,
            "static_misses": misses, "verify": report, "unreached": _unreached(report),
            "changed": {p: new for p, (old, new) in changed.items()},
            "originals": {p: old for p, (old, new) in changed.items()},
            "seconds": time.perf_counter() - started,
        }
        if speed_story is not None:
            out["speed"] = speed_story
        return out
    finally:
        draft.remove()


def _speed_rounds(draft: Draft, report: VerifyReport, run_verify, cwd: str, progress):
    """migrate --speed's rounds on the proven draft (speedup.py)."""

    def original(user_path: str, now: bytes, line: int) -> int:
        first = draft.originals.get(user_path)
        return original_line(first, now, line) if first is not None else line

    def verify_again() -> VerifyReport:  # the original's run is the first round's, not run again
        if progress:
            progress("speed: verify")
        return run_verify()

    return speed_rounds(report, read=draft.read, write=draft.write,
                        user_path=lambda shown: _user_path(shown, draft),
                        shown=lambda path: os.path.relpath(path, cwd),
                        device_line=lambda path: device_line_of(draft.read(path)), run_verify=verify_again,
                        original_line=original)


def original_line(original: bytes, draft: bytes, line: int) -> int:
    """The user's line for a line of the draft (which the rounds have added lines to)."""
    a = original.decode("utf-8", errors="replace").splitlines()
    b = draft.decode("utf-8", errors="replace").splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if j1 < line <= j2:
            return i1 + min(line - j1, max(1, i2 - i1)) if tag != "insert" else i1 + 1
    return line


def _device_failure(report: VerifyReport) -> tuple | None:
    """The device run's first located failure (its cause, its place, and where the value it names is
    held: the same line of a forward() reached from another loop is another failure), None when it
    has none."""
    run = device_run(report)
    if run is None or run["status"] in OK:
        return None
    reason = next((r for r in report["reasons"] if r["run"] == run["label"]), None)
    if reason is None:
        return None
    subject = (run.get("diagnosis") or {}).get("subject") or {}
    return (reason["cause"], str(reason.get("where")), subject.get("file"), subject.get("line"), subject.get("name"))


def _first_reason(report: VerifyReport, mode: str) -> str:
    run = cpu_run(report) if mode == "cpu" else device_run(report)
    for r in report["reasons"]:
        if run is not None and r["run"] == run["label"]:
            return r["cause"]
    return run["status"] if run else "no run"


def _unreached(report: VerifyReport) -> list[Unreached]:
    """Where a capped run was stopped before the script's end: the code after that line never ran
    there, so nothing about it is proven."""
    out: list[Unreached] = []
    for run in report["runs"]:
        cap = run.get("cap") or {}
        if run["role"] != "migrated" or not cap.get("reached") or cap.get("ended") in (None, "end"):
            continue
        at = cap.get("stopped_at") or cap.get("at") or {}
        out.append({"run": run["label"], "file": at.get("file"), "line": at.get("line"), "ended": cap["ended"]})
    return out
