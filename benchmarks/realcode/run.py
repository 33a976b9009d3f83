"""Run `cpu2gpu rewrite` + `cpu2gpu verify --device sim` over real single-file training scripts (manifest.json).

For each entry (a script or a notebook of a public repository at a commit):

1. materialise it under /tmp/cpu2gpu-realcode/<label>/<entry>/orig: the file, plus the small sibling
   files it imports (same folder: ``name.py`` or a package folder ``name/``); a ``stripped`` entry is the
   authors' file with its device code removed by ../realprojects/strip_device.py; a notebook is also
   converted to ``<stem>.py`` (code cells in order; IPython magics and ``!shell`` lines become ``pass``,
   cell magics other than %%time/%%timeit/%%capture drop the cell, ``display()`` is a no-op); a ``stripped``
   notebook is the authors' notebook with the device code of its code cells removed (``strip_notebook``);
   what a user who runs the file in a clone of its repository also has comes from extras.json (per entry:
   ``repo_files``, the repository's own files it reads or imports; ``pythonpath``, repository folders put
   on PYTHONPATH for the entry's runs);
2. the ORIGINAL runs on the CPU: ``cpu2gpu verify ORIG --device cpu --max-steps N --synthetic-data
   --output-format json`` (cached by the hash of the files, so that a run with another engine does not
   redo it). An import of a package that is not installed (and that verify has no stand-in for) is
   found without running it; a file Python 3 cannot compile likewise;
3. a copy is rewritten: ``cpu2gpu rewrite --in-place`` (a notebook: the .ipynb itself, then converted the
   same way), with the engine taken from ``--engine-rev`` (git archive of cpu2gpu/ and runtime/ under
   /tmp, as ../realprojects/measure.py does) or the working tree; for ``aware`` entries also ``cpu2gpu
   check`` on the authors' file (its CG1xx findings are false alarms: the file already runs on the GPU)
   and whether the rewrite left it byte for byte;
4. when the original ran: ``cpu2gpu verify MIGRATED --device sim --against ORIG --synthetic-data
   --max-steps N --output-format json`` (verify and its runtime always from the working tree).

Outcomes: pass; tool-crash; orig-missing-package / orig-needs-data / orig-error / orig-timeout (the
original is not runnable here); missed-move (a sim run fails on a device mismatch or trains on the CPU);
wrong-move (the rewritten script breaks in the sim run in a way the original did not);
broken-cpu-run (the rewritten script breaks on the CPU fallback); losses-differ (only the loss
comparison fails: read by hand, possibly a verify false alarm); needs-data (only the migrated runs
stopped on data); verify-error (anything else). ``notes`` is left for manual review.

    .venv/bin/python benchmarks/realcode/run.py --label blind --engine-rev 6b15060 -j 2
    .venv/bin/python benchmarks/realcode/run.py --label wip --only nlp-tutorial --limit 5
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures as cf
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import tokenize
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent / "realprojects"))
import measure  # noqa: E402  (engine_at, git_dir)
import strip_device as sd  # noqa: E402

CACHE = Path("/tmp/cpu2gpu-realcode")
measure.CACHE = CACHE  # engines extracted under /tmp/cpu2gpu-realcode/engine-<sha>
SITE = CACHE / "site"  # extra packages for the originals (matplotlib, pandas, scikit-learn, scipy, tqdm)
# verify: the working tree's, or $CPU2GPU_VERIFY (a cpu2gpu executable of a fixed revision: work in
# progress on the runtime then cannot change a measurement halfway through)
CPU2GPU = Path(os.environ.get("CPU2GPU_VERIFY") or ROOT / ".venv" / "bin" / "cpu2gpu")
STANDINS = {"torchvision", "torchaudio", "datasets"}  # verify --synthetic-data stands in for these
PRELUDE = ("try:\n    display\nexcept NameError:\n    def display(*args, **kwargs):\n        pass\n")
KEEP_CELL_MAGICS = {"time", "timeit", "capture"}
CLASSES = ["pass", "tool-crash", "orig-missing-package", "orig-needs-data", "orig-error", "orig-timeout",
           "orig-no-step", "missed-move", "wrong-move", "broken-cpu-run", "losses-differ", "needs-data", "verify-error"]
_lock = threading.Lock()
_trees: dict = {}


# ------------------------------------------------------------------ sources
def load_manifest() -> list[dict]:
    """manifest.json's entries with extras.json's fields merged in (``repo_files``, ``pythonpath``), plus a
    ``stripped`` entry (id + '#stripped') for each notebook that extras.json lists under ``stripped``."""
    entries = json.loads((HERE / "manifest.json").read_text())["entries"]
    xp = HERE / "extras.json"
    if not xp.exists():
        return entries
    extras = json.loads(xp.read_text())
    by_id = extras.get("entries", {})
    out = []
    for e in entries:
        x = by_id.get(e["id"], {})
        e = {**e, **{k: x[k] for k in ("repo_files", "pythonpath") if k in x}}
        out.append(e)
        if e["id"] in extras.get("stripped", []):
            out.append({**e, "id": e["id"] + "#stripped", "kind": "stripped"})
    return out


def repo_files(e: dict) -> dict[str, bytes]:
    """extras.json's ``repo_files`` of an entry (a file, or a folder: its files): repository path -> bytes."""
    t = tree(e["repository"], e["commit"])
    out = {}
    for want in e.get("repo_files", []):
        for p in sorted(p for p in t if p == want or p.startswith(want.rstrip("/") + "/")):
            out[p] = show(e["repository"], e["commit"], p)
    return out


def entry_path(e: dict, work: Path) -> list[str]:
    """The entry's ``pythonpath`` folders (materialised under <work>/repo) for PYTHONPATH."""
    return [str((work / "repo" / f).resolve()) for f in e.get("pythonpath", [])]


def show(repo: str, commit: str, path: str) -> bytes:
    g = measure.git_dir(repo)
    return subprocess.run(["git", "--git-dir", str(g), "show", f"{commit}:{path}"], capture_output=True,
                          check=True).stdout


def tree(repo: str, commit: str) -> dict[str, int]:
    key = (repo, commit)
    with _lock:
        if key not in _trees:
            g = measure.git_dir(repo)
            out = subprocess.run(["git", "--git-dir", str(g), "ls-tree", "-r", "-l", commit], capture_output=True,
                                 text=True, check=True).stdout
            t = {}
            for line in out.splitlines():
                meta, path = line.split("\t", 1)
                size = meta.split()[3]
                t[path] = int(size) if size.isdigit() else 0
            _trees[key] = t
        return _trees[key]


def imported_names(code: str) -> set[str]:
    names = set()
    for m in re.finditer(r"^\s*from\s+(\.?[\w.]+)\s+import|^\s*import\s+([\w., ]+)", code, re.M):
        if m.group(1):
            names.add(m.group(1).lstrip(".").split(".")[0])
        else:
            names.update(p.strip().split(" ")[0].split(".")[0] for p in m.group(2).split(","))
    return {n for n in names if n}


def siblings(e: dict, code: str, limit: int = 200_000) -> dict[str, bytes]:
    """Small files of the entry's folder that it imports (transitively): path relative to the folder -> bytes."""
    t = tree(e["repository"], e["commit"])
    folder = os.path.dirname(e["path"])
    pre = folder + "/" if folder else ""
    out: dict[str, bytes] = {}
    todo = [code]
    while todo:
        for n in imported_names(todo.pop()):
            cands = [f"{pre}{n}.py"] if f"{pre}{n}.py" in t else sorted(
                p for p in t if p.startswith(f"{pre}{n}/") and p.endswith(".py")) if f"{pre}{n}/__init__.py" in t else []
            for p in cands:
                rel = p[len(pre):]
                if rel in out or p == e["path"] or t[p] > limit or sum(map(len, out.values())) + t[p] > 2 * limit:
                    continue
                out[rel] = show(e["repository"], e["commit"], p)
                todo.append(out[rel].decode("utf-8", "replace"))
    return out


# ------------------------------------------------------------------ notebooks
def nb_cells(text: str) -> list[str]:
    nb = json.loads(text)
    cells = nb.get("cells") or [c for ws in nb.get("worksheets", []) for c in ws.get("cells", [])]
    out = []
    for c in cells:
        if c.get("cell_type") == "code":
            src = c.get("source", c.get("input", ""))
            out.append("".join(src) if isinstance(src, list) else src)
    return out


def continuing(lines: list[str]) -> bool:
    """Whether the code so far ends inside a statement (open bracket, backslash, open triple quote)."""
    if lines and lines[-1].rstrip().endswith("\\"):
        return True
    try:
        for _ in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            pass
    except tokenize.TokenError:
        return True
    except (SyntaxError, IndentationError):
        return False
    return False


def is_magic(line: str, kept: list[str]) -> bool:
    """Whether a notebook line is an IPython magic / shell / help line (``kept``: the cell's lines before it)."""
    s = line.lstrip()
    if s.startswith(("%", "!", "?")) and continuing(kept):  # `% (a, b)` continuing a statement
        return False
    return bool(s.startswith(("%", "!")) or re.match(r"^[\w.]+\?\??$", s) or re.match(r"^[\w.]+\s*=\s*[!%]", s))


def nb_to_py(text: str) -> str:
    parts = [PRELUDE]
    for i, src in enumerate(nb_cells(text), 1):
        lines = src.splitlines()
        if lines and lines[0].lstrip().startswith("%%"):
            if lines[0].lstrip()[2:].split(" ")[0] not in KEEP_CELL_MAGICS:
                continue
            lines = lines[1:]
        kept: list[str] = []
        for ln in lines:
            s = ln.lstrip()
            kept.append(ln[:len(ln) - len(s)] + "pass" if is_magic(ln, kept) else ln)
        parts.append(f"# cell {i}\n" + "\n".join(kept) + "\n")
    return "\n".join(parts)


def strip_notebook(text: str) -> tuple[str, list[dict], list[dict]]:
    """The notebook with the device code of its code cells removed by strip_device (one program: a device
    variable set in one cell and used in another is one name), the rest of its JSON kept; cells the strip
    does not change keep their source as it is. Magic / shell lines are kept out of the strip (a
    placeholder statement stands in for each and is put back); cells under a cell magic are left as they are."""
    nb = json.loads(text)
    cells = nb.get("cells") or [c for ws in nb.get("worksheets", []) for c in ws.get("cells", [])]
    parts, magics, code_cells = [], [], []
    for c in cells:
        if c.get("cell_type") != "code":
            continue
        k = "source" if "source" in c else "input"
        src = c.get(k, "")
        src = "".join(src) if isinstance(src, list) else src
        if src.lstrip().startswith("%%"):
            continue
        lines: list[str] = []
        for ln in src.splitlines():
            if is_magic(ln, lines):
                s = ln.lstrip()
                lines.append(f"{ln[:len(ln) - len(s)]}__nb_magic__({len(magics)})")
                magics.append(ln)
            else:
                lines.append(ln)
        parts.append(f"__nb_cell__({len(code_cells)})\n" + "\n".join(lines) + "\n")
        code_cells.append((c, k, src))
    cpu, moves, setup = sd.strip_files({"notebook.py": "".join(parts)})
    chunks = re.split(r"^__nb_cell__\((\d+)\)\n", cpu["notebook.py"], flags=re.M)
    new = {int(chunks[i]): chunks[i + 1] for i in range(1, len(chunks), 2)}
    assert sorted(new) == list(range(len(code_cells))), "a cell separator was lost"
    for i, (c, k, src) in enumerate(code_cells):
        code = re.sub(r"^[ \t]*__nb_magic__\((\d+)\)$", lambda m: magics[int(m.group(1))], new[i], flags=re.M)
        code = code[:-1] if code.endswith("\n") and not src.endswith("\n") else code
        if code != src:
            c[k] = code.splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n", moves, setup


# ------------------------------------------------------------------ static pre-checks
def missing_packages(code: str, local: set[str]) -> list[str] | str:
    """Top-level imports (outside try blocks) that cannot be found; a str: the SyntaxError."""
    try:
        tree_ = ast.parse(code)
    except SyntaxError as e:
        return f"SyntaxError: {e.msg} (line {e.lineno})"
    in_try = set()
    for node in ast.walk(tree_):
        if isinstance(node, ast.Try):
            for sub in ast.walk(node):
                in_try.add(id(sub))
    names = []
    for node in ast.walk(tree_):
        if id(node) in in_try:
            continue
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module.split(".")[0])
    miss = []
    for n in dict.fromkeys(names):
        if n in local or n in STANDINS or n in sys.stdlib_module_names or n == "__future__":
            continue
        if importlib.util.find_spec(n) is None and not (SITE / n).exists():
            miss.append(n)
    return miss


# ------------------------------------------------------------------ running
def env(path: list[str] | None = None) -> dict:
    """The originals' environment: the extra packages of SITE (and ``path``: an entry's pythonpath) first."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([*(path or []), str(SITE)]) + (
        os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["MPLBACKEND"] = "Agg"
    e["PYTHONWARNINGS"] = "ignore"
    return e


def run(cmd: list[str], cwd: Path, timeout: float, use_env: bool = False, path: list[str] | None = None) -> dict:
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                           env=env(path) if use_env else None)
        return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "seconds": round(time.time() - t0, 1)}
    except subprocess.TimeoutExpired as x:
        return {"rc": None, "stdout": x.stdout or "", "stderr": "timeout", "seconds": round(time.time() - t0, 1)}


def parse_json(out: str) -> dict | list | None:
    cands = [i for i in (out.find("{"), out.find("[")) if i >= 0]
    if not cands:
        return None
    i = min(cands)
    try:
        return json.loads(out[i:])
    except json.JSONDecodeError:
        return None


def first_line(text: str) -> str:
    for ln in (text or "").splitlines():
        if ln.strip():
            return ln.strip()[:240]
    return ""


def reason_text(rep: dict) -> str:
    return " | ".join(f"[{r.get('run')}] {r.get('cause')}" for r in rep.get("reasons", []))[:600]


def classify_orig(rep: dict | None, res: dict) -> tuple[str, str]:
    if rep is None:
        if res["rc"] is None:
            return "orig-timeout", "the verify of the original did not finish"
        return "orig-error", "verify gave no report: " + first_line(res["stderr"][-2000:])
    v = rep.get("verdict")
    if v == "pass" and not any(r.get("steps") for r in rep.get("runs", [])):
        return "orig-no-step", NO_STEP
    if v == "pass":
        return "ok", ""
    if v == "needs-data":
        return "orig-needs-data", "; ".join(n.get("path", "?") for n in rep.get("needs_data", []))[:240]
    cause = reason_text(rep)
    if "did not finish within" in cause:
        return "orig-timeout", cause
    m = re.search(r"No module named '([\w.]+)'", cause)
    if m:
        return "orig-missing-package", m.group(1)
    return "orig-error", cause


DEVICE_WORDS = re.compile(r"same device|device type|cuda|device|\.numpy\(\)|CPU tensor|on the GPU|no module ran", re.I)


def classify_sim(rep: dict | None, res: dict) -> tuple[str, str]:
    if rep is None:
        return ("verify-error", "timeout" if res["rc"] is None else "no report: " + first_line(res["stderr"][-2000:]))
    v = rep.get("verdict")
    if v == "pass":
        return "pass", ""
    if v == "needs-data":
        return "needs-data", reason_text(rep)
    if v == "error":
        return "verify-error", "the original failed in the comparison run: " + reason_text(rep)
    reasons = rep.get("reasons", [])
    cpu_runs = [r for r in reasons if "cpu" in (r.get("run") or "") and "original" not in (r.get("run") or "")]
    dev = [r for r in reasons if r not in cpu_runs]
    losses = lambda r: (r.get("cause") or "").startswith(("the losses part", "the loss trend", "it recorded"))  # noqa: E731
    if cpu_runs and not all(losses(r) for r in cpu_runs):
        return "broken-cpu-run", reason_text(rep)
    if any((r.get("rule") or "").startswith("CG1") or DEVICE_WORDS.search(r.get("cause") or "")
           for r in dev if not losses(r)):
        return "missed-move", reason_text(rep)
    if all(losses(r) for r in reasons):
        return "losses-differ", reason_text(rep)
    return "wrong-move", reason_text(rep)


def orig_result(e: dict, work: Path, script: str, files: dict[str, bytes], a) -> dict:
    """Run the original on the CPU, cached by the files' hash."""
    h = hashlib.sha1()
    for k in sorted(files):
        h.update(k.encode() + b"\0" + files[k] + b"\0")
    h.update(f"{a.max_steps}/{a.timeout}/synthetic".encode())
    key = h.hexdigest()[:20]
    cf_ = CACHE / "orig-cache" / f"{key}.json"
    code = files[script].decode("utf-8", "replace")
    local = {Path(p).parts[0].removesuffix(".py") for p in files}
    for d in map(Path, entry_path(e, work)):  # the entry's pythonpath folders (extras.json)
        local |= {p.name.removesuffix(".py") for p in d.iterdir()} if d.is_dir() else set()
    miss = missing_packages(code, local)
    if cf_.exists() and not a.no_cache:
        old = json.loads(cf_.read_text())
        # the key is the files' hash: a package found missing then may be installed since (SITE)
        if not (old.get("static") and old.get("class") == "orig-missing-package"
                and old.get("detail") != ", ".join(miss if isinstance(miss, list) else []) + " (import check: not run)"):
            return old
    if isinstance(miss, str):
        out = {"class": "orig-error", "detail": miss + " (does not compile: not run)", "static": True}
    elif miss:
        out = {"class": "orig-missing-package", "detail": ", ".join(miss) + " (import check: not run)", "static": True}
    else:
        res = run([str(CPU2GPU), "verify", script, "--device", "cpu", "--max-steps", str(a.max_steps),
                   "--synthetic-data", "--output-format", "json", "--timeout", str(a.timeout)],
                  work / "orig", a.timeout * 2 + 60, use_env=True, path=entry_path(e, work))
        rep = parse_json(res["stdout"])
        cls, detail = classify_orig(rep, res)
        run0 = (rep or {}).get("runs", [{}])[0] if rep else {}
        out = {"class": cls, "detail": detail, "static": False, "seconds": res["seconds"],
               "steps": run0.get("steps"), "losses": run0.get("losses"),
               "device_forward_calls": run0.get("device_forward_calls"), "synthetic": run0.get("synthetic"),
               "stderr_tail": (run0.get("stderr_tail") or res["stderr"])[-800:]}
    out["key"] = key
    cf_.parent.mkdir(parents=True, exist_ok=True)
    cf_.write_text(json.dumps(out, indent=1))
    return out


def aware_check(rec: dict, tool: list[str], work: Path, name: str, script: str) -> str | None:
    """`cpu2gpu check` on the authors' device-aware file: its CG1xx findings are false alarms. Also counts the
    authors' own device moves (strip_device.find_moves), to tell files that move things from files that only
    name cuda (a `torch.cuda.manual_seed`, an `is_available()` print)."""
    ck = run(tool + ["check", "--output-format", "json", name], work / "orig", 300)
    found = parse_json(ck["stdout"])
    codes = []
    if isinstance(found, list):
        codes = [f.get("code", "") for f in found]
    elif isinstance(found, dict):
        codes = [f.get("code", "") for f in found.get("findings", found.get("diagnostics", []))]
    rec["check_codes"] = codes
    rec["false_cg1xx"] = sum(c.startswith("CG1") for c in codes)
    try:
        rec["authors_moves"] = len(sd.find_moves((work / "orig" / script).read_text(encoding="utf-8")))
    except Exception:  # noqa: BLE001 - libcst cannot parse it
        rec["authors_moves"] = None
    if ck["rc"] not in (0, 1) or "Traceback" in ck["stderr"]:
        return "check: " + first_line(ck["stderr"][-2000:])
    return None


def process(e: dict, tool: list[str], a) -> dict:
    t0 = time.time()
    slug = re.sub(r"[^\w.-]+", "_", e["id"])
    work = CACHE / a.label / slug
    if work.exists():
        shutil.rmtree(work)
    (work / "orig").mkdir(parents=True)
    raw = show(e["repository"], e["commit"], e["path"])
    name = os.path.basename(e["path"])
    rec = {k: e[k] for k in ("id", "repository", "path", "commit", "format", "kind")}
    rec["notes"] = ""
    text = raw.decode("utf-8", "replace")
    if e["format"] == "notebook":
        code_for_imports = "\n".join(nb_cells(text))
    else:
        code_for_imports = text
    sib = siblings(e, code_for_imports)
    rec["siblings"] = sorted(sib)
    if e["kind"] == "stripped":
        if e["format"] == "notebook":
            text, moves, setup = strip_notebook(text)
        else:
            cpu, moves, setup = sd.strip_files({name: text})
            text = cpu[name]
        raw = text.encode("utf-8")
        rec["stripped_moves"] = len(moves)
        rec["stripped_setup"] = len(setup)
    files = dict(sib)
    # the repository's own files a user's clone has (extras.json): beside the file when under its folder,
    # else under <work>/repo at their repository path (for the pythonpath folders)
    outside: dict[str, bytes] = {}
    folder = os.path.dirname(e["path"])
    for p, data in repo_files(e).items():
        if not folder or p.startswith(folder + "/"):
            files[p[len(folder) + 1 if folder else 0:]] = data
        else:
            outside[p] = data
    if e.get("repo_files") or e.get("pythonpath"):
        rec["repo_files"] = sorted(files.keys() - sib.keys()) + sorted(f"<repo>/{p}" for p in outside)
        rec["pythonpath"] = e.get("pythonpath", [])
    for p, data in outside.items():
        (work / "repo" / p).parent.mkdir(parents=True, exist_ok=True)
        (work / "repo" / p).write_bytes(data)
    files[name] = raw
    script = name
    if e["format"] == "notebook":
        script = Path(name).stem + ".py"
        files[script] = nb_to_py(text).encode("utf-8")
    for rel, data in files.items():
        (work / "orig" / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / "orig" / rel).write_bytes(data)
    shutil.copytree(work / "orig", work / "mig")
    # --- the original on the CPU
    hashed = {k: v for k, v in files.items() if k != name or e["format"] != "notebook"}
    hashed.update({f"<repo>/{p}": v for p, v in outside.items()})  # none: the key as before extras.json
    o = orig_result(e, work, script, hashed, a)
    rec["orig"] = o
    # --- rewrite (and check, for aware entries)
    rw = run(tool + ["rewrite", "--in-place", name], work / "mig", 300)
    rec["rewrite_rc"], rec["rewrite_seconds"] = rw["rc"], rw["seconds"]
    crash = None
    if rw["rc"] not in (0, 1) or "Traceback" in rw["stderr"]:
        crash = "rewrite: " + (first_line(rw["stderr"][rw["stderr"].find("Traceback"):] if "Traceback" in rw["stderr"]
                                          else rw["stderr"]) or f"exit code {rw['rc']}")
        tb = [ln for ln in rw["stderr"].splitlines() if ln.strip()]
        if tb:
            crash += " ... " + tb[-1][:200]
    new_raw = (work / "mig" / name).read_bytes()
    rec["changed"] = new_raw != raw
    if not crash:
        try:
            if e["format"] == "notebook":
                (work / "mig" / script).write_text(nb_to_py(new_raw.decode("utf-8")), encoding="utf-8")
            else:
                compile(new_raw, name, "exec")
        except (SyntaxError, ValueError) as x:
            if not (o["class"] == "orig-error" and o.get("static")):  # a Python 2 file stays a Python 2 file
                crash = f"the rewritten file does not compile / convert: {x}"
    if e["kind"] == "aware":
        crash = crash or aware_check(rec, tool, work, name, script)
    if crash:
        rec["class"], rec["detail"] = "tool-crash", crash
    elif o["class"] != "ok":
        rec["class"], rec["detail"] = o["class"], o["detail"]
    else:
        # in the migrated copy's folder, as the user runs it (a file read as './data.csv' is found there)
        res = run([str(CPU2GPU), "verify", script, "--device", "sim", "--against",
                   str(work / "orig" / script), "--synthetic-data", "--max-steps", str(a.max_steps),
                   "--output-format", "json", "--timeout", str(a.timeout), "--jobs", str(a.verify_jobs)],
                  work / "mig", a.timeout * 3 + 90, use_env=True, path=entry_path(e, work))
        rep = parse_json(res["stdout"])
        rec["class"], rec["detail"] = classify_sim(rep, res)
        rec["verify_seconds"] = res["seconds"]
        if rep:
            rec["runs"] = [{k: r.get(k) for k in ("label", "status", "steps", "device_forward_calls",
                                                   "cpu_forward_calls", "first_loss", "last_loss")}
                           for r in rep.get("runs", [])]
    rec["seconds"] = round(time.time() - t0, 1)
    auto_note(rec)
    return rec


# ------------------------------------------------------------------ report
WRONG_ARGS = re.compile(r"invalid combination of arguments|unexpected keyword argument 'device'|"
                        r"got an unexpected keyword")


NO_STEP = ("the original made no optimizer step here (manual updates, training in worker processes, "
           "or no batch of the stand-in data): no training to compare")


def auto_note(r: dict) -> None:
    """Flags for manual review that the records show by themselves (and a call the rewrite broke: wrong-move;
    an original that made no optimizer step, which no migration can be judged on: orig-no-step)."""
    orig = r.get("orig") or {}
    if orig.get("class") == "ok" and orig.get("steps") == 0:
        orig["class"] = "orig-no-step"
        if r["class"] != "tool-crash":
            r["class"], r["detail"] = "orig-no-step", NO_STEP
    if r["class"] == "missed-move" and WRONG_ARGS.search(r.get("detail", "")):
        r["class"] = "wrong-move"  # the rewrite added an argument the call does not take
    if r["class"] == "orig-missing-package" and r.get("commit"):
        t = tree(r["repository"], r["commit"])
        names = [n.strip().split(" ")[0].split(".")[0] for n in r.get("detail", "").split(",")]
        local = sorted({n for n in names if n and any(p == f"{n}.py" or p.endswith(f"/{n}.py") or p.startswith(f"{n}/")
                                                      or f"/{n}/" in p for p in t)})
        note = f"repository module(s) outside the script's folder, not materialised: {', '.join(local)}"
        if local and note not in r.get("notes", ""):
            r["notes"] = (r.get("notes", "") + "; " + note).lstrip("; ")
    runs = r.get("runs") or []
    if r["class"] == "missed-move" and runs and all(
            not (x.get("device_forward_calls") or x.get("cpu_forward_calls")) for x in runs):
        note = "no nn.Module forward in any run (the script trains bare tensors): review"
        if note not in r.get("notes", ""):
            r["notes"] = (r.get("notes", "") + "; " + note).lstrip("; ")


def family(e: dict) -> str:
    return e["repository"]


def table(recs: list[dict]) -> str:
    cols = ["scripts", "runnable"] + CLASSES
    groups = [("script/cpu", lambda r: r["format"] == "script" and r["kind"] == "cpu"),
              ("script/aware", lambda r: r["format"] == "script" and r["kind"] == "aware"),
              ("script/stripped", lambda r: r["format"] == "script" and r["kind"] == "stripped"),
              ("notebook/cpu", lambda r: r["format"] == "notebook" and r["kind"] == "cpu"),
              ("notebook/aware", lambda r: r["format"] == "notebook" and r["kind"] == "aware"),
              ("notebook/stripped", lambda r: r["format"] == "notebook" and r["kind"] == "stripped"),
              ("**all**", lambda r: True)]
    rows = ["| kind | " + " | ".join(cols) + " | aware changed by rewrite | false CG1xx (files / findings) |",
            "|" + "---|" * (len(cols) + 3)]
    for name, f in groups:
        rs = [r for r in recs if f(r)]
        if not rs:
            continue
        vals = [len(rs), sum(r["orig"]["class"] == "ok" for r in rs)] + [sum(r["class"] == c for r in rs)
                                                                         for c in CLASSES]
        aw = [r for r in rs if r["kind"] == "aware"]
        mv = [r for r in aw if r.get("authors_moves")]
        ch = (f"{sum(bool(r['changed']) for r in aw)} of {len(aw)} (moving: {sum(bool(r['changed']) for r in mv)} "
              f"of {len(mv)})") if aw else "-"
        fc = (f"{sum(r.get('false_cg1xx', 0) > 0 for r in aw)} / {sum(r.get('false_cg1xx', 0) for r in aw)} "
              f"(moving: {sum(r.get('false_cg1xx', 0) > 0 for r in mv)} / "
              f"{sum(r.get('false_cg1xx', 0) for r in mv)})") if aw else "-"
        rows.append(f"| {name} | " + " | ".join(map(str, vals)) + f" | {ch} | {fc} |")
    return "\n".join(rows)


def failures(recs: list[dict]) -> str:
    out = []
    for c in CLASSES[1:]:
        rs = [r for r in recs if r["class"] == c]
        if not rs:
            continue
        out.append(f"\n{c}: {len(rs)}")
        for r in sorted(rs, key=lambda r: r["id"]):
            note = f"  (note: {r['notes']})" if r.get("notes") else ""
            out.append(f"  {r['id']} [{r['kind']}] {first_line(r['detail'])[:200]}{note}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="results go to results-<label>.json")
    ap.add_argument("--engine-rev", help="rewrite/check with the engine as committed at this revision "
                                         "(default: the working tree's .venv/bin/cpu2gpu)")
    ap.add_argument("--only", help="comma-separated substrings of entry ids")
    ap.add_argument("--kind", help="comma-separated kinds (cpu, aware, stripped)")
    ap.add_argument("--limit", type=int, help="the first N entries (after --only/--kind)")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="entries at a time")
    ap.add_argument("--verify-jobs", type=int, default=1, help="verify --jobs for the sim verify")
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120, help="verify --timeout (seconds per run)")
    ap.add_argument("--no-cache", action="store_true", help="rerun the originals")
    ap.add_argument("--resume", action="store_true", help="keep the finished entries of results-<label>.json")
    ap.add_argument("--recheck", action="store_true", help="redo only `check` on the aware entries of "
                                                            "results-<label>.json (with --engine-rev), run nothing else")
    ap.add_argument("--report", action="store_true", help="print the table of results-<label>.json, run nothing")
    a = ap.parse_args(argv)
    if a.report:
        d = json.loads((HERE / f"results-{a.label}.json").read_text())
        recs = d["entries"]
        for r in recs:
            auto_note(r)
        (HERE / f"results-{a.label}.json").write_text(json.dumps(d, indent=1) + "\n")  # the notes, kept
        print(table(recs))
        print(failures(recs))
        return 0
    entries = load_manifest()
    if a.only:
        subs = a.only.split(",")
        entries = [e for e in entries if any(s in e["id"] for s in subs)]
    if a.kind:
        entries = [e for e in entries if e["kind"] in a.kind.split(",")]
    # round robin over the repositories, so that a run stopped early still covers every repository
    queues: dict = {}
    for e in entries:
        queues.setdefault(e["repository"], []).append(e)
    entries = [q[i] for i in range(max(map(len, queues.values()), default=0)) for q in queues.values() if i < len(q)]
    if a.limit:
        entries = entries[:a.limit]
    if a.engine_rev:
        tool, sha = measure.engine_at(a.engine_rev)
        dirty = False
    else:
        tool = [str(CPU2GPU)]
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "cpu2gpu", "runtime"],
                                    capture_output=True, text=True).stdout.strip())
    if a.recheck:
        d = json.loads((HERE / f"results-{a.label}.json").read_text())
        for r in d["entries"]:
            if r["kind"] != "aware":
                continue
            work = CACHE / a.label / re.sub(r"[^\w.-]+", "_", r["id"])
            name = os.path.basename(r["path"])
            script = Path(name).stem + ".py" if r["format"] == "notebook" else name
            err = aware_check(r, tool, work, name, script)
            if err and r["class"] != "tool-crash":
                r["class"], r["detail"] = "tool-crash", err
            print(f"{r['id'][:80]:80} {r['false_cg1xx']:3} CG1xx, authors' moves {r['authors_moves']}", flush=True)
        d["check_engine_commit"] = sha
        (HERE / f"results-{a.label}.json").write_text(json.dumps(d, indent=1) + "\n")
        return 0
    verify_sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    out_path = HERE / f"results-{a.label}.json"
    recs: list[dict] = []
    if a.resume and out_path.exists():  # keep the entries a stopped run of this label finished
        ids = {e["id"] for e in entries}
        recs = [r for r in json.loads(out_path.read_text())["entries"] if r["id"] in ids]
        done = {r["id"] for r in recs}
        entries_todo = [e for e in entries if e["id"] not in done]
    else:
        entries_todo = entries
    t0 = time.time()

    def save():
        order = {e["id"]: i for i, e in enumerate(entries)}
        recs.sort(key=lambda r: order[r["id"]])
        out_path.write_text(json.dumps({
            "label": a.label, "engine_commit": sha, "engine_dirty": dirty,
            "verify_from": os.environ.get("CPU2GPU_VERIFY") or f"working tree at {verify_sha[:10]}", "max_steps": a.max_steps, "timeout": a.timeout,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "entries": recs}, indent=1) + "\n")

    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        futs = {ex.submit(process, e, tool, a): e for e in entries_todo}
        for n, fut in enumerate(cf.as_completed(futs), 1):
            e = futs[fut]
            try:
                r = fut.result()
            except Exception as x:  # noqa: BLE001 - the runner's own failure on one entry
                r = {k: e[k] for k in ("id", "repository", "path", "commit", "format", "kind")}
                r.update({"class": "verify-error", "detail": f"runner: {x!r}", "orig": {"class": "?"},
                          "changed": None, "notes": ""})
            recs.append(r)
            print(f"[{n}/{len(entries_todo)} {time.time() - t0:6.0f}s] {r['class']:20} {r['id']}  "
                  f"{first_line(r.get('detail', ''))[:120]}", flush=True)
            with _lock:
                save()
    save()
    print()
    print(table(recs))
    print(failures(recs))
    print(f"\nwrote {out_path.relative_to(ROOT)}; work files under {CACHE / a.label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
