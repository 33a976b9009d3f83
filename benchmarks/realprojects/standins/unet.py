"""Stand-in data for milesial/Pytorch-UNet: train.py reads Carvana pairs from ./data/imgs/<id>.jpg and
./data/masks/<id>_mask.gif (the CarvanaDataset, mask values scanned to class indices) and logs to wandb.
The stand-in makes 6 RGB images of 64x64 (32x32 after the default --scale 0.5) with a two-valued
ellipse mask each; wandb runs with WANDB_MODE=disabled (no network)."""
from pathlib import Path

import numpy as np

RECIPE = {
    "cwd": "",
    "script": "train.py",
    # 6 images, 20% validation -> 1 val image and 5 training steps of batch 1, the fewest that still
    # reach the evaluation (it runs every n_train // (5 * batch) steps, never when that is 0)
    "args": ["--epochs", "1", "--batch-size", "1", "--validation", "20"],
    # wandb.init would need network; one OpenMP thread because on this shared 2-core machine the default two
    # spin-waiting threads made the run ~3x slower (86 s against 30 s under the same load)
    "env": {"WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"},
    "packages": ["torchvision==0.16.2", "wandb==0.30.0", "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
                 "typing-inspection==0.4.5", "xxhash==4.1.0", "requests==2.32.3", "urllib3==2.2.3", "idna==3.10",
                 "charset-normalizer==3.4.0", "certifi==2024.8.30", "opentelemetry-api==1.45.2",
                 "opentelemetry-sdk==1.45.2", "opentelemetry-semantic-conventions==0.66b2"],
    # the device is picked by torch.cuda.is_available(), no option
    "device_flag": None,
    "runs": True,
    "note": "6 made-up 64x64 car-like images with 0/1 GIF masks (Carvana layout); default UNet (2 classes, "
            "transposed conv), 1 epoch of 5 steps, a validation Dice round after each step, checkpoint saved. "
            "wandb is imported and init'ed but disabled by WANDB_MODE; OMP_NUM_THREADS=1 only for speed.",
}


def make(root: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    imgs, masks = root / "data" / "imgs", root / "data" / "masks"
    imgs.mkdir(parents=True, exist_ok=True)
    masks.mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[:64, :64]
    for i in range(6):
        # an ellipse ("car") on a noisy background; the mask marks the ellipse with 1, as Carvana's 0/1 GIFs
        cy, cx, ry, rx = rng.integers(24, 40), rng.integers(24, 40), rng.integers(8, 20), rng.integers(12, 24)
        inside = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
        img = rng.integers(0, 120, (64, 64, 3), dtype=np.uint8)
        img[inside] = rng.integers(120, 256, 3, dtype=np.uint8)
        name = f"{i:04d}_{1 + i % 16:02d}"  # Carvana ids look like 0cdf5b5d0ce1_01
        Image.fromarray(img).save(imgs / f"{name}.jpg", quality=95)
        Image.fromarray(inside.astype(np.uint8), mode="L").save(masks / f"{name}_mask.gif")
