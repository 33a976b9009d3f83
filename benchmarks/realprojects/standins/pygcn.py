"""Stand-in data for tkipf/pygcn: load_data() reads ../data/cora/cora.content (one line per paper: id, 1433
binary word features, class name; tab-separated) and ../data/cora/cora.cites (pairs of paper ids), relative
to pygcn/. The stand-in is a random Cora of 1500 papers (the fewest the fixed split range(500, 1500) allows),
64 word features, the 7 Cora classes and 3000 citations."""
from pathlib import Path

import numpy as np

RECIPE = {
    "cwd": "pygcn",
    "script": "train.py",
    "args": ["--epochs", "2"],
    # train.py does `from pygcn.utils import ...`: the authors get the package by `python setup.py install`
    # (setup.py is not in the copy), so the repository root (.. from pygcn/) goes on PYTHONPATH instead.
    # encode_onehot() numbers the classes in set() order, which follows the string hash: fix it.
    "env": {"PYTHONPATH": "..", "PYTHONHASHSEED": "0"},
    "packages": [],
    # the GPU is used whenever available; --no-cuda turns it off, no option turns it on
    "device_flag": None,
    "runs": True,
    "note": "Random Cora stand-in (1500 nodes, 64 features, 7 classes, 3000 edges); default 2-layer GCN, 2 full-batch "
            "epochs (authors: 200) with validation each epoch, then the test evaluation. Needs the repository root "
            "on PYTHONPATH for `import pygcn` and PYTHONHASHSEED for a stable class numbering.",
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
