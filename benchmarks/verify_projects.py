"""Every fixture project, rewritten by the tool as a whole, against its original on the simulated GPU.

Usage: python benchmarks/verify_projects.py [sim|cuda]   (about a minute a project on 2 cores)
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime"))

from test_projects_verify import PROJECTS, migrate  # noqa: E402

from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "sim"
ENTRIES = {"src_layout": ["run.py"], "two_entries": ["train_a.py", "train_b.py"]}

passed = total = 0
for project in sorted(p for p in PROJECTS.iterdir() if p.is_dir()):
    for entry in ENTRIES.get(project.name, ["main.py"]):
        with tempfile.TemporaryDirectory() as tmp:
            original, migrated = migrate(project, Path(tmp))
            rep = verify(str(migrated / entry), against=str(original / entry), device=DEVICE, cwd=str(migrated),
                         max_steps=6, timeout=300)
        total += 1
        passed += rep["verdict"] == "pass"
        reasons = "; ".join(r.get("cause", str(r)) for r in rep["reasons"])[:200]
        print(f"{project.name:20s} {entry:12s} {rep['verdict']:5s} {reasons}", flush=True)
print(f"{passed}/{total} pass verify --device {DEVICE} --against the original")
