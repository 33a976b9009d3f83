"""Stand-in data for sgrvinod/a-PyTorch-Tutorial-to-Image-Captioning: train.py reads, from the folder
hard-coded in it ('/media/ssd/caption data'), what create_input_files() writes: WORDMAP_<name>.json,
{TRAIN,VAL}_IMAGES_<name>.hdf5 ('images' uint8 N x 3 x H x W, attr captions_per_image) and
{TRAIN,VAL}_CAPTIONS/_CAPLENS_<name>.json; the Encoder loads ImageNet ResNet-101 weights through the
torch hub cache. The stand-in makes 2 train and 1 val images of 32x32 with 5 two-word captions each,
and a randomly initialised resnet101-63fe2227.pth in a TORCH_HOME under the project root."""
import json
from pathlib import Path

import numpy as np

# train.py has no options: data_folder and data_name are module constants
DATA = Path("/media/ssd/caption data")
NAME = "coco_5_cap_per_img_5_min_word_freq"

RECIPE = {
    "cwd": "",
    "script": "train.py",
    "args": [],
    "env": {"TORCH_HOME": "torch_home"},  # relative to cwd: where make() puts the stand-in weights
    "packages": ["h5py==3.12.1", "torchvision==0.16.2", "requests==2.32.3", "urllib3==2.2.3", "idna==3.10",
                 "charset-normalizer==3.4.0", "certifi==2024.8.30", "nltk==3.10.4", "regex==2026.12.2",
                 "click==8.5.1", "defusedxml==0.7.1"],
    "device_flag": None,
    "runs": False,
    "note": "Fails at import whatever the data: utils.py does `from scipy.misc import imread, imresize` "
            "(ImportError: cannot import name 'imread' from 'scipy.misc'; removed in scipy 1.2, which has "
            "no Python 3.11 wheel). Past that, train() would stop at `scores, _ = pack_padded_sequence(...)` "
            "(ValueError: too many values to unpack; PackedSequence has 4 fields since torch 1.1). The data "
            "goes to the absolute folder the code hard-codes.",
}

CAPS_PER_IMAGE = 5
MAX_LEN = 4  # create_input_files pads every caption to MAX_LEN + 2 tokens


def _split(rng, split, n_images, word_map):
    import h5py

    words = [w for w in word_map if not w.startswith("<")]
    with h5py.File(DATA / f"{split}_IMAGES_{NAME}.hdf5", "w") as h:
        h.attrs["captions_per_image"] = CAPS_PER_IMAGE
        h.create_dataset("images", data=rng.integers(0, 256, (n_images, 3, 32, 32), dtype=np.uint8))
    captions, caplens = [], []
    for _ in range(n_images * CAPS_PER_IMAGE):
        # two words: 3 decode steps, so no 4-gram and BLEU-4 stays 0 -> early stop after 20 epochs
        toks = [word_map[w] for w in rng.choice(words, 2)]
        pad = [word_map["<pad>"]] * (MAX_LEN - len(toks))
        captions.append([word_map["<start>"], *toks, word_map["<end>"], *pad])
        caplens.append(len(toks) + 2)
    (DATA / f"{split}_CAPTIONS_{NAME}.json").write_text(json.dumps(captions))
    (DATA / f"{split}_CAPLENS_{NAME}.json").write_text(json.dumps(caplens))


def make(root: Path) -> None:
    import torch
    import torchvision

    rng = np.random.default_rng(0)
    DATA.mkdir(parents=True, exist_ok=True)
    # word map laid out as create_input_files() does: words from 1, then <unk>, <start>, <end>, <pad> = 0
    words = ["a", "man", "dog", "red", "car", "on", "the", "street", "two", "cat"]
    word_map = {w: i + 1 for i, w in enumerate(words)}
    for tok in ("<unk>", "<start>", "<end>"):
        word_map[tok] = len(word_map) + 1
    word_map["<pad>"] = 0
    (DATA / f"WORDMAP_{NAME}.json").write_text(json.dumps(word_map))
    _split(rng, "TRAIN", 2, word_map)
    _split(rng, "VAL", 1, word_map)

    # resnet101(pretrained=True) loads this file from the hub cache when it exists (no download, no hash check)
    ckpt = root / "torch_home" / "hub" / "checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet101().state_dict(), ckpt / "resnet101-63fe2227.pth")
