"""Stand-in data for weiaicunzai/pytorch-cifar100: train.py reads torchvision's CIFAR100(root='./data',
download=True), i.e. the python pickles data/cifar-100-python/{train,test,meta} ('data' uint8 rows of
3072 = R, G, B planes of 32x32, 'fine_labels', 'coarse_labels'; meta: label names). The stand-in writes
those pickles with 2 random training images and 2 test images."""
import pickle
from pathlib import Path

import numpy as np

RECIPE = {
    "cwd": "",
    "script": "train.py",
    # -net is required (no default); mobilenet was the fastest of those tried here. The 200 epochs
    # are hard-coded (conf/global_settings.py EPOCH), so the data is 1 batch an epoch
    "args": ["-net", "mobilenet", "-b", "2"],
    "env": {},
    # torchvision 0.16.2 is the newest PyPI wheel that imports on torch 2.13 CPU (newer ones crash
    # registering fake kernels for their CUDA-linked C ops); torch.utils.tensorboard needs tensorboard
    "packages": ["torchvision==0.16.2", "requests==2.32.3", "urllib3==2.2.3", "idna==3.10",
                 "charset-normalizer==3.4.0", "certifi==2024.8.30", "tensorboard==2.21.0", "absl-py==2.5.1"],
    "device_flag": "-gpu",
    "runs": False,
    "note": "Cannot run on stand-in data: torchvision's CIFAR100 is built with download=True hard-coded and checks the "
            "MD5 of every file, so made-up pickles are refetched and the run stops without network "
            "(urllib.error.URLError in download_url). With the MD5 check bypassed (outside the project) this data "
            "runs to exit 0: 200 hard-coded epochs of 1 step + test + tensorboard histograms, 20 checkpoints, "
            "but takes ~300 s here (4 loader workers started twice an epoch, hard-coded too).",
}


def _split(rng, n: int, name: str) -> dict:
    return {"batch_label": name, "filenames": [f"img_{i}.png" for i in range(n)],
            "fine_labels": rng.integers(0, 100, n).tolist(), "coarse_labels": rng.integers(0, 20, n).tolist(),
            "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)}


def make(root: Path) -> None:
    """Write data/cifar-100-python/{train,test,meta} under root."""
    rng = np.random.default_rng(0)
    folder = root / "data" / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train": _split(rng, 2, "training batch 1 of 1"), "test": _split(rng, 2, "testing batch 1 of 1"),
             "meta": {"fine_label_names": [f"class_{i}" for i in range(100)],
                      "coarse_label_names": [f"superclass_{i}" for i in range(20)]}}
    for name, obj in files.items():
        # torchvision reads them with pickle.load(f, encoding='latin1'); protocol 2 as the originals
        (folder / name).write_bytes(pickle.dumps(obj, protocol=2))
