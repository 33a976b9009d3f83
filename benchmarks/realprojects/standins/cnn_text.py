"""Stand-in data for Shawn1993/cnn-text-classification-pytorch: the default MR dataset is read from
./rt-polaritydata/rt-polarity.neg and rt-polarity.pos (one review sentence a line, downloaded if the
folder is missing); the stand-in writes 80 short made-up sentences per polarity (144 train / 16 dev)."""
import random
from pathlib import Path

RECIPE = {
    "cwd": "",
    "script": "main.py",
    # 144 training sentences at batch 64 = 3 steps; evaluate (and save the best model) every step
    "args": ["-epochs", "1", "-test-interval", "1"],
    # one thread: on this shared 2-core machine two spinning OpenMP threads slow small ops down under load
    "env": {"OMP_NUM_THREADS": "1"},
    "packages": [],
    # the authors' code uses the GPU whenever one is visible (args.cuda = not -no-cuda and
    # torch.cuda.is_available()); -no-cuda turns it off, no flag turns it on
    "device_flag": None,
    "runs": True,
    "note": "MR stand-in: 160 sentences of 6-20 words drawn from small positive/negative/neutral word "
            "lists; default model (embed 128, kernels 3,4,5 x 100), one epoch of 3 steps with dev "
            "evaluation and best-model snapshot after each step. The split shuffle is unseeded in the code.",
}

POS = ["good", "great", "moving", "funny", "brilliant", "warm", "charming", "smart", "fresh", "lovely"]
NEG = ["bad", "dull", "boring", "awful", "tedious", "flat", "silly", "weak", "messy", "stale"]
NEUTRAL = ["the", "film", "movie", "is", "a", "story", "of", "and", "with", "it", "'s", "plot",
           "acting", "director", ",", "cast", "this", "very", "too", "script"]


def _sentences(rng: random.Random, words: list, n: int) -> list:
    lines = []
    for _ in range(n):
        k = rng.randint(6, 20)
        toks = [rng.choice(words) if rng.random() < 0.3 else rng.choice(NEUTRAL) for _ in range(k)]
        lines.append(" ".join(toks) + " .")
    return lines


def make(root: Path) -> None:
    """Write rt-polaritydata/rt-polarity.{neg,pos} under root (the run starts in root)."""
    rng = random.Random(0)
    d = root / "rt-polaritydata"
    d.mkdir(parents=True, exist_ok=True)
    # the original files are latin-1 text, one sentence a line
    (d / "rt-polarity.neg").write_text("\n".join(_sentences(rng, NEG, 80)) + "\n")
    (d / "rt-polarity.pos").write_text("\n".join(_sentences(rng, POS, 80)) + "\n")
