"""Stand-in data for yjn870/SRCNN-pytorch: train.py reads two HDF5 files made by the authors' prepare.py
(train: datasets 'lr' and 'hr' of float32 33x33 Y-channel patches, 0..255; eval: groups 'lr' and 'hr'
with one full-size Y image per key '0', '1', ...). The stand-in writes 64 random patches and 2 eval
images of 48x48, lr being a blurred copy of hr as in bicubic down/up-scaling."""
from pathlib import Path

import numpy as np

RECIPE = {
    "cwd": "",
    "script": "train.py",
    "args": ["--train-file", "data/train.h5", "--eval-file", "data/eval.h5", "--outputs-dir", "outputs",
             "--num-epochs", "1", "--batch-size", "16", "--num-workers", "0"],
    "env": {},
    "packages": ["h5py==3.12.1"],
    "device_flag": None,
    "runs": True,
    "note": "64 random 33x33 training patches (4 steps of 16, 1 epoch) and 2 eval images of 48x48 in HDF5; "
            "float32 as prepare.py stores them (uint8 would give float64 batches the float32 model rejects).",
}


def _pair(rng, size):
    # hr: smooth-ish random image; lr: a 3x3 box blur of it, standing in for bicubic down/up-scaling
    hr = rng.uniform(0, 255, (size, size)).astype(np.float32)
    pad = np.pad(hr, 1, mode="edge")
    lr = sum(pad[i:i + size, j:j + size] for i in range(3) for j in range(3)) / 9.0
    return lr.astype(np.float32), hr


def make(root: Path) -> None:
    import h5py

    rng = np.random.default_rng(0)
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    pairs = [_pair(rng, 33) for _ in range(64)]
    with h5py.File(data / "train.h5", "w") as f:
        f.create_dataset("lr", data=np.stack([p[0] for p in pairs]))
        f.create_dataset("hr", data=np.stack([p[1] for p in pairs]))
    with h5py.File(data / "eval.h5", "w") as f:
        lr_group, hr_group = f.create_group("lr"), f.create_group("hr")
        for i in range(2):
            lr, hr = _pair(rng, 48)
            lr_group.create_dataset(str(i), data=lr)
            hr_group.create_dataset(str(i), data=hr)
