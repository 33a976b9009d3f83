"""`cpu2gpu migrate` on the real projects: does each CPU version end proven, and right?

For each project of manifest.json that has a stand-in recipe (standins/<name>.py: RECIPE and make(root)):

1. the CPU version (the authors' device code stripped by strip_device.py) with the manifest's context files is
   written under /tmp/cpu2gpu-realprojects/<label>/<project>/run, `git init`-ed as a user's clone would be, and
   the recipe's make(root) writes its stand-in data there;
2. the CPU version runs as it is (``cd run/<cwd> && python <script> <args>``) in a copy of its own: the original
   run, which must end well for the project to be judged (cached per project and recipe);
3. ``cpu2gpu migrate <script> --max-steps N --timeout T --output-format json -q --in-place --write-unproven --
   <args>`` in run/<cwd>: proven or not, rounds, seconds, the static misses its repair rounds found;
4. the migrated files are matched with the authors' moves as measure.py does (restored / elsewhere / missed).

Extra packages of a recipe are installed (pip --no-deps) into /tmp/cpu2gpu-realprojects/site-<name>, which is put
on PYTHONPATH before /tmp/cpu2gpu-realcode/site (realcode's README says how to make that one).

    .venv/bin/python benchmarks/realprojects/migrate_projects.py --label migrate-blind --rev HEAD
    .venv/bin/python benchmarks/realprojects/migrate_projects.py --label wip --only pygcn --cpu-only
    .venv/bin/python benchmarks/realprojects/migrate_projects.py --label migrate-blind --report
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "realcode"))
sys.path.insert(0, str(HERE))  # first: realcode has a measure of its own
import measure as M  # noqa: E402  (manifest sources, stripping, matching, pinned engines)
import migrate_run as RM  # noqa: E402  (realcode's summary of a migrate report)
import strip_device as sd  # noqa: E402

CACHE = M.CACHE = Path("/tmp/cpu2gpu-realprojects")  # realcode's run.py points measure at its own folder
REALCODE_SITE = Path("/tmp/cpu2gpu-realcode/site")
sys.path.append(str(REALCODE_SITE))  # the stand-ins' make() may write images with PIL


def load_standin(name: str):
    path = HERE / "standins" / (name.replace("-", "_") + ".py")
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"standin_{path.stem}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def site_for(name: str, packages: list[str]) -> Path:
    """The project's own package folder, installed once (without dependencies: torch must never be replaced)."""
    site = CACHE / f"site-{name}"
    stamp = site / ".packages"
    want = "\n".join(sorted(packages))
    if packages and (not stamp.exists() or stamp.read_text() != want):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                        *packages], check=True)
        stamp.write_text(want)
    return site


def run_env(name: str, recipe: dict) -> dict:
    env = dict(os.environ)
    paths = [str(site_for(name, recipe.get("packages", []))), str(REALCODE_SITE)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update({"MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""})
    for key, value in recipe.get("env", {}).items():  # the recipe's PYTHONPATH comes first, the sites stay
        env[key] = value + os.pathsep + env[key] if key == "PYTHONPATH" else value
    return env


def timed(cmd: list[str], cwd: Path, env: dict, timeout: float) -> dict:
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "seconds": round(time.time() - t0, 1)}
    except subprocess.TimeoutExpired as x:
        out = x.stdout.decode() if isinstance(x.stdout, bytes) else (x.stdout or "")
        return {"rc": None, "stdout": out, "stderr": "timeout", "seconds": round(time.time() - t0, 1)}


def original_run(p: dict, recipe: dict, root: Path, env: dict, work: Path, timeout: float) -> dict:
    """The CPU version run as it is, in a copy of its own; cached on the sources and the recipe."""
    key = hashlib.sha256(json.dumps([p["commit"], recipe], sort_keys=True, default=str).encode()
                         + (HERE / "standins" / (p["name"].replace("-", "_") + ".py")).read_bytes()).hexdigest()[:16]
    cache = CACHE / "original-runs" / f"{p['name']}-{key}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    copy = work / "original"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(root, copy, symlinks=True)
    res = timed([sys.executable, recipe["script"], *recipe.get("args", [])], copy / recipe.get("cwd", ""), env,
                timeout)
    out = {"rc": res["rc"], "seconds": res["seconds"], "tail": (res["stdout"][-800:] + res["stderr"][-1500:])}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out))
    return out


def process(p: dict, standin, tool: list[str], a) -> dict:
    recipe = standin.RECIPE
    rec: dict = {"name": p["name"], "repo": p["repo"], "device_flag": recipe.get("device_flag"),
                 "recipe_note": recipe.get("note", "")}
    if not recipe.get("runs", True):
        rec["class"] = "cannot-run-here"
        return rec
    work = CACHE / a.label / p["name"]
    work.mkdir(parents=True, exist_ok=True)
    orig = M.read_sources(p)
    cpu, moves, _setup = sd.strip_files(orig)
    root = work / "run"
    M.write_tree(root, {**M.read_sources(p, "context"), **cpu}, checkout=True)
    env = run_env(p["name"], recipe)
    sys.path.insert(0, str(site_for(p["name"], recipe.get("packages", []))))  # make() may write with them (h5py)
    try:
        standin.make(root)
    finally:
        sys.path.pop(0)
    rec["original"] = original_run(p, recipe, root, env, work, a.original_timeout)
    if rec["original"]["rc"] != 0:
        rec["class"] = "original-fails"
        return rec
    if a.cpu_only:
        rec["class"] = "original-runs"
        return rec
    cmd = tool + ["migrate", "--max-steps", str(a.max_steps), "--timeout", str(a.timeout), "--output-format",
                  "json", "-q", "--in-place", "--write-unproven", "--", recipe["script"], *recipe.get("args", [])]
    t0 = time.time()
    res = timed(cmd, root / recipe.get("cwd", ""), env, a.migrate_timeout)
    rec["migrate"] = RM.summarise_migrate(res, time.time() - t0)
    rec["class"] = "proven" if rec["migrate"].get("proven") else (
        "cannot-be-judged" if rec["migrate"].get("cannot_run") else "not-proven")
    run = {"rc": res["rc"], "diff_rc": res["rc"], "stderr": "", "diff_stderr": "", "seconds": res["seconds"]}
    rec["moves"] = M.analyse(p, orig, cpu, moves, root, run, list(p["files"]))
    return rec


def table(recs: list[dict]) -> str:
    head = ("| project | original runs | migrate | rounds | seconds | authors' moves | restored | elsewhere | missed "
            "| extra | static misses | ending |")
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in recs:
        m, mv = r.get("migrate") or {}, r.get("moves") or {}
        orig = r.get("original") or {}
        rows.append("| " + " | ".join(str(x) for x in [
            r["name"], {0: "yes"}.get(orig.get("rc"), "no" if orig else "-"), r["class"],
            m.get("repair_rounds", "-"), m.get("wall_seconds", "-"), mv.get("moves", "-"), mv.get("restored", "-"),
            mv.get("elsewhere", "-"), mv.get("missed", "-"), mv.get("extra", "-"), len(m.get("static_misses") or []),
            (m.get("ending") or r.get("recipe_note", "") if r["class"] != "proven" else "")[:140].replace("|", "/"),
        ]) + " |")
    judged = [r for r in recs if (r.get("original") or {}).get("rc") == 0]
    walls = [r["migrate"]["wall_seconds"] for r in judged if "migrate" in r]
    rows.append(f"\nproven {sum(r['class'] == 'proven' for r in recs)} of {len(judged)} whose original runs here "
                f"({len(recs)} with a recipe); median migrate wall "
                f"{statistics.median(walls) if walls else '-'} s")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--only", help="comma-separated project names")
    ap.add_argument("--tool", default=str(M.DEFAULT_TOOL))
    ap.add_argument("--rev", help="the engine as committed at this revision (measure.py's --rev)")
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120, help="migrate's --timeout (each run)")
    ap.add_argument("--migrate-timeout", type=float, default=1200, help="the whole migrate command")
    ap.add_argument("--original-timeout", type=float, default=180)
    ap.add_argument("--cpu-only", action="store_true", help="only make the data and run the CPU version")
    ap.add_argument("--report", action="store_true", help="only print the table of results-<label>.json")
    a = ap.parse_args(argv)
    path = HERE / f"results-{a.label}.json"
    if a.report:
        print(table(json.loads(path.read_text())["projects"]))
        return 0
    projects = json.loads((HERE / "manifest.json").read_text())["projects"]
    if a.only:
        projects = [p for p in projects if p["name"] in set(a.only.split(","))]
    tool, head = M.engine_at(a.rev) if a.rev else ([a.tool], "working tree")
    recs = []
    for p in projects:
        standin = load_standin(p["name"])
        if standin is None:
            print(f"{p['name']:14} no stand-in recipe", flush=True)
            continue
        r = process(p, standin, tool, a)
        recs.append(r)
        m = r.get("migrate") or {}
        print(f"{p['name']:14} {r['class']:16} original {(r.get('original') or {}).get('seconds', '-')} s  "
              f"migrate {m.get('wall_seconds', '-')} s  {(m.get('ending') or '')[:120]}", flush=True)
    if a.only and path.exists():  # a partial run replaces its projects' records, keeps the others
        done = {r["name"] for r in recs}
        kept = [r for r in json.loads(path.read_text())["projects"] if r["name"] not in done]
        order = [p["name"] for p in json.loads((HERE / "manifest.json").read_text())["projects"]]
        recs = sorted(kept + recs, key=lambda r: order.index(r["name"]))
    out = {"label": a.label, "engine": head, "max_steps": a.max_steps, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "projects": recs}
    if not a.cpu_only:
        path.write_text(json.dumps(out, indent=1) + "\n")
    print()
    print(table(recs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
