"""Stand-in data for yunjey/stargan: CelebA as the code reads it, data/celeba/images/*.jpg and
data/celeba/list_attr_celeba.txt (count line, 40 attribute names, then 'file.jpg 1 -1 ...' rows).
The stand-in writes 8 small 72x88 JPEG faces (noise) and 2007 attribute rows cycling over them:
CelebA() puts the first 1999 shuffled rows in its test split, so the train split has 8 rows."""
import random
from pathlib import Path

import numpy as np
from PIL import Image

RECIPE = {
    "cwd": "",
    "script": "main.py",
    # 1 iteration with n_critic 1: a D step (with gradient penalty) and a G step, then the sample
    # grid, the checkpoints and one lr decay; no tensorboard (logger.py needs TF1's
    # tf.summary.FileWriter); no loader worker
    "args": ["--dataset", "CelebA", "--image_size", "64", "--celeba_crop_size", "64",
             "--batch_size", "2", "--num_iters", "1", "--n_critic", "1", "--num_iters_decay", "1",
             "--log_step", "1", "--sample_step", "1", "--model_save_step", "1",
             "--lr_update_step", "1", "--use_tensorboard", "False", "--num_workers", "0"],
    "env": {},
    # torchvision 0.16.2 is the newest PyPI wheel that imports on torch 2.13 CPU (its CUDA _C fails
    # to load and is skipped; 0.17+ then crash registering fake kernels); it imports requests
    "packages": ["torchvision==0.16.2", "requests==2.32.3", "urllib3==2.2.3", "idna==3.10",
                 "certifi==2024.8.30", "charset-normalizer==3.4.0"],
    "device_flag": None,  # the authors' solver used CUDA whenever torch.cuda.is_available()
    "runs": True,
    "note": "8 noise 72x88 JPEGs, 2007 attribute rows (1999 go to the unused test split); image_size 64 "
            "(the smallest the 6-layer D allows), batch 2, 1 iteration of D+G (n_critic 1); default G/D.",
}

ATTRS = ("5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose "
         "Black_Hair Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee "
         "Gray_Hair Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard "
         "Oval_Face Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair "
         "Wavy_Hair Wearing_Earrings Wearing_Hat Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young").split()
N_IMAGES = 8
N_ROWS = 1999 + N_IMAGES  # rows with (i+1) < 2000 become the test split


def make(root: Path) -> None:
    """Write the stand-in data under root (the project copy's root). Deterministic (fixed seeds), no network."""
    img_dir = root / "data" / "celeba" / "images"
    img_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = ["%06d.jpg" % (k + 1) for k in range(N_IMAGES)]
    for name in names:
        pixels = rng.integers(0, 256, size=(88, 72, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(img_dir / name, quality=90)

    rand = random.Random(0)
    rows = [str(N_ROWS), " ".join(ATTRS)]
    for i in range(N_ROWS):
        values = " ".join(rand.choice(("1", "-1")) for _ in ATTRS)
        rows.append("%s %s" % (names[i % N_IMAGES], values))
    (root / "data" / "celeba" / "list_attr_celeba.txt").write_text("\n".join(rows) + "\n")
