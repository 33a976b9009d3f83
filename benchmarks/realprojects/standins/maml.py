"""Stand-in data for dragen1860/MAML-Pytorch (miniImageNet): MiniImagenet reads <root>/train.csv and
<root>/test.csv (header, then `filename,label` rows; the label is the file name's first 9 characters, e.g.
n0153282900000005.jpg,n01532829) and the images under <root>/images/, resized to 84x84 on loading. <root> is
hard-coded in miniimagenet_train.py as /home/i/tmp/MAML-Pytorch/miniimagenet/. The stand-in has 3 classes of
3 random 16x16 JPEGs for each split, written under the project copy and linked from that absolute path."""
import os
from pathlib import Path

import numpy as np
from PIL import Image

RECIPE = {
    "cwd": "",
    "script": "miniimagenet_train.py",
    # The epoch is fixed at 10000 episodes (batchsz=10000 in the script) and --epoch counts episodes, so
    # --epoch 10000 is the fewest that trains. Each episode is one task of the meta-batch, so the cost is set by
    # the task size: 2-way 1-shot with 1 query image (authors: 5-way, 15 queries), 2 inner steps (authors: 5;
    # with 1 the meta loss has no graph) and 2 at test (authors: 10). --task_num 25 gives 400 meta steps, which
    # is also below 500, so the evaluation on the 100 test episodes runs once (after step 0), as the authors'
    # loop does at every 500 steps. --imgsz stays 84: the last linear layer is hard-coded for it.
    "args": ["--epoch", "10000", "--n_way", "2", "--k_spt", "1", "--k_qry", "1", "--task_num", "25",
             "--update_step", "2", "--update_step_test", "2"],
    "env": {},
    # MiniImagenet.py uses np.int (removed in numpy 1.24): numpy 1.23.5, with a scipy built for it (the script
    # imports scipy.stats). torchvision: only transforms are used; the PyPI wheels of 0.17+ fail to import on a
    # CPU-only torch (their C ops need libtorch_cuda and the fake-op registration is unconditional), 0.16.2 skips
    # the ops when its C extension does not load; it imports requests, hence the last five.
    "packages": ["numpy==1.23.5", "scipy==1.11.4", "torchvision==0.16.2", "requests==2.31.0", "urllib3==2.1.0",
                 "idna==3.6", "certifi==2023.11.17", "charset-normalizer==3.3.2"],
    # the authors' script always uses torch.device('cuda'); no option
    "device_flag": None,
    # Runs, but cannot finish in 60 s: the 10000 episodes of the one epoch are hard-coded and each is a 2-way
    # task through the 84x84 4-conv learner (about 67 ms of CPU each, 1 thread): over 10 CPU-minutes.
    "runs": False,
    "note": "Too slow whatever the data: the script fixes 10000 training episodes per epoch (batchsz=10000, no "
            "option) and 84x84 inputs (the linear layer is sized for them), ~670 CPU-s for the smallest useful "
            "tasks. With these args it trains 400 meta steps of 25 2-way 1-shot tasks and runs the 100-episode "
            "fine-tuning test once, after step 0 (~15 CPU-s in). Data: random 3-class x 3-image miniImageNet "
            "stand-in per split, at the script's hard-coded absolute root (a symlink to <copy>/miniimagenet).",
}

# the script's hard-coded dataset root (absolute; not an option)
ABS_ROOT = Path("/home/i/tmp/MAML-Pytorch/miniimagenet")


def make(root: Path) -> None:
    """Write miniimagenet/{train,test}.csv and images/ under root and point ABS_ROOT at it."""
    rng = np.random.default_rng(0)
    data = root / "miniimagenet"
    (data / "images").mkdir(parents=True, exist_ok=True)
    for split, first_class in (("train", 1000), ("test", 2000)):
        rows = ["filename,label"]
        for c in range(3):
            label = "n%08d" % (first_class + c)  # a 9-character WordNet-style id, as the loader expects
            for i in range(3):
                name = "%s%08d.jpg" % (label, i + 1)
                pixels = rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(data / "images" / name, quality=90)
                rows.append(f"{name},{label}")
        (data / f"{split}.csv").write_text("\n".join(rows) + "\n")
    # replace the link atomically (a run from another copy may be reading through it); never a real folder
    if ABS_ROOT.exists() and not ABS_ROOT.is_symlink():
        raise FileExistsError(f"{ABS_ROOT} is a real folder, not a stand-in link: remove it by hand")
    ABS_ROOT.parent.mkdir(parents=True, exist_ok=True)
    tmp = ABS_ROOT.with_name(ABS_ROOT.name + ".tmp%d" % os.getpid())
    tmp.symlink_to(data.resolve(), target_is_directory=True)
    os.replace(tmp, ABS_ROOT)
