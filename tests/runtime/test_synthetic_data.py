"""cpu2gpu verify --synthetic-data: stand-in data sets, and "needs data" as its own verdict.

The verify tests run real children (marked slow); the stand-ins and the
needs-data classification are also tested in process. The needs-data tests at
the top import no torch.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

from cpu2gpu.runtime.causes import needsdata

pytestmark = pytest.mark.runtime
HERE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "runtime", "synthetic")
TIMEOUT = 240


# --- needs data: which failures count (no torch) -------------------------------------------

def test_a_missing_file_is_needed_data():
    try:
        open("no/such/features.npy", "rb")
    except FileNotFoundError as e:
        found = needsdata.find(e, needsdata.Tracker())
    assert found == {"path": os.path.abspath("no/such/features.npy"), "what": None, "is_path": True}


def test_a_sys_exit_while_handling_a_missing_file_is_needed_data():
    try:
        try:
            open("absent.csv")
        except FileNotFoundError:
            sys.exit("data not found")
    except SystemExit as e:
        found = needsdata.find(e, None)
    assert found["path"] == os.path.abspath("absent.csv")


def test_a_missing_path_in_a_message_only_is_found():
    # a DataLoader worker re-raises the worker's FileNotFoundError as text
    e = FileNotFoundError("Caught FileNotFoundError in DataLoader worker process 0.\nOriginal Traceback ...\n"
                          "FileNotFoundError: [Errno 2] No such file or directory: 'imgs/001.png'")
    assert needsdata.find(e, None)["path"] == os.path.abspath("imgs/001.png")


def test_the_scripts_own_output_is_not_needed_data(tmp_path):
    tracker = needsdata.Tracker()
    own = str(tmp_path / "checkpoint.pt")
    tracker.audit("open", (own, "wb", 0))
    tracker.audit("os.remove", (own, None))
    e = FileNotFoundError(errno.ENOENT, "No such file or directory", own)
    assert needsdata.find(e, tracker) is None


def test_other_failures_are_not_needed_data():
    assert needsdata.find(RuntimeError("Expected all tensors to be on the same device"), None) is None
    assert needsdata.find(PermissionError(errno.EACCES, "denied", "x"), None) is None


def test_a_data_set_without_stand_in_names_what_it_needs():
    e = needsdata.NeedsData("./voc", "torchvision.datasets.VOCDetection")
    assert needsdata.find(e, None) == {"path": os.path.abspath("./voc"), "what": "torchvision.datasets.VOCDetection",
                                       "is_path": True}
    hub = needsdata.NeedsData("huggingface:someone/private-set", "datasets.load_dataset", is_path=False)
    assert needsdata.find(hub, None)["path"] == "huggingface:someone/private-set"


def test_data_outside_the_copied_folder_is_located(tmp_path):
    orig_root = tmp_path / "project"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.npy").write_bytes(b"")
    workdir = tmp_path / "run" / "work" / "project"
    workdir.mkdir(parents=True)
    missing = os.path.join(str(workdir), "..", "data", "x.npy")
    assert needsdata.locate(missing, str(workdir), str(orig_root)) == (str(tmp_path / "data" / "x.npy"), True)


# --- the stand-ins, in process ---------------------------------------------------------------

@pytest.fixture
def datasets():
    pytest.importorskip("torch")
    from cpu2gpu.runtime.standins import datasets as standin_datasets

    return standin_datasets


def test_cifar10_has_the_real_attributes_shapes_and_dtypes(datasets):
    np = pytest.importorskip("numpy")
    from cpu2gpu.runtime.standins import transforms as T
    from cpu2gpu.runtime.standins.synthdata import TEST_SAMPLES, TRAIN_SAMPLES

    train = datasets.CIFAR10("/never/read", train=True, download=True)
    test = datasets.CIFAR10(root="./data", train=False, download=False,
                            transform=T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(),
                                                 T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]))
    assert isinstance(train.data, np.ndarray) and train.data.dtype == np.uint8
    assert train.data.shape == (TRAIN_SAMPLES, 32, 32, 3) and test.data.shape == (TEST_SAMPLES, 32, 32, 3)
    assert isinstance(train.targets, list) and all(type(t) is int for t in train.targets)
    assert sorted(set(train.targets)) == list(range(10))
    assert train.classes == ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    assert train.class_to_idx == {c: i for i, c in enumerate(train.classes)}
    assert len(train) == TRAIN_SAMPLES and train.train is True and test.train is False
    assert train.train_data is train.data and train.train_labels is train.targets

    img, target = train[0]
    assert img.size == (32, 32) and img.mode == "RGB" and target == train.targets[0]
    assert np.array(img).shape == (32, 32, 3) and np.array(img.convert("L")).shape == (32, 32)
    x, y = test[3]
    assert x.shape == (3, 32, 32) and x.dtype == __import__("torch").float32 and y == test.targets[3]

    c100 = datasets.CIFAR100("./data")
    assert len(c100.classes) == 100 and sorted(set(c100.targets)) == list(range(100))


def test_mnist_family_and_others_have_the_real_layouts(datasets):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    mnist = datasets.MNIST("./data", train=True, download=True)
    assert mnist.data.dtype == torch.uint8 and mnist.data.shape[1:] == (28, 28)
    assert mnist.targets.dtype == torch.int64 and len(mnist.classes) == 10
    assert mnist.train_data is mnist.data and mnist.test_labels is mnist.targets
    img, label = mnist[0]
    assert img.mode == "L" and img.size == (28, 28) and type(label) is int
    letters = datasets.EMNIST("./data", split="letters")
    assert int(letters.targets.min()) == 1 and int(letters.targets.max()) == 26 and len(letters.classes) == 27
    svhn = datasets.SVHN("./data", split="test", download=True)
    assert svhn.data.shape[1:] == (3, 32, 32) and isinstance(svhn.labels, np.ndarray) and svhn[0][0].size == (32, 32)
    folder = datasets.ImageFolder("/absent/train")
    assert folder.classes == [f"class_{i}" for i in range(10)] and len(folder.samples) == len(folder)
    fake = datasets.FakeData(size=5, image_size=(3, 16, 16), num_classes=4)
    assert len(fake) == 5 and fake[2][0].size == (16, 16) and fake[2][1] == fake[2][1] and 0 <= fake[2][1] < 4
    with pytest.raises(needsdata.NeedsData) as info:
        datasets.VOCDetection("./voc", download=True)
    assert info.value.filename == "./voc"


def test_stand_ins_are_deterministic_and_leave_the_global_generators_alone(datasets):
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    import random

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    first = datasets.CIFAR10("a", train=True)
    states = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    second = datasets.CIFAR10("b", train=True)
    assert np.array_equal(first.data, second.data) and first.targets == second.targets
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    assert torch.equal(states[0], torch.get_rng_state())
    assert np.array_equal(states[1], np.random.get_state()[1]) and states[2] == random.getstate()
    other = datasets.CIFAR10("a", train=False)
    assert not np.array_equal(first.data[: len(other)], other.data)  # each split has its own data


def test_transforms_and_utils_work_without_pillow(tmp_path, datasets):
    torch = pytest.importorskip("torch")
    from cpu2gpu.runtime.standins import functional as F
    from cpu2gpu.runtime.standins import transforms as T
    from cpu2gpu.runtime.standins import vutils as standin_vutils

    img = datasets.CIFAR10("./data")[0][0]
    pipeline = T.Compose([T.Resize(64), T.CenterCrop(56), T.RandomResizedCrop(48), T.Grayscale(3),
                          T.ColorJitter(0.4, 0.4), T.RandomRotation(10), T.Pad(2), T.ToTensor()])
    assert pipeline(img).shape == (3, 52, 52)
    t = F.to_tensor(img)
    assert F.to_tensor(F.to_pil_image(t)).allclose(t, atol=1 / 255)
    assert F.hflip(t).flip(-1).equal(t) and F.resize(t, [8, 12]).shape == (3, 8, 12)
    v2 = T.Compose([T.ToImage(), T.ToDtype(torch.float32, scale=True)])
    assert v2(img).dtype == torch.float32 and v2(img).shape == (3, 32, 32)
    grid = standin_vutils.make_grid(torch.rand(10, 1, 8, 8), nrow=5)
    assert grid.shape == (3, 2 * 10 + 2, 5 * 10 + 2)
    standin_vutils.save_image(torch.rand(4, 3, 8, 8), str(tmp_path / "grid.png"))
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_real_torchvision_gets_its_data_sets_replaced(datasets):
    pytest.importorskip("torch")
    from cpu2gpu.runtime.standins import torchvision as standin_torchvision

    class VisionDataset:
        pass

    class MNIST(VisionDataset):
        def __init__(self, root, **kwargs):
            raise RuntimeError("Dataset not found. You can use download=True to download it")

    class VOCDetection(MNIST):
        pass

    real = types.SimpleNamespace(VisionDataset=VisionDataset, MNIST=MNIST, VOCDetection=VOCDetection)
    standin_torchvision.patch_real(types.SimpleNamespace(datasets=real))
    ds = real.MNIST("./data", train=False, download=True)
    assert isinstance(ds, VisionDataset) and isinstance(ds, datasets.MNIST) and len(ds) > 0
    with pytest.raises(needsdata.NeedsData) as info:
        real.VOCDetection("./voc")
    assert info.value.filename == "./voc" and "VOCDetection" in info.value.what


# --- through verify ------------------------------------------------------------------------

def _verify(name, against=None, **kw):
    from cpu2gpu.runtime.judge.verify import verify

    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("jobs", 2)
    return verify(os.path.join(HERE, name), against=os.path.join(HERE, against) if against else None,
                  cwd=HERE, **kw)


def _all(cases: dict) -> dict:
    with ThreadPoolExecutor(2) as pool:
        futures = {k: pool.submit(_verify, *v[0], **v[1]) for k, v in cases.items()}
        return {k: f.result() for k, f in futures.items()}


@pytest.mark.slow
def test_a_torchvision_mnist_script_passes_on_synthetic_data():
    pytest.importorskip("torch")
    rep = _verify("mnist_migrated.py", "mnist_original.py", device="sim", max_steps=4, synthetic_data=True)
    assert rep["verdict"] == "pass", (rep["reasons"], [r.get("exception") for r in rep["runs"]])
    original, sim = rep["runs"]
    assert original["status"] == sim["status"] == "max_steps" and len(original["losses"]) == 4
    comparison = rep["comparisons"][0]
    assert comparison["method"] == "step" and comparison["ok"] and comparison["max_rel_diff"] <= 1e-6
    # the same data in both runs, and what was made is on the record
    assert original["synthetic"]["made"] == sim["synthetic"]["made"]
    made = {(m["dataset"], m["split"]): m["samples"] for m in original["synthetic"]["made"]}
    assert made == {("MNIST", "train"): 256, ("MNIST", "test"): 128}
    from cpu2gpu.runtime.report.report import to_text

    assert "torchvision.datasets.MNIST train: 256 samples" in to_text(rep)


@pytest.mark.slow
def test_a_missing_data_file_gives_the_needs_data_verdict():
    pytest.importorskip("torch")
    from cpu2gpu.runtime.report.report import to_json, to_text

    rep = _verify("npy_migrated.py", "npy_original.py", device="sim", synthetic_data=True)
    assert rep["verdict"] == "needs-data"
    assert [r["status"] for r in rep["runs"]] == ["needs_data", "needs_data"]
    (needed,) = rep["needs_data"]
    assert needed["path"] == os.path.join("data", "features.npy") and needed["exists"] is False
    assert needed["runs"] == ["original (cpu)", "migrated (sim)"]
    assert "needs data: data/features.npy" in to_text(rep) and "NEEDS DATA" in to_text(rep)
    data = json.loads(to_json(rep))
    assert data["verdict"] == "needs-data" and data["needs_data"][0]["path"] == "data/features.npy"
    assert any(r["cause"] == "needs data: data/features.npy" for r in data["reasons"])


def test_the_needs_data_verdict_has_its_own_exit_code(monkeypatch):
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from cpu2gpu.runtime import cli
    from cpu2gpu.runtime.judge import verify

    seen = {}

    def fake_verify(script, args, **kw):
        seen.update(kw)
        return {"verdict": "needs-data", "reasons": [], "comparisons": [], "runs": [], "needs_data": [],
                "settings": {"script": script, "against": None, "max_steps": None, "synthetic_data": True}}

    monkeypatch.setattr(verify, "verify", fake_verify)
    result = CliRunner().invoke(cli.verify, ["--synthetic-data", "--output-format", "json", "train.py"])
    assert result.exit_code == 3 and seen["synthetic_data"] is True
    assert json.loads(result.output)["verdict"] == "needs-data"
    assert sorted(set(cli.EXIT_CODES.values())) == [0, 1, 2, 3]
    assert [v for v, code in cli.EXIT_CODES.items() if code == 3] == ["needs-data"]  # its own code
    assert cli.EXIT_CODES["unproven"] == cli.EXIT_CODES["fail"] == 1


@pytest.mark.slow
def test_without_the_flag_nothing_changes():
    pytest.importorskip("torch")
    from cpu2gpu.runtime.report.report import to_json

    reps = _all({
        "npy": (("npy_migrated.py", "npy_original.py"), {"device": "sim"}),
        "mnist": (("mnist_migrated.py", "mnist_original.py"), {"device": "sim", "max_steps": 2}),
    })
    for rep in reps.values():
        assert rep["verdict"] == "error" and "needs_data" not in json.loads(to_json(rep))
        assert all("synthetic" not in r and r["status"] == "error" for r in rep["runs"])
    assert reps["npy"]["runs"][0]["exception"]["type"] == "FileNotFoundError"
    assert reps["mnist"]["runs"][0]["exception"]["type"] == "ModuleNotFoundError"


# --- the other libraries, on stand-ins of their own APIs (they are not installed here) ------

class _FakeHF:
    """The parts of Hugging Face ``datasets`` the stand-in uses."""

    class Dataset(list):
        @classmethod
        def from_dict(cls, mapping, features=None, split=None):
            ds = cls(dict(zip(mapping, row)) for row in zip(*mapping.values()))
            ds.features, ds.split, ds.column_names = features, split, list(mapping)
            return ds

        def select(self, indices):
            out = type(self)(self[i] for i in indices)
            out.features, out.split, out.column_names = self.features, self.split, self.column_names
            return out

        def to_iterable_dataset(self):
            return iter(self)

    DatasetDict = IterableDatasetDict = dict
    Features = dict

    class ClassLabel:
        def __init__(self, names):
            self.names, self.num_classes = list(names), len(names)

    Value = Image = staticmethod(lambda *args, **kwargs: ("feature", args))

    @staticmethod
    def concatenate_datasets(parts):
        return _FakeHF.Dataset.from_dict({k: [row[k] for p in parts for row in p] for k in parts[0][0]})

    @staticmethod
    def load_dataset(path, *args, **kwargs):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub")


def test_hugging_face_load_dataset_of_a_known_name_is_replaced():
    pytest.importorskip("torch")
    from cpu2gpu.runtime.standins import huggingface as standin_hf

    hf = types.ModuleType("datasets")
    hf.__dict__.update({k: v for k, v in vars(_FakeHF).items() if not k.startswith("__")})
    standin_hf.patch(hf)
    imdb = hf.load_dataset("stanfordnlp/imdb")
    assert set(imdb) == {"train", "test", "unsupervised"} and imdb["train"].column_names == ["text", "label"]
    assert imdb["train"].features["label"].names == ["neg", "pos"] and len(imdb["test"]) == 128
    assert {row["label"] for row in imdb["unsupervised"]} == {-1}
    part = hf.load_dataset("imdb", split="train[:10%]")
    assert len(part) == 26 and part[0] == imdb["train"][0]  # the same data, sliced
    sst2 = hf.load_dataset("glue", "sst2", split="validation")
    assert sst2.column_names == ["idx", "sentence", "label"]
    with pytest.raises(needsdata.NeedsData) as info:
        hf.load_dataset("someone/private-set", split="train")
    assert needsdata.find(info.value, None)["path"] == "huggingface:someone/private-set"
    mine = types.ModuleType("datasets")  # a script's own datasets.py is left alone
    mine.load_dataset = _FakeHF.load_dataset
    standin_hf.patch(mine)
    assert mine.load_dataset is _FakeHF.load_dataset


def test_torchaudio_speech_commands_is_replaced(tmp_path):
    torch = pytest.importorskip("torch")
    from cpu2gpu.runtime.standins import audio as standin_audio

    class COMMONVOICE(torch.utils.data.Dataset):
        def __init__(self, root, **kwargs):
            raise FileNotFoundError(2, "No such file or directory", os.path.join(root, "train.tsv"))

    module = types.ModuleType("torchaudio.datasets")
    module.SPEECHCOMMANDS, module.COMMONVOICE = object, COMMONVOICE
    standin_audio.patch(module)
    train = module.SPEECHCOMMANDS(str(tmp_path), download=True, subset="training")
    waveform, rate, label, speaker, utterance = train[0]
    assert waveform.shape == (1, 16000) and waveform.dtype == torch.float32 and rate == 16000
    assert label in standin_audio.SPEECH_LABELS and isinstance(speaker, str) and isinstance(utterance, int)
    # the official tutorial reads these lists from the data folder
    listed = (tmp_path / "SpeechCommands" / "speech_commands_v0.02" / "validation_list.txt").read_text().split()
    assert len(listed) == len(module.SPEECHCOMMANDS(str(tmp_path), subset="validation"))
    with pytest.raises(needsdata.NeedsData):
        module.COMMONVOICE(str(tmp_path))


def test_sklearn_fetchers_are_replaced(monkeypatch):
    pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    from cpu2gpu.runtime.standins import sklearn as standin_sklearn

    sklearn, utils = types.ModuleType("sklearn"), types.ModuleType("sklearn.utils")
    utils.Bunch = type("Bunch", (dict,), {"__getattr__": dict.__getitem__})
    monkeypatch.setitem(sys.modules, "sklearn", sklearn)
    monkeypatch.setitem(sys.modules, "sklearn.utils", utils)
    module = types.ModuleType("sklearn.datasets")

    def fetch_openml(name=None, **kwargs):
        raise OSError("<urlopen error [Errno -3] Temporary failure in name resolution>")

    def fetch_kddcup99(**kwargs):
        raise OSError("no network")

    module.fetch_openml, module.fetch_kddcup99 = fetch_openml, fetch_kddcup99
    module.fetch_california_housing = module.fetch_20newsgroups = lambda **kw: None
    standin_sklearn.patch(module)
    X, y = module.fetch_openml("mnist_784", version=1, return_X_y=True, as_frame=False)
    assert X.shape == (384, 784) and X.dtype == np.float64 and sorted(set(y)) == [str(i) for i in range(10)]
    housing = module.fetch_california_housing()
    assert housing.data.shape == (384, 8) and housing.feature_names[0] == "MedInc"
    news = module.fetch_20newsgroups(subset="test", categories=["sci.space", "rec.autos"])
    assert news.target_names == ["rec.autos", "sci.space"] and len(news.data) == len(news.target) == 128
    for call in (lambda: module.fetch_openml("titanic"), module.fetch_kddcup99):
        with pytest.raises(needsdata.NeedsData):
            call()
