"""Stand-in data for LeeJunHyun/Image_Segmentation: ISIC 2018 lesion segmentation as the code reads
it, dataset/{train,valid,test}/ISIC_<id>.jpg with the masks in dataset/<split>_GT/ISIC_<id>_segmentation.png.
The stand-in writes 2 train, 1 valid and 1 test pair of 64x32 images (noise RGB, binary ellipse mask)."""
from pathlib import Path

import numpy as np
from PIL import Image

RECIPE = {
    "cwd": "",
    "script": "main.py",
    # batch 1 is the default; 8 loader workers on 2 cores only cost start-up
    "args": ["--batch_size", "1", "--num_workers", "0"],
    "env": {},
    # torchvision 0.16.2 is the newest PyPI wheel that imports on torch 2.13 CPU; its PIL adjust_hue
    # (ColorJitter(hue=0.02) in the train augmentation) overflows on numpy 2, hence numpy 1.26.4
    "packages": ["torchvision==0.16.2", "requests==2.32.3", "urllib3==2.2.3", "idna==3.10",
                 "certifi==2024.8.30", "charset-normalizer==3.4.0", "numpy==1.26.4"],
    "device_flag": None,  # the authors' solver used CUDA whenever torch.cuda.is_available()
    "runs": False,
    "note": "Cannot finish whatever the data: main() overwrites num_epochs with random.choice([100,150,200,250]) "
            "(and lr, augmentation_prob at random, unseeded), and after training the test step raises "
            "UnboundLocalError: cannot access local variable 'best_unet' -- on torch>=1.2 bool+bool is "
            "logical or, so evaluation.py's JS and DC are always 0 and no best model is ever kept.",
}

SPLITS = {"train": 2, "valid": 1, "test": 1}


def make(root: Path) -> None:
    """Write the stand-in data under root (the project copy's root). Deterministic (fixed seeds), no network."""
    rng = np.random.default_rng(0)
    # width 64, height 32: the loader resizes to width 256 and height 256*h/w (multiple of 16),
    # 128 rows, and 512 when the train augmentation rotates by 90 degrees (aspect ratio inverted)
    h, w = 32, 64
    yy, xx = np.mgrid[0:h, 0:w]
    k = 0
    for split, count in SPLITS.items():
        img_dir, gt_dir = root / "dataset" / split, root / "dataset" / (split + "_GT")
        img_dir.mkdir(parents=True, exist_ok=True)
        gt_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(count):
            ident = "%07d" % k
            k += 1
            pixels = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(img_dir / ("ISIC_%s.jpg" % ident), quality=90)
            cy, cx = rng.uniform(0.3, 0.7) * h, rng.uniform(0.3, 0.7) * w
            lesion = ((yy - cy) / (0.3 * h)) ** 2 + ((xx - cx) / (0.3 * w)) ** 2 <= 1
            Image.fromarray(np.where(lesion, 255, 0).astype(np.uint8)).save(
                gt_dir / ("ISIC_%s_segmentation.png" % ident))
