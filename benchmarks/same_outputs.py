"""Do two engines give the same outputs? For a refactoring that must change no output.

Runs one ``cpu2gpu`` executable (``--tool``; the working tree's by default) over a fixed set of
fixtures: ``verify`` (text and JSON) of the runtime fixtures on the simulated device, and
``migrate`` (JSON, and the migrated files) of the migrate fixtures, each on a fresh copy. Each output
is written under ``--out`` with what legitimately differs between two runs masked: wall times,
milliseconds per step, temporary folder names, process ids. ``--compare A B`` prints the outputs
that differ between two such folders (exit 1 when any does).

    T=$(benchmarks/realcode/pin_engine.sh HEAD)        # the engine before the change
    .venv/bin/python benchmarks/same_outputs.py --tool "$T" --out /tmp/same/before
    .venv/bin/python benchmarks/same_outputs.py --out /tmp/same/after
    .venv/bin/python benchmarks/same_outputs.py --compare /tmp/same/before /tmp/same/after
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERIFY = ["cnn_migrated.py", "linreg_migrated.py", "dropout_migrated.py", "rnn_migrated.py",
          "mistake_model_not_moved.py", "mistake_labels_not_moved.py", "mistake_numpy.py",
          "mistake_rnn_hidden.py", "mistake_plain_attribute.py", "mistake_hardcoded_cuda.py",
          "mistake_loss_weight.py", "mistake_move_back.py", "float64_bug.py", "crash.py",
          "after_training_bug.py", "after_training_fixed.py", "greedy_decoder_migrated.py",
          "worker_cuda_bug.py", "writes_files.py", "downloads/download_hub.py"]
MIGRATE = ["forward_mask/train.py", "host_numpy/fit.py", "silent_cpu/fit.py", "embedding_indices/train.py",
           "gradient_penalty/train.py", "generator_batches/train.py", "notebook_generator/regression.ipynb"]
# what differs between two runs of one engine
MASKS = [
    (re.compile(r'("(?:[a-z_]*seconds|wall_s|[a-z_]*_s|ms_per_step|elapsed|duration|started|pid)"\s*:\s*)[-0-9.eE]+'),
     r"\1#"),
    (re.compile(r"/tmp/[\w.+-]*cpu2gpu[\w.+-]*"), "/tmp/#"),
    (re.compile(r"/tmp/tmp[\w]+"), "/tmp/#"),
    (re.compile(r"/tmp/pytest[\w/-]*"), "/tmp/#"),
    (re.compile(r"(?m)^(\S.*?\s)\d+(?:\.\d+)?(\s*)$"), r"\1#\2"),  # the text table's last column: ms/step
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b"), "# s"),
    (re.compile(r'"step_times": \[[^\]]*\]'), '"step_times": [#]'),
    # the engine's own frames in a traceback: where its code lives is not an output
    (re.compile(r'  File \\"[^"]*?/cpu2gpu/runtime/[^"]*?\\", line \d+, in \w+\\n(?:    (?:(?!\\n).)*\\n)*'),
     "[engine frame]"),
    (re.compile(r"same-[a-z0-9_]{8}"), "same-#"),  # the fixture's temporary copy
    (re.compile(r"\.[0-9a-f]{32}\.partial"), ".#.partial"),  # torch.hub's download in progress
]


def _masked(text: str, work: str) -> str:
    text = text.replace(work, "WORK")
    for pattern, repl in MASKS:
        text = pattern.sub(repl, text)
    return text


def _run(tool: list[str], args: list[str], cwd: Path) -> str:
    done = subprocess.run(tool + args, cwd=cwd, capture_output=True, text=True, timeout=900)
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}"


def record(tool: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in VERIFY:
        for fmt in ("text", "json"):
            with tempfile.TemporaryDirectory(prefix="same-") as tmp:
                src = ROOT / "fixtures" / "runtime" / name
                shutil.copy(src, Path(tmp) / src.name)
                text = _run(tool, ["verify", src.name, "--device", "sim", "-q", "--max-steps", "3",
                                   "--output-format", fmt], Path(tmp))
                (out / f"verify-{name.replace('/', '_')}.{fmt}").write_text(_masked(text, tmp))
                print("verify", name, fmt, text.splitlines()[0], flush=True)
    for name in MIGRATE:
        folder, script = name.split("/")
        with tempfile.TemporaryDirectory(prefix="same-") as tmp:
            work = Path(tmp) / folder
            shutil.copytree(ROOT / "fixtures" / "migrate" / folder, work)
            text = _run(tool, ["migrate", script, "--in-place", "-q", "--max-steps", "3",
                               "--output-format", "json"], work)
            files = "".join(f"--- {p.relative_to(work)}\n{p.read_text(errors='replace')}"
                            for p in sorted(work.rglob("*")) if p.is_file() and "__pycache__" not in p.parts)
            (out / f"migrate-{folder}.txt").write_text(_masked(text + files, tmp))
            print("migrate", name, text.splitlines()[0], flush=True)


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    differ = 0
    for name in names:
        left = (a / name).read_text() if (a / name).exists() else "(missing)\n"
        right = (b / name).read_text() if (b / name).exists() else "(missing)\n"
        if left != right:
            differ += 1
            print(f"== {name} differs")
            sys.stdout.writelines(list(difflib.unified_diff(left.splitlines(True), right.splitlines(True), n=1))[:40])
    print(f"{len(names) - differ} of {len(names)} outputs the same")
    return 1 if differ else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tool", default=str(Path(sys.executable).parent / "cpu2gpu"))
    p.add_argument("--out", type=Path)
    p.add_argument("--compare", nargs=2, type=Path)
    a = p.parse_args(argv)
    if a.compare:
        return compare(*a.compare)
    record([a.tool], a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
