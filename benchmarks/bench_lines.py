"""What recording the executed lines (runtime/tracing/linetrace.py) costs a run: the script's time with and without it.

    python benchmarks/bench_lines.py [--repeat 5] [SCRIPT ...]

Each measurement is a fresh process that imports torch first (not timed), then runs the script as a
verify run does (usercode), with the line recording of every verify run started or not. Prints per script the median
seconds of both and their ratio, measured alternately in one run (so that a busy machine weighs on
both alike). Default scripts: fixture training scripts of several kinds (a CNN over a DataLoader, a
linear regression over tensors, an LSTM).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["fixtures/runtime/cnn_original.py", "fixtures/runtime/linreg_original.py",
           "fixtures/runtime/proven/rnn_band_original.py", "fixtures/runtime/proven/seq2seq_original.py"]

CHILD = r"""
import json, os, runpy, sys, time, io, contextlib
import torch
torch.set_num_threads(1)
script, traced = sys.argv[1], sys.argv[2] == "1"
folder = os.path.dirname(os.path.realpath(script)) + os.sep
from cpu2gpu.runtime.tracing import usercode
from cpu2gpu.runtime.tracing.linetrace import Lines
is_user = lambda f: os.path.realpath(f).startswith(folder)
lines = Lines(is_user)
sys.argv = [script]
t0 = time.perf_counter()
if traced:
    usercode.install(is_user)
    lines.start()
with contextlib.redirect_stdout(io.StringIO()):
    usercode.run_script(script)
lines.stop()
print(json.dumps({"seconds": time.perf_counter() - t0, "lines": len(lines.seen)}))
"""


def measure(script: str, traced: bool) -> dict:
    """One run of a copy of the script in a scratch folder (what it writes, a checkpoint, stays there)."""
    with tempfile.TemporaryDirectory(prefix="cpu2gpu-bench-lines-") as tmp:
        copy = os.path.join(tmp, os.path.basename(script))
        shutil.copy(os.path.join(ROOT, script), copy)
        out = subprocess.run([sys.executable, "-c", CHILD, copy, "1" if traced else "0"], cwd=tmp,
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scripts", nargs="*", default=DEFAULT)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    print(f"python {sys.version.split()[0]}")
    print(f"{'script':48} {'plain s':>8} {'traced s':>9} {'ratio':>6} {'lines':>6}")
    for script in a.scripts:
        plain, traced, seen = [], [], 0
        for _ in range(a.repeat):  # alternately, so that a busy machine weighs on both alike
            plain.append(measure(script, False)["seconds"])
            t = measure(script, True)
            traced.append(t["seconds"])
            seen = t["lines"]
        mp, mt = statistics.median(plain), statistics.median(traced)
        print(f"{script:48} {mp:8.3f} {mt:9.3f} {mt / mp:6.2f} {seen:6d}")


if __name__ == "__main__":
    main()
