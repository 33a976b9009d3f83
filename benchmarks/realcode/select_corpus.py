"""Pick the corpus (writes manifest.json): single-file PyTorch training scripts and notebooks of public repositories.

The rule is fixed before the tool is run on any file, and says nothing about how the tool does:

- a ``.py`` file, or the code cells of a ``.ipynb``, that imports torch (``import torch`` / ``from torch``),
  makes an optimizer (``optim.``), and calls ``.backward(`` and ``.step(`` -- a training loop;
- at most 60,000 characters of code; not a ``setup.py``, not under a ``test``/``tests`` folder;
- per repository, at most ``--cap-py`` scripts and ``--cap-nb`` notebooks, taken in the order of
  sha1(path) (a fixed, content-blind shuffle, so that one chapter of a course does not fill the cap);
- kind: ``aware`` when the code (comments and strings left out) names ``cuda`` or ``device``, or moves
  anything with ``.to(...)`` of a device (strip_device.find_moves); else ``cpu``. Every ``aware``
  script also gets a ``stripped`` entry: the same file with its device code removed by
  ../realprojects/strip_device.py.

    .venv/bin/python benchmarks/realcode/select_corpus.py            # writes manifest.json
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "realprojects"))
import strip_device as sd  # noqa: E402

MIRROR = Path("/work/.mirror")
REPOS = [
    "python-engineer/pytorchTutorial", "graykode/nlp-tutorial", "L1aoXingyu/pytorch-beginner",
    "zhangxiann/PyTorch_Practice", "dragen1860/Deep-Learning-with-PyTorch-Tutorials", "keon/3-min-pytorch",
    "bentrevett/pytorch-seq2seq", "spro/practical-pytorch", "GunhoChoi/PyTorch-FastCampus",
    "omerbsezer/Fast-Pytorch", "rasbt/deeplearning-models", "chenyuntc/pytorch-book",
    "bentrevett/pytorch-sentiment-analysis", "rasbt/machine-learning-book", "lyeoni/pytorch-mnist-GAN",
    "wiseodd/generative-models", "lazyprogrammer/machine_learning_examples", "TingsongYu/PyTorch_Tutorial",
    "seungeunrho/minimalRL", "L1aoXingyu/code-of-learn-deep-learning-with-pytorch",
    "rasbt/stat453-deep-learning-ss21", "xiaobaoonline/pytorch-in-action",
    "sweetice/Deep-reinforcement-learning-with-pytorch", "quantumiracle/Popular-RL-Algorithms",
    "ShusenTang/Dive-into-DL-PyTorch", "karpathy/nn-zero-to-hero", "lyeoni/pytorch-mnist-VAE",
]
EXCLUDED = {
    "pytorch/examples", "yunjey/pytorch-tutorial", "MorvanZhou/PyTorch-Tutorial", "eriklindernoren/PyTorch-GAN",
    "hunkim/PyTorchZeroToAll", "jcjohnson/pytorch-examples", "karpathy/makemore", "kuangliu/pytorch-cifar",
    "vinhkhuc/PyTorch-Mini-Tutorials", "Atcold/pytorch-Deep-Learning", "mrdbourke/pytorch-deep-learning",
    "udacity/deep-learning-v2-pytorch",
}
TRAIN_RES = [re.compile(r"^\s*(import torch|from torch)", re.M), re.compile(r"optim\."),
             re.compile(r"\.backward\("), re.compile(r"\.step\(")]
DEVICE_RE = re.compile(r"cuda|device", re.I)


def git_dir(repo: str) -> Path:
    slug = repo.replace("/", "+")
    for d in (MIRROR / slug / "repo" / ".git", MIRROR / slug / "repo"):
        if (d / "HEAD").exists() or (d / "objects").is_dir():
            return d
    raise SystemExit(f"no mirror of {repo} under {MIRROR} (fetch it first)")


def git(g: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(g), *args], capture_output=True, check=True).stdout.decode(
        "utf-8", "replace")


def notebook_code(text: str) -> str:
    """The code cells of a notebook, joined (magics and shell lines as they are: only for selection)."""
    nb = json.loads(text)
    cells = nb.get("cells") or [c for ws in nb.get("worksheets", []) for c in ws.get("cells", [])]
    out = []
    for c in cells:
        if c.get("cell_type") == "code":
            src = c.get("source", c.get("input", ""))
            out.append("".join(src) if isinstance(src, list) else src)
    return "\n".join(out)


def code_only(code: str) -> str:
    """The code without comments and strings (tokenize; the raw text when it does not tokenize)."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return re.sub(r"#.*", "", code)
    return " ".join(t.string for t in toks if t.type not in (tokenize.COMMENT, tokenize.STRING))


def kind_of(code: str) -> str:
    if DEVICE_RE.search(code_only(code)):
        return "aware"
    try:
        if sd.find_moves(code):
            return "aware"
    except Exception:  # noqa: BLE001 - not parseable by libcst (Python 2): judged by text
        pass
    return "cpu"


def is_training(code: str) -> bool:
    return all(r.search(code) for r in TRAIN_RES)


def read_blobs(g: Path, commit: str, paths: list[str]) -> dict[str, str]:
    """The text of many files at one commit, through one `git cat-file --batch`."""
    inp = "".join(f"{commit}:{p}\n" for p in paths).encode()
    out = subprocess.run(["git", "--git-dir", str(g), "cat-file", "--batch"], input=inp, capture_output=True,
                         check=True).stdout
    res, i = {}, 0
    for p in paths:
        nl = out.index(b"\n", i)
        head = out[i:nl].split()
        if len(head) < 3 or head[1] != b"blob":
            i = nl + 1
            continue
        size = int(head[2])
        res[p] = out[nl + 1:nl + 1 + size].decode("utf-8", "replace")
        i = nl + 1 + size + 1
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap-py", type=int, default=15)
    ap.add_argument("--cap-nb", type=int, default=2)
    ap.add_argument("--dry", action="store_true", help="print the counts only")
    a = ap.parse_args(argv)
    entries, counts = [], {}
    for repo in REPOS:
        assert repo not in EXCLUDED, repo
        g = git_dir(repo)
        commit = git(g, "rev-parse", "HEAD").strip()
        paths = [p for p in git(g, "ls-tree", "-r", "--name-only", commit).splitlines()
                 if p.endswith((".py", ".ipynb")) and not p.endswith("setup.py")
                 and not re.search(r"(^|/)tests?/", p)]
        picked = {"py": [], "ipynb": []}
        blobs = read_blobs(g, commit, paths)
        for p in sorted(paths, key=lambda s: hashlib.sha1(s.encode()).hexdigest()):
            ext = "ipynb" if p.endswith(".ipynb") else "py"
            cap = a.cap_nb if ext == "ipynb" else a.cap_py
            if len(picked[ext]) >= cap:
                continue
            if p not in blobs:
                continue
            try:
                code = notebook_code(blobs[p]) if ext == "ipynb" else blobs[p]
            except (ValueError, AttributeError, TypeError):
                continue
            if len(code) > 60000 or not is_training(code):
                continue
            picked[ext].append((p, kind_of(code)))
        counts[repo] = {k: len(v) for k, v in picked.items()}
        for ext in ("py", "ipynb"):
            for p, kind in sorted(picked[ext]):
                e = {"id": f"{repo.split('/')[1]}/{p}", "repository": repo, "path": p, "commit": commit,
                     "format": "notebook" if ext == "ipynb" else "script", "kind": kind}
                entries.append(e)
                if kind == "aware" and ext == "py":
                    entries.append({**e, "id": e["id"] + "#stripped", "kind": "stripped"})
    tot = {"script": 0, "notebook": 0}
    for e in entries:
        if e["kind"] != "stripped":
            tot[e["format"]] += 1
    for r, c in counts.items():
        print(f"{r:55} py {c['py']:3} nb {c['ipynb']:3}")
    by_kind = {}
    for e in entries:
        by_kind[(e["format"], e["kind"])] = by_kind.get((e["format"], e["kind"]), 0) + 1
    print("total", tot, by_kind)
    if not a.dry:
        (HERE / "manifest.json").write_text(json.dumps({
            "about": "Single-file PyTorch training scripts and notebooks from public repositories, picked by "
                     "select_corpus.py (rule in its docstring) before the tool was run on any of them. "
                     "kind: cpu (no device code), aware (the authors' device code), stripped (an aware script "
                     "with its device code removed by ../realprojects/strip_device.py). Files are read from "
                     "the repository at the commit; nothing of them is stored here.",
            "entries": entries}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
