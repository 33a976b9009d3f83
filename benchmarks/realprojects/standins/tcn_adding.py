"""Stand-in data for locuslab/TCN (adding problem): the project reads no files; data_generator() builds
50000 training and 1000 test sequences of the adding problem in memory (a fixed count, no option). So make()
writes nothing; the run is made small by the project's own options (shorter sequences, bigger batches)."""
from pathlib import Path

RECIPE = {
    # add_test.py does sys.path.append("../../") to import the TCN package: it must start in its own folder
    "cwd": "TCN/adding_problem",
    "script": "add_test.py",
    # 1 epoch (authors: 10) over the fixed 50000 sequences at batch 2500 = 20 steps, loss printed every 5.
    # The default 8 levels (dilation up to 128, kernel 7) pad every sequence by up to 768 steps whatever
    # --seq_len is: about 12 minutes an epoch here. 2 levels (receptive field 37) of the default 30 channels
    # and kernel 7 still see the whole 10-step sequences (authors: 400).
    "args": ["--epochs", "1", "--batch_size", "2500", "--seq_len", "10", "--levels", "2", "--log-interval", "5"],
    "env": {},
    "packages": [],
    # --cuda is store_false: the GPU is on by default and passing --cuda turns it OFF
    "device_flag": None,
    "runs": True,
    "note": "No data files: the adding-problem sequences are generated in memory (50000 train, 1000 test, fixed). "
            "1 epoch of 20 steps at batch 2500, seq_len 10, 2 levels (authors: 8), then the test evaluation. data_generator() draws the "
            "marker positions with np.random, which the script never seeds: the data differ from run to run.",
}


def make(root: Path) -> None:
    """Nothing to write: the dataset is synthetic and built by the project itself."""
