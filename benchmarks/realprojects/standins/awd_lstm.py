"""Stand-in data for salesforce/awd-lstm-lm: the default corpus is read from data/penn/{train,valid,test}.txt
(Penn Treebank as distributed by Mikolov: lower-case words separated by spaces, one sentence a line,
'<unk>' for rare words, 'N' for numbers); the stand-in writes a 150-word vocabulary and about
1,000 / 320 / 120 tokens of made-up sentences."""
import random
from pathlib import Path

RECIPE = {
    "cwd": "",
    "script": "main.py",
    # default model (3-layer AWD-LSTM 400/1150, weight drop, split-cross loss); batch and bptt shrunk so
    # the one epoch is a few steps; --save fixed so no timestamped file name
    "args": ["--epochs", "1", "--batch_size", "10", "--bptt", "30", "--log-interval", "1",
             "--save", "model.pt"],
    # model_load() torch.load()s a pickled [model, criterion, optimizer]; torch >= 2.6 refuses that
    # by default (weights_only=True), the authors wrote it for torch 0.x. OMP_NUM_THREADS=1: on this
    # shared 2-core machine two spinning OpenMP threads made the run 2-3x slower under load
    "env": {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "OMP_NUM_THREADS": "1"},
    "packages": [],
    # '--cuda' is action='store_false': args.cuda is True unless --cuda is given, so the authors'
    # code is on the GPU by default and the flag turns it OFF
    "device_flag": None,
    "runs": True,
    "note": "PTB stand-in of ~1.4k tokens over 150 words; default model, 1 epoch of 3 steps at batch 10 / "
            "bptt 30, then validation, model_save, model_load and the test pass (batch 1). Needs "
            "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 because the final torch.load of the pickled model predates "
            "weights_only.",
}


def _text(rng: random.Random, vocab: list, ntokens: int) -> str:
    lines, n = [], 0
    while n < ntokens:
        k = rng.randint(8, 25)
        # a skewed (Zipf-like) word choice, as in real text
        words = [vocab[min(int(rng.paretovariate(1.0)) - 1, len(vocab) - 1)] for _ in range(k)]
        lines.append(" " + " ".join(words) + " ")  # PTB lines start and end with a space
        n += k + 1  # + <eos>
    return "\n".join(lines) + "\n"


def make(root: Path) -> None:
    """Write data/penn/{train,valid,test}.txt under root."""
    rng = random.Random(0)
    vocab = ["the", "<unk>", "N", "of", "to", "a", "in", "and", "'s", "that"]
    vocab += [f"w{i}" for i in range(140)]
    d = root / "data" / "penn"
    d.mkdir(parents=True, exist_ok=True)
    for split, ntok in (("train", 1000), ("valid", 320), ("test", 120)):
        (d / f"{split}.txt").write_text(_text(rng, vocab, ntok))
