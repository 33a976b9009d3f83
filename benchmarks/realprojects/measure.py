"""Blind recall of `cpu2gpu rewrite` over real multi-file PyTorch projects (manifest.json).

For each project: read its files at the recorded commit (from the fetched mirror, else a bare
clone cached under /tmp), strip the authors' device code with strip_device.py (the CPU version),
then run the tool twice on fresh copies of the CPU version (each copy: the stripped files, the
manifest's context files -- setup.py, requirements.txt, .gitignore... as they are -- and `git init`,
as a user's clone would be):

- folder: ``cpu2gpu rewrite <copy>/<subfolder>`` (the whole project);
- entry:  ``cpu2gpu rewrite <copy>/<entry script>`` (only the entry script is rewritten).

Each run is made once as a diff (what the user sees; saved) and once with ``--in-place`` on the
copy, whose files are then read. The moves the rewrite added are the move sites of the rewritten
files (strip_device.find_moves: ``.to(<device-ish>)``, ``.cuda()``, ``device=`` of a factory) that
the CPU version does not have. An authors' move M (file, function, original statement, moved
values) and an added move A are matched one to one, greedily, cheapest first:

- restored: same file and same function (class.method, or <module>), and either A's statement is
  M's statement (A's lines, mapped back through line diffs rewritten -> CPU -> original, overlap
  M's lines) or they move the same value (a dotted name in common between M's values and A's:
  the variable the moved expression is made of, e.g. `x` for `x.squeeze(0).to(d)`, and the name
  the result is assigned to, e.g. `model` for `model = Net().to(d)`; on M's side also what the
  moved variable was assigned from in that function, e.g. `batch` for `images = batch['image']`);
  cost: same statement and same value < same statement < same value (nearer lines first); an
  added move inside a comprehension (`batch = {k: v.to(d) for k, v in batch.items()}`) moves every
  element and may restore several authors' moves;
- restored elsewhere: not restored, but (a) an unmatched added move in another function or file
  moves a value with the same last name component (`model` for `self.model` / `model`), or (b) an
  added move (matched or not: authors often move one model twice, in main() and again in train())
  moves the variable that a call passes for the moved parameter of a plain function
  (`model.cuda()` in `def train(it, model)`, and `train(it, cnn)` somewhere: `cnn`) -- the tool
  moved the value at another place;
- missed: neither;
- extra: added moves matched by no authors' move.

Tool errors: exit code 2 (or any other than 0/1), a traceback or an "error" line on stderr, or a
rewritten file that Python cannot compile.

    .venv/bin/python benchmarks/realprojects/measure.py --label blind
    .venv/bin/python benchmarks/realprojects/measure.py --label x --only pygcn,stargan --details
    .venv/bin/python benchmarks/realprojects/measure.py --label blind --rev HEAD   # the committed engine
"""

from __future__ import annotations

import argparse
import difflib
import json
import shutil
import subprocess
import sys
import warnings
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import strip_device as sd  # noqa: E402

warnings.simplefilter("ignore", SyntaxWarning)  # the projects' own `x is 'lit'`

MIRROR = Path("/work/.mirror")
CACHE = Path("/tmp/cpu2gpu-realprojects")
DEFAULT_TOOL = ROOT / ".venv" / "bin" / "cpu2gpu"


# ------------------------------------------------------------------ sources
def git_dir(repo: str) -> Path:
    slug = repo.replace("/", "+")
    for d in (MIRROR / slug / "repo" / ".git", MIRROR / slug / "repo"):
        if (d / "HEAD").exists() or (d / "objects").is_dir():
            return d
    bare = CACHE / "git" / f"{slug}.git"
    if not bare.exists():
        bare.parent.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["git", "clone", "--bare", "--quiet", f"https://github.com/{repo}", str(bare)],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"cannot get {repo}: no mirror under {MIRROR} and git clone failed:\n{r.stderr}")
    return bare


def read_sources(p: dict, key: str = "files") -> dict[str, str]:
    g = git_dir(p["repo"])
    out = {}
    for f in p.get(key, []):
        r = subprocess.run(["git", "--git-dir", str(g), "show", f"{p['commit']}:{f}"], capture_output=True)
        if r.returncode:
            sys.exit(f"{p['repo']}@{p['commit']}: cannot read {f}: {r.stderr.decode()}")
        out[f] = r.stdout.decode("utf-8")
    return out


def write_tree(root: Path, files: dict[str, str], checkout: bool = False) -> None:
    """Write the files under root (emptied first); a checkout is also made a git repository, as the
    user's clone would be (the tool finds the project's root and its .gitignore from it)."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for f, code in files.items():
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text(code, encoding="utf-8")
    if checkout:
        subprocess.run(["git", "init", "-q", str(root)], check=True)


# ------------------------------------------------------------------ line maps
def line_map(a: list[str], b: list[str]) -> dict[int, tuple[float, bool]]:
    """For each 1-based line of b: (line of a, inserted?). Inserted lines map just after the line
    of a they follow; lines of a replaced block map pairwise (clamped)."""
    out = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            if tag == "equal":
                out[j + 1] = (i1 + (j - j1) + 1, False)
            elif tag == "replace":
                out[j + 1] = (i1 + min(j - j1, i2 - i1 - 1) + 1, False)
            else:  # insert
                out[j + 1] = (i1 + 0.5, True)
    return out


def compose(m1: dict, m2: dict) -> dict:
    """m1: lines of B -> lines of A; m2: lines of C -> lines of B. Returns C -> (line of A, inserted?)."""
    out = {}
    for c, (b, ins) in m2.items():
        if not ins:
            out[c] = m1.get(int(b), (b, True))
        else:  # after line int(b) of B (0: at the top)
            before = m1.get(int(b), (0, False))[0] if int(b) else 0
            out[c] = (before + 0.5, True)
    return out


# ------------------------------------------------------------------ matching
def short(names) -> set[str]:
    return {n.split(".")[-1] for n in names}


def match(authors: list[dict], added: list[dict]) -> None:
    """Set M['status'] / M['by'] and A['matched'] in place."""
    cands = []
    for i, m in enumerate(authors):
        for j, a in enumerate(added):
            if a["path"] != m["path"] or a["function"] != m["function"]:
                continue
            same_stmt = not a["inserted"] and a["o_start"] <= m["end_line"] and m["line"] <= a["o_end"]
            same_val = bool((set(m["values"]) | set(m["aliases"])) & set(a["values"]))
            if not (same_stmt or same_val):
                continue
            cost = (0 if same_val else 0.5) if same_stmt else 1 + abs(a["o_start"] - m["line"]) / 1e4
            cands.append((cost, i, j))
    used_m, used_a = set(), set()
    for cost, i, j in sorted(cands):
        if i in used_m or j in used_a:
            continue
        used_m.add(i)
        if not added[j]["multi"]:  # a move inside a comprehension moves every element: it may serve several
            used_a.add(j)
        authors[i]["status"] = "restored"
        authors[i]["by"] = j
        added[j]["matched"] = "restored"
    # elsewhere (a): an unused added move, at another place, of a value with the same last name
    cands = []
    for i, m in enumerate(authors):
        if i in used_m:
            continue
        for j, a in enumerate(added):
            if j in used_a or (a["path"], a["function"]) == (m["path"], m["function"]):
                continue
            if short(m["values"]) & short(a["values"]):
                cands.append(((0 if a["path"] == m["path"] else 1) + abs(a["o_start"] - m["line"]) / 1e5, i, j))
    # elsewhere (b): the tool moved what a caller passes for the moved parameter; this added move may
    # already serve another authors' move (authors often move one model twice: in main() and in train())
    for i, m in enumerate(authors):
        if i in used_m or not m["passed"]:
            continue
        for j, a in enumerate(added):
            if set(m["passed"]) & set(a["values"]):
                cands.append((10 + (j in used_a) + abs(a["o_start"] - m["line"]) / 1e5, i, j))
    for cost, i, j in sorted(cands):
        if i in used_m or (cost < 10 and j in used_a):
            continue
        used_m.add(i)
        used_a.add(j)
        if added[j].get("matched") is None:
            added[j]["matched"] = "elsewhere"
        authors[i]["status"] = "elsewhere"
        authors[i]["by"] = j
    for i, m in enumerate(authors):
        m.setdefault("status", "missed")
    for a in added:
        a.setdefault("matched", None)


# ------------------------------------------------------------------ one run
def run_tool(tool: list[str], cwd: Path, targets: list[str], extra_args: list[str]) -> dict:
    t0 = time.time()
    diff = subprocess.run(tool + ["rewrite", *extra_args, *targets], cwd=cwd, capture_output=True, text=True)
    t1 = time.time()
    inplace = subprocess.run(tool + ["rewrite", "--in-place", *extra_args, *targets], cwd=cwd,
                             capture_output=True, text=True)
    return {"diff": diff.stdout, "diff_rc": diff.returncode, "diff_stderr": diff.stderr,
            "rc": inplace.returncode, "stderr": inplace.stderr, "seconds": round(t1 - t0, 2)}


def analyse(p: dict, orig: dict, cpu: dict, moves: list[dict], out_root: Path, run: dict,
            scope: list[str]) -> dict:
    """Compare the rewritten tree under out_root with the CPU version; `scope` = files rewritten."""
    errors = []
    if run["rc"] not in (0, 1) or run["diff_rc"] not in (0, 1):
        errors.append(f"exit code {run['diff_rc']} (diff) / {run['rc']} (in place)")
    for line in (run["stderr"] + run["diff_stderr"]).splitlines():
        low = line.lower()
        if "traceback" in low or "error" in low or "exception" in low:
            errors.append(line.strip()[:300])
    added, changed_files = [], []
    for f in p["files"]:
        new = (out_root / f).read_text(encoding="utf-8")
        if new == cpu[f]:
            continue
        changed_files.append(f)
        try:
            compile(new, f, "exec")
        except SyntaxError as e:
            errors.append(f"{f}: the rewritten file does not compile: {e}")
            continue
        try:
            new_moves = sd.find_moves(new)
        except Exception as e:  # noqa: BLE001 - libcst cannot parse it
            errors.append(f"{f}: cannot read the rewritten file: {e}")
            continue
        base = {}
        for m in sd.find_moves(cpu[f]):
            k = (m["function"], m["kind"], m["what"], m["device"])
            base[k] = base.get(k, 0) + 1
        to_cpu = line_map(cpu[f].splitlines(), new.splitlines())
        cpu_to_orig = line_map(orig[f].splitlines(), cpu[f].splitlines())
        to_orig = compose(cpu_to_orig, to_cpu)
        new_lines = new.splitlines()
        for m in new_moves:
            k = (m["function"], m["kind"], m["what"], m["device"])
            if base.get(k):
                base[k] -= 1
                continue
            span = [to_orig.get(ln, (ln, True)) for ln in range(m["line"], m["end_line"] + 1)]
            fixed = [o for o, ins in span if not ins]
            a = {"path": f, **{k2: m[k2] for k2 in ("line", "function", "kind", "what", "device", "values", "multi")},
                 "code": new_lines[m["call_line"] - 1].strip()[:160],
                 "inserted": not fixed,
                 "o_start": min(fixed) if fixed else span[0][0],
                 "o_end": max(fixed) if fixed else span[-1][0]}
            added.append(a)
    authors = [dict(m) for m in moves]
    passed = sd.call_aliases(orig)
    for m in authors:  # what callers pass for a moved parameter (for "elsewhere")
        m["passed"] = sorted({r for v in m["values"] for r in passed.get((m["path"], m["function"], v), ())})
    match(authors, added)
    setup_added = sum(
        1 for f in changed_files for ln in (out_root / f).read_text().splitlines()
        if "torch.device(" in ln and ln not in cpu[f].splitlines())

    def count(ms):
        return {
            "moves": len(ms),
            "restored": sum(m["status"] == "restored" for m in ms),
            "elsewhere": sum(m["status"] == "elsewhere" for m in ms),
            "missed": sum(m["status"] == "missed" for m in ms),
        }

    res = {
        **count(authors),
        "nonfollow": count([m for m in authors if not m["follow"]]),
        "in_scope": count([m for m in authors if m["path"] in scope]),
        "extra": sum(a["matched"] is None for a in added),
        "added": len(added),
        "setup_lines_added": setup_added,
        "files_changed": changed_files,
        "errors": errors,
        "rc": run["rc"], "diff_rc": run["diff_rc"], "seconds": run["seconds"],
        "authors_moves": [
            {k: m[k] for k in ("path", "line", "function", "kind", "what", "device", "follow", "values",
                               "aliases", "passed", "statement", "status")}
            | ({"by": {k: added[m["by"]][k] for k in ("path", "line", "function", "code")}} if "by" in m else {})
            for m in authors],
        "extra_moves": [{k: a[k] for k in ("path", "line", "function", "code", "values")}
                        for a in added if a["matched"] is None],
    }
    return res


def measure(p: dict, tool: list[str], work: Path, extra_args: list[str]) -> dict:
    orig = read_sources(p)
    context = read_sources(p, "context")
    cpu, moves, setup = sd.strip_files(orig)
    write_tree(work / "orig", orig)
    write_tree(work / "cpu", cpu)
    (work / "removed.json").write_text(json.dumps({"moves": moves, "setup": setup}, indent=1))
    out = {"name": p["name"], "repo": p["repo"], "commit": p["commit"], "setup_removed": len(setup)}
    for label in ("folder", "entry"):
        root = work / label
        write_tree(root, {**context, **cpu}, checkout=True)
        if label == "folder":
            targets = [p["subfolder"] or "."]
            scope = list(p["files"])
        else:
            targets = list(p["entry"])
            scope = list(p["entry"])
        run = run_tool(tool, root, targets, extra_args)
        (work / f"{label}.diff").write_text(run["diff"])
        (work / f"{label}.stderr").write_text(run["diff_stderr"] + run["stderr"])
        out[label] = analyse(p, orig, cpu, moves, root, run, scope)
    return out


# ------------------------------------------------------------------ report
def table(results: list[dict]) -> str:
    head = ("| project | files | authors' moves | folder: restored | elsewhere | missed | extra | errors "
            "| entry: moves in entry file | restored | elsewhere (any file) | extra | errors |")
    rows = [head, "|" + "---|" * 13]
    keys = ("files", "n", "fr", "fe", "fm", "fx", "ferr", "en", "er", "ee", "ex", "eerr")
    tot = dict.fromkeys(keys, 0)
    for r in results:
        f, e = r["folder"], r["entry"]
        vals = dict(files=r["files"], n=f["moves"], fr=f["restored"], fe=f["elsewhere"], fm=f["missed"],
                    fx=f["extra"], ferr=len(f["errors"]), en=e["in_scope"]["moves"], er=e["in_scope"]["restored"],
                    ee=e["elsewhere"], ex=e["extra"], eerr=len(e["errors"]))
        for k in keys:
            tot[k] += vals[k]
        rows.append(f"| {r['name']} | " + " | ".join(str(vals[k]) for k in keys) + " |")
    rows.append("| **total** | " + " | ".join(str(tot[k]) for k in keys) + " |")
    return "\n".join(rows)


def engine_at(rev: str) -> tuple[list[str], str]:
    """A command running the engine as committed at `rev` (extracted under /tmp), and its commit."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True,
                         check=True).stdout.strip()
    dest = CACHE / f"engine-{sha[:12]}"
    if not (dest / "cpu2gpu").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "cpu2gpu", "runtime"], capture_output=True,
                             check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)
        if (dest / "runtime").is_dir() and not (dest / "cpu2gpu" / "runtime").exists():
            shutil.move(str(dest / "runtime"), str(dest / "cpu2gpu" / "runtime"))
    py = str(ROOT / ".venv" / "bin" / "python")
    cmd = [py, "-c", f"import sys; sys.path.insert(0, {str(dest)!r}); import cpu2gpu; "
                     f"assert cpu2gpu.__file__.startswith({str(dest)!r}), cpu2gpu.__file__; "
                     "sys.argv[0] = 'cpu2gpu'; from cpu2gpu.cli import main; sys.exit(main())"]
    r = subprocess.run(cmd + ["--version"], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"the engine at {rev} does not run:\n{r.stderr}")
    return cmd, sha


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="results go to results-<label>.json")
    ap.add_argument("--only", help="comma-separated project names")
    ap.add_argument("--tool", default=str(DEFAULT_TOOL), help="the cpu2gpu executable")
    ap.add_argument("--rev", help="measure the engine as committed at this git revision (git archive of cpu2gpu/ "
                                  "and runtime/ into /tmp, run with the venv's Python) instead of the working tree")
    ap.add_argument("--tool-arg", action="append", default=[], help="an extra argument for `cpu2gpu rewrite`")
    ap.add_argument("--details", action="store_true", help="print each missed / elsewhere / extra move")
    a = ap.parse_args(argv)
    manifest = json.loads((HERE / "manifest.json").read_text())
    projects = manifest["projects"]
    if a.only:
        names = set(a.only.split(","))
        projects = [p for p in projects if p["name"] in names]
    if a.rev:
        tool, head = engine_at(a.rev)
        dirty = False
    else:
        tool = [a.tool]
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "cpu2gpu", "runtime"],
                                    capture_output=True, text=True).stdout.strip())
    version = subprocess.run(tool + ["--version"], capture_output=True, text=True).stdout.strip()
    results = []
    for p in projects:
        work = CACHE / a.label / p["name"]
        work.mkdir(parents=True, exist_ok=True)
        r = measure(p, tool, work, a.tool_arg)
        r["files"] = len(p["files"])
        results.append(r)
        f, e = r["folder"], r["entry"]
        print(f"{p['name']:14} moves {f['moves']:3}  folder: restored {f['restored']:3} elsewhere {f['elsewhere']:2} "
              f"extra {f['extra']:2} errors {len(f['errors'])}  entry: restored {e['restored']:3} "
              f"(of {e['in_scope']['moves']} in the entry) extra {e['extra']:2} errors {len(e['errors'])}",
              flush=True)
        if a.details:
            for label in ("folder", "entry"):
                for m in r[label]["authors_moves"]:
                    if m["status"] != "restored":
                        by = f" <- {m['by']['path']}:{m['by']['line']} {m['by']['code']}" if "by" in m else ""
                        print(f"    [{label}] {m['status']:9} {m['path']}:{m['line']} ({m['function']}) "
                              f"{m['statement']}{by}")
                for x in r[label]["extra_moves"]:
                    print(f"    [{label}] extra     {x['path']}:{x['line']} ({x['function']}) {x['code']}")
                for err in r[label]["errors"]:
                    print(f"    [{label}] ERROR {err}")
    out = {"label": a.label, "tool_version": version, "cpu2gpu_commit": head, "engine_dirty": dirty,
           "tool_args": a.tool_arg, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "projects": results}
    path = HERE / f"results-{a.label}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print()
    print(table(results))
    print(f"\nwrote {path.relative_to(ROOT)}; work files under {CACHE / a.label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
