"""Stand-in data for sthalles/SimCLR: run.py builds torchvision's CIFAR10 (train split, python pickles in
<data>/cifar-10-batches-py/data_batch_1..5, test_batch, batches.meta) or STL10 (default, 'unlabeled'
split), always with download=True. The stand-in writes CIFAR-10 pickles of 8 random 32x32 images per
training batch file (40 images; 2 test images)."""
import pickle
from pathlib import Path

import numpy as np

RECIPE = {
    "cwd": "",
    "script": "run.py",
    # cifar10 (32x32) is the smaller of the two datasets the project offers; 40 images at batch 16 -> 2 steps
    "args": ["-data", "./datasets", "-dataset-name", "cifar10", "--epochs", "1", "-b", "16", "-j", "0",
             "--log-every-n-steps", "1"],
    "env": {},
    "packages": ["torchvision==0.16.2", "requests==2.32.3", "urllib3==2.2.3", "idna==3.10",
                 "charset-normalizer==3.4.0", "certifi==2024.8.30", "tensorboard==2.21.0", "absl-py==2.5.1"],
    # the GPU is used whenever one is visible; --disable-cuda turns it off, no flag turns it on
    "device_flag": None,
    "runs": False,
    "note": "Cannot run on stand-in data: torchvision's CIFAR10/STL10 check the MD5 of every data file (download=True "
            "is hard-coded), so made-up files are refetched and the run stops without network (urllib.error.URLError "
            "in download_url). torchvision 0.16.2 is the newest that imports on CPU torch 2.13 without its C ops; its "
            "ColorJitter hue also fails under numpy 2 (OverflowError). With the MD5 check bypassed and numpy 1.26 "
            "(both outside the project), this data trains 2 steps and saves the checkpoint.",
}


def _batch(rng, n, name):
    # layout of the CIFAR-10 python pickles: uint8 rows of 3072 (R, G, B planes of 32x32), int labels
    return {"batch_label": name, "labels": rng.integers(0, 10, n).tolist(),
            "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "filenames": [f"img_{i}.png" for i in range(n)]}


def make(root: Path) -> None:
    rng = np.random.default_rng(0)
    folder = root / "datasets" / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    files = {f"data_batch_{i}": _batch(rng, 8, f"training batch {i} of 5") for i in range(1, 6)}
    files["test_batch"] = _batch(rng, 2, "testing batch 1 of 1")
    files["batches.meta"] = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                             "horse", "ship", "truck"], "num_cases_per_batch": 8, "num_vis": 3072}
    for name, obj in files.items():
        (folder / name).write_bytes(pickle.dumps(obj, protocol=2))
