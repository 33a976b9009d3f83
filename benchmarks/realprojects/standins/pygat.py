"""Stand-in data for Diego999/pyGAT: load_data() reads ./data/cora/cora.content (one line per paper: id, 1433
binary word features, class name; tab-separated) and ./data/cora/cora.cites (pairs of paper ids); each epoch
saves <epoch>.pkl in the working folder and the best one is reloaded for the test. The stand-in is a random
Cora of 1500 papers (the fewest the fixed split range(500, 1500) allows), 64 word features, the 7 Cora classes
and 3000 citations."""
from pathlib import Path

import numpy as np

RECIPE = {
    "cwd": "",
    "script": "train.py",
    # 1 epoch (authors: up to 10000, patience 100) of the default dense GAT (8 heads x 8 hidden): the dense
    # 1500 x 1500 attention takes about 8 s an epoch on 2 cores
    "args": ["--epochs", "1"],
    "env": {},
    "packages": [],
    # the GPU is used whenever available; --no-cuda turns it off, no option turns it on
    "device_flag": None,
    "runs": True,
    "note": "Random Cora stand-in (1500 nodes, 64 features, 7 classes, 3000 edges); default dense GAT, 1 full-batch "
            "epoch (authors: 10000, early stopping) with validation and a checkpoint (0.pkl), then the best "
            "checkpoint is reloaded and tested.",
}

CLASSES = ["Case_Based", "Genetic_Algorithms", "Neural_Networks", "Probabilistic_Methods",
           "Reinforcement_Learning", "Rule_Learning", "Theory"]


def make(root: Path) -> None:
    """Write data/cora/cora.{content,cites} under root."""
    rng = np.random.default_rng(0)
    n_nodes, n_feats, n_edges = 1500, 64, 3000
    # Cora's paper ids are sparse integers, not 0..N-1: keep that so the id -> row map is exercised
    ids = rng.choice(1_000_000, size=n_nodes, replace=False)
    feats = (rng.random((n_nodes, n_feats)) < 0.1).astype(int)
    feats[np.arange(n_nodes), rng.integers(n_feats, size=n_nodes)] = 1  # every paper has a word, as in Cora
    labels = rng.integers(len(CLASSES), size=n_nodes)
    out = root / "data" / "cora"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "cora.content", "w") as f:
        for i in range(n_nodes):
            f.write("\t".join([str(ids[i]), *map(str, feats[i]), CLASSES[labels[i]]]) + "\n")
    src = rng.integers(n_nodes, size=n_edges)
    dst = (src + rng.integers(1, n_nodes, size=n_edges)) % n_nodes  # no self-citations
    with open(out / "cora.cites", "w") as f:
        for a, b in zip(ids[src], ids[dst]):
            f.write(f"{a}\t{b}\n")
