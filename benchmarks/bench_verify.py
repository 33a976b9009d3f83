"""Overhead of `cpu2gpu verify` on a small CNN training loop, per step.

    python benchmarks/bench_verify.py [--runs 5] [--steps 60] [--threads 1]

Three ways of running the same script, each in a fresh process, interleaved:
  plain   python train.py                       (CUDA hidden: trains on the CPU)
  verify  the verify child, --mode cpu           (the harness's hooks, on the CPU)
  sim     the verify child, --mode sim           (the simulated CUDA device)
The script times its own steps (so every way is measured alike) and prints
the median of its steps after a warm-up; the table gives the median over the
runs of each way, and the ratios verify/plain (goal <= 1.2) and sim/plain
(goal <= 2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SCRIPT = r'''
import json, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
STEPS, WARMUP = int(sys.argv[1]), 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(32 * 8 * 8, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


torch.manual_seed(0)
data = TensorDataset(torch.randn(STEPS * 32, 3, 32, 32), torch.randint(0, 10, (STEPS * 32,)))
loader = DataLoader(data, batch_size=32, shuffle=True)
net = Net().to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
times = []
for images, labels in loader:
    t = time.perf_counter()
    images, labels = images.to(device), labels.to(device)
    optimizer.zero_grad()
    loss = criterion(net(images), labels)
    loss.backward()
    optimizer.step()
    loss.item()
    times.append(time.perf_counter() - t)
steady = sorted(times[WARMUP:])
print("STEP_MS", json.dumps(1000 * steady[len(steady) // 2]))
'''


def run_once(way: str, script: str, steps: int, env: dict) -> tuple:
    workdir = os.path.dirname(script)
    if way == "plain":
        cmd = [sys.executable, script, str(steps)]
    else:
        result = os.path.join(workdir, f"result-{way}.json")
        cmd = [sys.executable, "-m", "cpu2gpu.runtime", "--mode", "cpu" if way == "verify" else "sim",
               "--result", result, "--workdir", workdir, "--orig-root", workdir, "--", script, str(steps)]
    env = dict(env)
    if way != "sim":
        env["CUDA_VISIBLE_DEVICES"] = ""
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("STEP_MS")), None)
    if line is None:
        raise SystemExit(f"{way} run failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return json.loads(line.split(None, 1)[1]), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for every run")
    opts = ap.parse_args()
    env = dict(os.environ)
    if opts.threads:
        env["OMP_NUM_THREADS"] = str(opts.threads)
    ways = ("plain", "verify", "sim")
    step_ms = {w: [] for w in ways}
    wall = {w: [] for w in ways}
    with tempfile.TemporaryDirectory(prefix="cpu2gpu-bench-") as tmp:
        script = os.path.join(tmp, "train_cnn.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        for i in range(opts.runs):
            for way in ways:  # interleaved, so that drift in the machine's load hits all alike
                ms, w = run_once(way, script, opts.steps, env)
                step_ms[way].append(ms)
                wall[way].append(w)
                print(f"  run {i + 1}/{opts.runs} {way:6s} {ms:7.2f} ms/step  {w:5.1f} s", file=sys.stderr)

    med = {w: statistics.median(step_ms[w]) for w in ways}
    threads = env.get("OMP_NUM_THREADS", "default")
    print(f"small CNN (2 conv + 2 linear, batch 32, 3x32x32), {opts.steps} steps, median step after 10 "
          f"warm-up steps; {opts.runs} runs each; OMP_NUM_THREADS={threads}; {os.cpu_count()} CPUs")
    print(f"{'way':<24}{'median ms/step':>15}   {'runs (ms/step)':<{max(16, 8 * opts.runs)}}{'median wall s':>14}")
    label = {"plain": "plain CPU run", "verify": "verify, --device cpu", "sim": "verify, --device sim"}
    for w in ways:
        runs = " ".join(f"{x:.2f}" for x in step_ms[w])
        print(f"{label[w]:<24}{med[w]:>15.2f}   {runs:<{max(16, 8 * opts.runs)}}{statistics.median(wall[w]):>14.1f}")
    print(f"harness overhead (verify cpu / plain): {med['verify'] / med['plain']:.2f}x   (goal <= 1.2x)")
    print(f"sim overhead     (sim / plain):        {med['sim'] / med['plain']:.2f}x   (goal <= 2x)")


if __name__ == "__main__":
    main()
