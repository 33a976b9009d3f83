"""Stand-in data for martinarjovsky/WassersteinGAN: with --dataset folder the code reads an
ImageFolder tree (dataroot/<class>/<image>); the stand-in writes data/faces/ with 16 noise PNGs
of 40x40 (the lsun and cifar10 paths need an LMDB or a download instead)."""
from pathlib import Path

import numpy as np
from PIL import Image

RECIPE = {
    "cwd": "",
    "script": "main.py",
    # 1 epoch of 4 batches: all 4 go to the critic (100 D iterations while gen_iterations < 25),
    # then 1 G step and the epoch's checkpoints; 'samples' is the default experiment folder
    "args": ["--dataset", "folder", "--dataroot", "data", "--imageSize", "32", "--batchSize", "4",
             "--niter", "1", "--workers", "0"],
    "env": {},
    # torchvision 0.16.2 is the newest PyPI wheel that imports on torch 2.13 CPU; none on PyPI
    # still has transforms.Scale (gone since 0.15)
    "packages": ["torchvision==0.16.2", "requests==2.32.3", "urllib3==2.2.3", "idna==3.10",
                 "certifi==2024.8.30", "charset-normalizer==3.4.0"],
    "device_flag": "--cuda",
    "runs": False,
    "note": "Fails before training whatever the data: main.py builds transforms.Scale "
            "(AttributeError: module 'torchvision.transforms' has no attribute 'Scale'), and past that "
            "'data = data_iter.next()' has no DataLoader iterator .next() in torch 2.x; "
            "the data would be 16 noise 40x40 PNGs in one ImageFolder class, imageSize 32, batch 4, 1 epoch.",
}


def make(root: Path) -> None:
    """Write the stand-in data under root (the project copy's root). Deterministic (fixed seeds), no network."""
    folder = root / "data" / "faces"  # ImageFolder needs one class subfolder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(16):
        pixels = rng.integers(0, 256, size=(40, 40, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / ("%03d.png" % k))
