"""Stand-in data for karpathy/minGPT (projects/adder): the project reads no files; AdditionDataset builds
all n-digit addition problems in memory (train/test split by a seeded permutation) and the run writes
out/adder/{args.txt,config.json,model.pt}. So make() writes nothing; the run is shortened by options."""
from pathlib import Path

RECIPE = {
    # run from the repository root: the script imports the `mingpt` package, which the authors get by
    # `pip install -e .` (setup.py is not in the copy); PYTHONPATH=. stands in for that
    "cwd": "",
    "script": "projects/adder/adder.py",
    # the authors' loop never ends (max_iters=None); the evaluation + checkpoint callback runs after
    # the first step (iter 0) and every 500 steps, so 21 steps reach it once and log the loss 3 times
    "args": ["--trainer.max_iters=21"],
    # OMP_NUM_THREADS=1: on this shared 2-core machine the ops of gpt-nano are too small for threads,
    # and two spinning OpenMP threads made the run 7x slower under load
    "env": {"PYTHONPATH": ".", "OMP_NUM_THREADS": "1"},
    "packages": [],
    # Trainer config device='auto' picks 'cuda' whenever it is available ('--trainer.device=cuda' forces it)
    "device_flag": None,
    "runs": True,
    "note": "No data files: the default 2-digit addition problems are generated in memory. Default gpt-nano, "
            "21 iterations at the default batch 64 and 4 loader workers (authors: unbounded); train (9,500) + "
            "test (500) evaluation with greedy generate and model.pt save after iteration 0. Needs the repo "
            "root on PYTHONPATH for `import mingpt` (the authors pip-install the repo).",
}


def make(root: Path) -> None:
    """Nothing to write: the dataset is synthetic and built by the project itself."""
