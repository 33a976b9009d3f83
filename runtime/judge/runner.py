"""Parent side: give each run its own copy of the script's folder, spawn the
child, stop it at the timeout, and collect its result.

Imports nothing heavy: torch lives in the child.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ..records import RunResult, Where
from ..sandbox import folderstate, isolation, proctree, reaper
from ..tracing import progress
from ..sandbox.environment import child_environment

# Folders a script does not read and that can be large.
SKIP_DIRS = {
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", "node_modules", ".tox", ".nox",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", ".cpu2gpu_cache",
}
LINK_OVER_BYTES = 16 * 1024 * 1024  # larger files are linked, not copied
COPY_BUDGET_BYTES = 256 * 1024 * 1024  # past this, every file is linked
COPY_BUDGET_FILES = 5000
TAIL_CHARS = 4000
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
STOP_GRACE_S = 10.0  # after the timeout's SIGTERM, for the child to say where the script was


@dataclass
class RunSpec:
    label: str  # "original (cpu)", "migrated (sim)"
    role: str  # "original" | "migrated" | "band" (the original again, perturbed: band.py)
    script: str  # as the user gave it
    mode: str  # cpu | sim | cuda
    args: list = field(default_factory=list)
    nproc: int = 0  # ranks under torchrun (verify --nproc, judge/distributed.py); 0: one process
    cwd: str | None = None  # the working directory it runs from, when not the verification's (migrate's draft)
    perturbed: bool = False  # the original's second run, the last bit of every op's result perturbed (band.py)
    root: str | None = None  # the folder copied for the run, when not chosen from script and cwd (migrate's draft)
    env: dict = field(default_factory=dict)  # variables set for this run only (a script's opt-in GPU variable)
    speed: bool = False  # count what keeps the GPU idle, per step (verify --speed; a device run)


# What marks a project's root (as cpu2gpu.project reads it, without importing the analysis here).
ROOT_MARKERS = ("pyproject.toml", "setup.py", ".git")
ROOT_LEVELS_UP = 3  # how far above the working folder a project root is looked for


def choose_root(script: str, cwd: str) -> str:
    """The folder to copy: the working directory when the script lies inside
    it (the script may read files relative to it), else the script's folder;
    widened to the project's root (a repository's) above it, when there is a small one:
    a script run from ``pygcn/`` reads ``../data`` and imports its package from the root."""
    script_dir = os.path.dirname(os.path.abspath(script))
    cwd = os.path.abspath(cwd)
    home = os.path.expanduser("~")
    inside = script_dir == cwd or script_dir.startswith(cwd.rstrip(os.sep) + os.sep)
    base = cwd if inside and cwd not in (os.sep, home) else script_dir
    return _project_above(base, home) or base


def _project_above(folder: str, home: str) -> str | None:
    """The nearest marked project root above ``folder`` (a few levels at most), if small enough to copy."""
    if _marked(folder):
        return None  # the folder is a project of its own
    current = folder
    for _ in range(ROOT_LEVELS_UP):
        parent = os.path.dirname(current)
        if parent == current or parent in (os.sep, home):
            return None
        current = parent
        if _marked(current):
            return current if _few_files(current) else None
    return None


def _marked(folder: str) -> bool:
    return any(os.path.lexists(os.path.join(folder, marker)) for marker in ROOT_MARKERS)


def _few_files(root: str) -> bool:
    """At most COPY_BUDGET_FILES files below ``root`` (the folders nobody reads skipped)."""
    count = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        count += len(filenames)
        if count > COPY_BUDGET_FILES:
            return False
    return True


def clone_file(src: str, dst: str) -> bool:
    """A copy-on-write clone (reflink) of ``src`` at ``dst``, where the file system has them:
    instant, no extra space, and a write to it never reaches ``src``."""
    try:
        with open(src, "rb") as s, open(dst, "wb") as d:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
    except OSError:
        try:
            os.unlink(dst)
        except OSError:
            pass
        return False
    shutil.copystat(src, dst)
    return True


def copy_tree(src: str, dst: str) -> list:
    """Copy `src` to `dst`, cloning files where the file system can; large files (and all files
    past the budget) that cannot be cloned become links, which the child never writes through
    (``sandbox``). Returns the linked originals with their size and mtime, to compare after."""
    copied_bytes = copied_files = 0
    linked = []
    can_clone = True
    inside = os.path.realpath(dst)
    for dirpath, dirnames, filenames in os.walk(src):
        if reaper.stopping():  # Ctrl-C: do not copy on (nor recreate a folder already removed)
            raise reaper.Stopped("verify is being stopped")
        dirnames[:] = [
            d for d in dirnames
            if d not in SKIP_DIRS and not os.path.exists(os.path.join(dirpath, d, "pyvenv.cfg"))
            # the copy itself, when it lies inside the folder copied (a script run from /tmp)
            and not (inside + os.sep).startswith(os.path.realpath(os.path.join(dirpath, d)) + os.sep)
        ]
        rel = os.path.relpath(dirpath, src)
        target_dir = os.path.join(dst, rel) if rel != "." else dst
        os.makedirs(target_dir, exist_ok=True)
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                os.symlink(os.path.realpath(os.path.join(dirpath, d)), os.path.join(target_dir, d))
                dirnames.remove(d)
        for name in filenames:
            s = os.path.join(dirpath, name)
            t = os.path.join(target_dir, name)
            try:
                if os.path.islink(s):
                    os.symlink(os.path.realpath(s), t)
                    continue
                info = os.stat(s)
                if not stat.S_ISREG(info.st_mode):
                    continue  # a FIFO or a device: reading it could block the copy
                size = info.st_size
                over_budget = copied_bytes + size > COPY_BUDGET_BYTES or copied_files >= COPY_BUDGET_FILES
                if size > LINK_OVER_BYTES or over_budget:
                    if can_clone and clone_file(s, t):
                        continue
                    can_clone = False  # one refusal says it for the whole file system
                    os.symlink(s, t)
                    linked.append((s, info.st_size, info.st_mtime_ns))
                else:
                    shutil.copy2(s, t)
                    copied_bytes += size
                    copied_files += 1
            except OSError:
                continue  # unreadable or vanished: the script would not get it either
    return linked


def changed_originals(linked: list) -> list:
    """The linked originals whose size or mtime moved during the run."""
    changed = []
    for path, size, mtime_ns in linked:
        try:
            info = os.stat(path)
        except OSError:
            changed.append(path)
            continue
        if (info.st_size, info.st_mtime_ns) != (size, mtime_ns):
            changed.append(path)
    return changed


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_CHARS))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def failed_result(spec: RunSpec, status: str, message: str) -> RunResult:
    return {
        "mode": spec.mode, "status": status, "exit_code": None, "losses": [], "steps": 0,
        "backward_calls": 0, "step_times": [], "device_forward_calls": 0, "cpu_forward_calls": 0,
        "modules": [], "events": [], "device_rng": False, "diagnosis": None,
        "exception": {"type": status, "message": message, "file": None, "line": None, "source": None,
                      "traceback": ""},
    }


@dataclass
class Sandbox:
    """One run's copy of the script's folder, and the files its child writes beside it."""

    cwd: str  # the user's
    root: str  # the folder copied
    tmp: str
    work: str  # the copy
    linked: list  # files linked, not copied (checked after the run)
    script: str  # the script in the copy
    run_cwd: str
    result: str
    stdout: str
    stderr: str
    progress: str
    token: str = ""  # marks the environment of every process of the run (reaper)
    keep: bool = False
    before: dict = field(default_factory=dict)  # the user's folder before the run (folderstate)

    @classmethod
    def make(cls, script: str, cwd, prefix: str, root: str | None = None, keep: bool = False) -> "Sandbox":
        """``root``: the folder to copy, when the caller knows it (migrate's draft); else chosen."""
        cwd = os.path.abspath(cwd or os.getcwd())
        script = os.path.abspath(script)
        root = root or choose_root(script, cwd)
        tmp = tempfile.mkdtemp(prefix=prefix)
        token = uuid.uuid4().hex
        try:
            reaper.enter(tmp, token, keep)
            work = os.path.join(tmp, "work", os.path.basename(root) or "root")
            before = folderstate.snapshot(root, SKIP_DIRS, tmp)
            linked = copy_tree(root, work)
            os.makedirs(os.path.join(tmp, "tmp"))  # the run's TMPDIR: the only temporary folder it may write
            with open(os.path.join(tmp, "run.json"), "w") as f:
                # the user's folder, for the child's own use (shown paths, the sandbox): not on its command line
                json.dump({"orig_root": root, "display_base": cwd, "private": tmp,
                           "isolation": os.environ.get(isolation.CHOICE_VARIABLE, "auto")}, f)
        except BaseException:
            reaper.leave(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        run_script = os.path.join(work, os.path.relpath(script, root))
        in_root = cwd == root or cwd.startswith(root + os.sep)
        run_cwd = os.path.join(work, os.path.relpath(cwd, root)) if in_root else os.path.dirname(run_script)
        return cls(cwd, root, tmp, work, linked, run_script, run_cwd, os.path.join(tmp, "result.json"),
                   os.path.join(tmp, "stdout.txt"), os.path.join(tmp, "stderr.txt"), os.path.join(tmp, "progress.jsonl"),
                   token, keep, before)

    def child_args(self, spec: RunSpec, seed: int, max_steps, synthetic_data: bool, progress: bool) -> list:
        """The instrumented child's arguments, up to and with the script and its own arguments."""
        args = ["--mode", spec.mode, "--result", self.result, "--seed", str(seed), "--workdir", self.work,
                "--run-file", os.path.join(self.tmp, "run.json")]
        if max_steps is not None:
            args += ["--max-steps", str(max_steps)]
        if synthetic_data:
            args.append("--synthetic-data")
        if spec.perturbed:
            args.append("--perturb-last-bit")
        if spec.speed:
            args.append("--speed")
        if progress:
            args += ["--progress", self.progress]
        return args + ["--", self.script, *spec.args]

    def child_env(self, spec: RunSpec, clean_env: bool, env_allow) -> dict:
        env = child_environment(os.environ, clean_env, env_allow, home=os.path.join(self.tmp, "home"))
        env.setdefault("PYTHONHASHSEED", "0")  # same set/dict orders in every run
        env["PYTHONUNBUFFERED"] = "1"
        if spec.mode == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # the fallback: no GPU to be seen
        env.update(spec.env)
        for name in ("TMPDIR", "TMP", "TEMP"):  # the one temporary folder the sandbox lets it write
            env[name] = os.path.join(self.tmp, "tmp")
        env[reaper.MARKER_NAME] = self.token
        return env

    def spawn(self, cmd: list, env: dict, out, err) -> subprocess.Popen:
        """The run's child, in its own session; none once verify is being stopped."""
        return reaper.spawn(self.tmp, lambda: subprocess.Popen(
            cmd, cwd=self.run_cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True))

    def end(self, proc: subprocess.Popen | None) -> None:
        """Nothing of the run lives on: its child's family, and whatever carries its marker."""
        alive = proc is not None and proc.poll() is None  # a pid already waited for may be another's now
        reaper.end_run(proc.pid if alive and proc is not None else None, reaper.marker(self.token))
        if proc is not None:
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass

    def discard(self) -> None:
        """The run did not get to finish (an exception, verify stopped): its folder goes."""
        reaper.leave(self.tmp)
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def run_child(self, cmd: list, env: dict, timeout: float, on_progress, progress_path: str,
                  stop: Callable[[subprocess.Popen], None]) -> tuple[subprocess.Popen, bool, float]:
        """Start the child and wait for it (following its progress lines where asked); at the timeout
        ``stop`` it. However it ends, nothing of it lives on (an exception also removes the run's
        folder). The process, whether it timed out, and the wall time."""
        t0 = time.perf_counter()
        timed_out = False
        proc = None
        try:
            with open(self.stdout, "wb") as out, open(self.stderr, "wb") as err:
                proc = self.spawn(cmd, env, out, err)
                try:
                    if on_progress is None:
                        proc.wait(timeout=timeout)
                    else:
                        progress.follow(proc, progress_path, timeout, on_progress)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    stop(proc)
        except BaseException:
            self.end(proc)
            self.discard()
            raise
        self.end(proc)  # the keeper ended what the run left; this ends what escaped it
        return proc, timed_out, time.perf_counter() - t0

    def _refused_writes(self, result: RunResult) -> list:
        """The writes refused during the run: by the audit hook (in the result) and by the write watch
        (the keeper's record files, one per rank)."""
        found = list(result.get("refused_writes") or [])
        for path in sorted(glob.glob(glob.escape(self.result) + "*.writes")):
            try:
                with open(path) as f:
                    found += [json.loads(line) for line in f if line.strip()]
            except (OSError, ValueError):
                continue
        return found

    def _shown(self, path: str) -> str:
        rel = os.path.relpath(path, self.cwd)
        return path if rel.startswith("..") else rel

    def finish(self, result: RunResult, proc: subprocess.Popen, wall: float, show_output: bool, keep: bool,
               title: str) -> RunResult:
        """What every run's result carries: a write it tried outside its copy, or a change of the user's
        folder (a fail), the output tails, the wall time; the copy removed unless kept."""
        refused = self._refused_writes(result)
        elsewhere = [r for r in refused if r.get("place") == "elsewhere"]
        if elsewhere:  # refused by the kernel, outside the user's folder: told, not judged
            result["refused_elsewhere"] = elsewhere
        tried = [r for r in refused if r.get("place") == "original"]
        confined = (result.get("isolation") or {}).get("kind") == isolation.LANDLOCK
        # Under Landlock the run could not write the user's folder, nor through the copy's links to it:
        # a change found there is another program's (a shared folder, /tmp), told by the refusals above.
        touched = [] if confined else changed_originals(self.linked)
        if not confined:  # nothing held the run but Python's hook: compare the whole folder
            touched = sorted(set(touched) | {os.path.join(self.root, p) for p in
                                             folderstate.changes(self.before, self.root, SKIP_DIRS, self.tmp)})
        causes = []
        if tried:
            result["refused_writes"] = tried
            paths = list(dict.fromkeys(self._shown(r["path"]) for r in tried))
            by = " and ".join(sorted({r.get("by", "") for r in tried}))
            causes.append(f"the script tried to write outside its copy, into the original folder (refused by the "
                          f"{by}): " + ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else ""))
        if touched:  # a writer nothing refused (native code, another program, without Landlock)
            causes.append("the run changed the original folder (found after the run; nothing refused it): "
                          + ", ".join(self._shown(p) for p in touched))
        if causes:  # fail loudly, never pass
            cause = "; ".join(causes)
            exc = result.get("exception")
            if not exc or result.get("status") in ("ok", "max_steps"):  # else the script's error (the refusal?)
                result["exception"] = {"type": "WroteOutsideCopy" if tried else "WroteOriginals", "file": None,
                                       "line": None, "source": None, "traceback": "", "message": cause}
            where: Where | None = ({"file": exc.get("file"), "line": exc.get("line")} if exc and exc.get("file")
                                   else None)
            result["status"] = "wrote-originals"
            result["diagnosis"] = {"cause": cause, "rule": None, "rule_name": None, "where": where}
        result["wall_seconds"] = wall
        result["returncode"] = proc.returncode
        result["stdout_tail"] = _tail(self.stdout)
        result["stderr_tail"] = _tail(self.stderr)
        if show_output:
            sys.stderr.write(f"--- output of {title} ---\n{result['stdout_tail']}{result['stderr_tail']}")
        if keep:
            result["workdir"] = self.tmp
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        reaper.leave(self.tmp)
        return result


def run(spec: RunSpec, *, max_steps=None, seed=0, timeout=600.0, cwd=None, keep=False,
        show_output=False, threads=None, synthetic_data=False, clean_env=False, env_allow=(),
        on_progress=None) -> RunResult:
    """Run one script in a fresh child process; return its result dict.
    on_progress(line) gets the child's progress lines ({"steps", "loss"}) while it runs."""
    box = Sandbox.make(spec.script, cwd, "cpu2gpu-verify-", spec.root, keep)
    cmd = [sys.executable, "-m", "cpu2gpu.runtime",
           *box.child_args(spec, seed, max_steps, synthetic_data, on_progress is not None)]
    env = box.child_env(spec, clean_env, env_allow)
    if threads:
        # Runs side by side share the cores; every run of one verification
        # gets the same count, so that they compute the same sums.
        env.setdefault("OMP_NUM_THREADS", str(threads))

    proc, timed_out, wall = box.run_child(cmd, env, timeout, on_progress, box.progress, _stop)

    result: RunResult | None = None
    if os.path.exists(box.result):
        with open(box.result) as f:
            result = json.load(f)
    if timed_out:
        where: Where | None = None
        if result and (exc := result.get("exception")):
            where = {"file": exc.get("file"), "line": exc.get("line")}
        result = result or failed_result(spec, "timeout", "")
        result["status"] = "timeout"
        at = f" at {where['file']}:{where['line']}" if where and where.get("file") else ""
        result["exception"] = {**(result.get("exception") or {}), "type": "Timeout",
                               "message": f"stopped after {timeout:g} s{at}"}
        result["diagnosis"] = {"cause": f"the script did not finish within {timeout:g} s and was stopped{at}",
                               "rule": None, "rule_name": None, "where": where}
    elif result is None:
        result = failed_result(spec, "crashed", f"the child exited with code {proc.returncode} "
                                                 f"without a result")
    return box.finish(result, proc, wall, show_output, keep, spec.label)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM first (the keeper passes it on), so that the child reports where the script hung; then
    the whole family is killed."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_GRACE_S)
    except (subprocess.TimeoutExpired, OSError):
        pass
    if proc.poll() is None:  # still there after the grace: the whole family goes
        proctree.kill_family(proc.pid)
        proc.wait()
