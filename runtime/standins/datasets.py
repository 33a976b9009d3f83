"""``torchvision.datasets`` stand-ins: small deterministic data of the real shapes, dtypes and classes.

Each class takes the real constructor's arguments (``root`` is never read,
``download=True`` does nothing) and exposes what tutorials use: ``.data``,
``.targets``, ``.classes``, ``.class_to_idx``, the old ``.train_data`` /
``.test_data`` / ``.train_labels`` / ``.test_labels``, ``transform`` and
``target_transform``. The data comes from ``synthdata`` (seeded by the data
set's name and split), so the original and the migrated runs read the same.

Data sets whose real class keeps arrays (MNIST, CIFAR, SVHN, STL10, USPS) build
them at construction; those that keep file lists (ImageFolder, ImageNet, CelebA,
Flowers102...) make each image when it is read.
"""

from __future__ import annotations

import os
import string

import torch
from torch.utils.data import Dataset

from . import synthdata as sd
from ..causes.needsdata import NeedsData
from .image import new_image, pil

SOURCE = "torchvision.datasets"


def _numpy():
    try:
        import numpy  # an optional package
    except ImportError:
        return None
    return numpy


def _as_numpy(t: torch.Tensor):
    """numpy where torchvision keeps numpy (CIFAR, SVHN, STL10, USPS); without numpy, the tensor."""
    np = _numpy()
    return t.numpy().copy() if np is not None else t


class StandardTransform:
    def __init__(self, transform=None, target_transform=None):
        self.transform, self.target_transform = transform, target_transform

    def __call__(self, input, target):
        if self.transform is not None:
            input = self.transform(input)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return input, target

    def __repr__(self):
        body = [type(self).__name__]
        if self.transform is not None:
            body.append(f"Transform: {self.transform!r}")
        if self.target_transform is not None:
            body.append(f"Target transform: {self.target_transform!r}")
        return "\n".join(body)


class VisionDataset(Dataset):
    """The base class, for stand-ins and for the script's own subclasses alike."""

    _repr_indent = 4

    def __init__(self, root=None, transforms=None, transform=None, target_transform=None):
        self.root = os.path.expanduser(root) if isinstance(root, str) else root
        has_separate = transform is not None or target_transform is not None
        if transforms is not None and has_separate:
            raise ValueError("Only transforms or transform/target_transform can be passed as argument")
        self.transform, self.target_transform = transform, target_transform
        self.transforms = StandardTransform(transform, target_transform) if has_separate else transforms

    def __getitem__(self, index):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError

    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        head = "Dataset " + type(self).__name__
        body = [f"Number of datapoints: {self.__len__()}"]
        if self.root is not None:
            body.append(f"Root location: {self.root}")
        body += self.extra_repr().splitlines()
        if self.transforms is not None:
            body += [repr(self.transforms)]
        return "\n".join([head] + [" " * self._repr_indent + line for line in body])


class _Standin(VisionDataset):
    """Shared by the stand-ins: the transforms, the record of what was made, and the old names."""

    _name = ""  # the data set's name, for the seeds (a script's subclass keeps its parent's data)

    def _apply(self, img, target):
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target

    def _record(self, split: str, *arrays) -> None:
        sd.record(SOURCE, self._name, split, len(self), sd.digest(*arrays))

    @property
    def class_to_idx(self):
        own = self.__dict__.get("_class_to_idx")
        return own if own is not None else {c: i for i, c in enumerate(self.classes)}

    @class_to_idx.setter
    def class_to_idx(self, value):
        self.__dict__["_class_to_idx"] = value

    # torchvision's old names, still in many tutorials
    @property
    def train_data(self):
        return self.data

    @property
    def test_data(self):
        return self.data

    @property
    def train_labels(self):
        return self.targets

    @property
    def test_labels(self):
        return self.targets

    def download(self):
        pass

    def _check_exists(self):
        return True

    def _check_integrity(self):
        return True


# --- MNIST and its family: uint8 tensor N x 28 x 28, int64 targets ------------------------

class MNIST(_Standin):
    _name = "MNIST"
    classes = ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four",
               "5 - five", "6 - six", "7 - seven", "8 - eight", "9 - nine"]
    training_file, test_file = "training.pt", "test.pt"
    mirrors: list = []
    resources: list = []
    _side = 28

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=False, **kwargs):
        super().__init__(root, transform=transform, target_transform=target_transform)
        self.train = train
        self._make("train" if train else "test", len(self.classes), offset=0)

    def _make(self, split, num_classes, offset):
        n = sd.split_size(split.startswith("train"))
        self.targets = sd.labels(self._name, split, n, num_classes, offset)
        self.data = sd.images(self._name, split, self.targets, num_classes + offset, 1, self._side, self._side)[:, 0]
        self._record(split, self.data, self.targets)

    @property
    def raw_folder(self):
        return os.path.join(str(self.root), type(self).__name__, "raw")

    @property
    def processed_folder(self):
        return os.path.join(str(self.root), type(self).__name__, "processed")

    def __getitem__(self, index):
        img, target = self.data[index], int(self.targets[index])
        return self._apply(new_image(img, "L"), target)

    def __len__(self):
        return len(self.data)

    def extra_repr(self):
        return f"Split: {'Train' if self.train is True else 'Test'}"


class FashionMNIST(MNIST):
    _name = "FashionMNIST"
    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]


class KMNIST(MNIST):
    _name = "KMNIST"
    classes = ["o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"]


class EMNIST(MNIST):
    _name = "EMNIST"
    splits = ("byclass", "bymerge", "balanced", "letters", "digits", "mnist")
    _merged_classes = {"c", "i", "j", "k", "l", "m", "o", "p", "s", "u", "v", "w", "x", "y", "z"}
    _all_classes = set(string.digits + string.ascii_letters)
    classes_split_dict = {
        "byclass": sorted(_all_classes),
        "bymerge": sorted(_all_classes - _merged_classes),
        "balanced": sorted(_all_classes - _merged_classes),
        "letters": ["N/A"] + list(string.ascii_lowercase),
        "digits": list(string.digits),
        "mnist": list(string.digits),
    }

    def __init__(self, root=None, split="balanced", train=True, transform=None, target_transform=None,
                 download=False, **kwargs):
        if split not in self.splits:
            raise ValueError(f"Unknown value '{split}' for argument split. Valid values are {self.splits}.")
        VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
        self.split, self.train = split, train
        self.classes = self.classes_split_dict[split]
        letters = split == "letters"  # targets 1..26; class 0 is "N/A"
        self._make(f"{'train' if train else 'test'}-{split}", len(self.classes) - letters, offset=int(letters))


class QMNIST(MNIST):
    _name = "QMNIST"
    subsets = {"train": "train", "test": "test", "test10k": "test", "test50k": "test", "nist": "nist"}

    def __init__(self, root=None, what=None, compat=True, train=True, transform=None, target_transform=None,
                 download=False, **kwargs):
        VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
        self.what = what or ("train" if train else "test")
        self.compat, self.train = compat, train
        self._make("train" if self.what in ("train", "nist") else "test", len(self.classes), offset=0)
        if not compat:  # the eight columns of the real file; the class first
            extra = torch.zeros(len(self.targets), 7, dtype=torch.int64)
            self.targets = torch.cat([self.targets.unsqueeze(1), extra], dim=1)

    def __getitem__(self, index):
        img = new_image(self.data[index], "L")
        target = int(self.targets[index]) if self.compat else self.targets[index]
        return self._apply(img, target)


class USPS(_Standin):
    """16 x 16 grey digits: numpy uint8 N x 16 x 16, targets a list of int."""

    _name = "USPS"
    classes = list(string.digits)

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=False, **kwargs):
        super().__init__(root, transform=transform, target_transform=target_transform)
        split = "train" if train else "test"
        targets = sd.labels(self._name, split, sd.split_size(train), 10)
        data = sd.images(self._name, split, targets, 10, 1, 16, 16)[:, 0]
        self.data, self.targets = _as_numpy(data), targets.tolist()
        self._record(split, data, targets)

    def __getitem__(self, index):
        return self._apply(new_image(torch.as_tensor(self.data[index]), "L"), int(self.targets[index]))

    def __len__(self):
        return len(self.data)


# --- CIFAR: numpy uint8 N x 32 x 32 x 3, targets a list of int ---------------------------

class CIFAR10(_Standin):
    _name = "CIFAR10"
    base_folder = "cifar-10-batches-py"
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    meta = {"filename": "batches.meta", "key": "label_names"}

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=False, **kwargs):
        super().__init__(root, transform=transform, target_transform=target_transform)
        self.train = train
        split = "train" if train else "test"
        targets = sd.labels(self._name, split, sd.split_size(train), len(self.classes))
        chw = sd.images(self._name, split, targets, len(self.classes), 3, 32, 32)
        hwc = chw.permute(0, 2, 3, 1).contiguous()
        self.data, self.targets = _as_numpy(hwc), targets.tolist()
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self._record(split, hwc, targets)

    def __getitem__(self, index):
        return self._apply(new_image(torch.as_tensor(self.data[index]), "RGB"), self.targets[index])

    def __len__(self):
        return len(self.data)

    def extra_repr(self):
        return f"Split: {'Train' if self.train is True else 'Test'}"


class CIFAR100(CIFAR10):
    _name = "CIFAR100"
    base_folder = "cifar-100-python"
    meta = {"filename": "meta", "key": "fine_label_names"}
    classes = [
        "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle", "bowl",
        "boy", "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle", "chair",
        "chimpanzee", "clock", "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur", "dolphin",
        "elephant", "flatfish", "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard", "lamp",
        "lawn_mower", "leopard", "lion", "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain",
        "mouse", "mushroom", "oak_tree", "orange", "orchid", "otter", "palm_tree", "pear", "pickup_truck",
        "pine_tree", "plain", "plate", "poppy", "porcupine", "possum", "rabbit", "raccoon", "ray", "road",
        "rocket", "rose", "sea", "seal", "shark", "shrew", "skunk", "skyscraper", "snail", "snake", "spider",
        "squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank", "telephone", "television",
        "tiger", "tractor", "train", "trout", "tulip", "turtle", "wardrobe", "whale", "willow_tree", "wolf",
        "woman", "worm",
    ]


# --- SVHN and STL10: numpy uint8 N x 3 x H x W, numpy labels -----------------------------

class SVHN(_Standin):
    _name = "SVHN"
    classes = list(string.digits)
    split_list = ("train", "test", "extra")

    def __init__(self, root=None, split="train", transform=None, target_transform=None, download=False, **kwargs):
        super().__init__(root, transform=transform, target_transform=target_transform)
        if split not in self.split_list:
            raise ValueError(f"Unknown value '{split}' for argument split. Valid values are {self.split_list}.")
        self.split = split
        labels = sd.labels(self._name, split, sd.split_size(split != "test"), 10)
        data = sd.images(self._name, split, labels, 10, 3, 32, 32)
        self.data, self.labels = _as_numpy(data), _as_numpy(labels)
        self._record(split, data, labels)

    @property
    def targets(self):
        return self.labels

    def __getitem__(self, index):
        img = torch.as_tensor(self.data[index]).permute(1, 2, 0)
        return self._apply(new_image(img, "RGB"), int(self.labels[index]))

    def __len__(self):
        return len(self.data)

    def extra_repr(self):
        return f"Split: {self.split}"


class STL10(SVHN):
    _name = "STL10"
    classes = ["airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"]
    splits = ("train", "train+unlabeled", "unlabeled", "test")

    def __init__(self, root=None, split="train", folds=None, transform=None, target_transform=None,
                 download=False, **kwargs):
        VisionDataset.__init__(self, root, transform=transform, target_transform=target_transform)
        if split not in self.splits:
            raise ValueError(f"Unknown value '{split}' for argument split. Valid values are {self.splits}.")
        self.split, self.folds = split, folds
        n = sd.split_size(split != "test", pixels=96 * 96)
        labels = sd.labels(self._name, split, n, 10)
        data = sd.images(self._name, split, labels, 10, 3, 96, 96)
        if split == "unlabeled":
            labels = torch.full((n,), -1, dtype=torch.int64)
        elif split == "train+unlabeled":
            labels[n // 2:] = -1
        else:
            labels = labels.to(torch.uint8)  # as read from the binary file
        self.data, self.labels = _as_numpy(data), _as_numpy(labels)
        self._record(split, data, labels)


# --- generated on demand -----------------------------------------------------------------

class FakeData(_Standin):
    """As torchvision's: ``size`` items, each made from its index alone (no global random state)."""

    _name = "FakeData"

    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None,
                 target_transform=None, random_offset=0, **kwargs):
        super().__init__(None, transform=transform, target_transform=target_transform)
        self.size, self.num_classes = size, num_classes
        self.image_size, self.random_offset = tuple(image_size), random_offset
        self.classes = [str(i) for i in range(num_classes)]
        sd.record(SOURCE, self._name, f"offset {random_offset}", size, sd.digest(self.image_size, num_classes))

    def __getitem__(self, index):
        if index >= len(self):
            raise IndexError(f"{type(self).__name__} index out of range")
        key = index + self.random_offset
        g = sd.generator(self._name, key)
        target = int(torch.randint(0, self.num_classes, (1,), generator=g, device="cpu")[0])
        c, h, w = self.image_size
        img = sd.images(self._name, str(key), torch.tensor([target]), self.num_classes, c, h, w)[0]
        return self._apply(new_image(img.permute(1, 2, 0)), target)

    def __len__(self):
        return self.size


class _OnDemand(_Standin):
    """A data set of image files in the real library: each image is made when it is read."""

    _shape = (3, 64, 64)

    def _setup(self, split: str, classes: list, train: bool, n: int | None = None):
        self.classes = classes
        self._split_key = split
        self._pixels = self._shape[1] * self._shape[2]
        n = sd.split_size(train, pixels=self._pixels) if n is None else n
        self._labels_t = sd.labels(self._name, split, n, len(classes))
        self.targets = self._labels_t.tolist()
        self._record(split, self._labels_t, self._shape)

    def _image(self, index):
        c, h, w = self._shape
        img = sd.images(self._name, f"{self._split_key}:{index}", self._labels_t[index:index + 1], len(self.classes),
                        c, h, w)[0]
        return new_image(img.permute(1, 2, 0), "L" if c == 1 else "RGB")

    def __getitem__(self, index):
        if index >= len(self):
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._apply(self._image(index), self.targets[index])

    def __len__(self):
        return len(self.targets)


IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
DEFAULT_FOLDER_CLASSES = [f"class_{i}" for i in range(10)]


def default_loader(path):
    P = pil()
    if P is None:
        raise NeedsData(path, "torchvision.datasets.folder.default_loader (no Pillow)")
    with open(path, "rb") as f:
        return P.open(f).convert("RGB")


pil_loader = default_loader


def find_classes(directory):
    """The class folders of ``directory`` when it exists (their names only), else ten generic ones."""
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))
    except OSError:
        names = []
    classes = names or list(DEFAULT_FOLDER_CLASSES)
    return classes, {c: i for i, c in enumerate(classes)}


class DatasetFolder(_OnDemand):
    """Classes from the folder names when the folder exists; images are made, never read
    (a ``loader`` given by the script is not called). RGB 64 x 64."""

    _name = "DatasetFolder"

    def __init__(self, root=None, loader=None, extensions=None, transform=None, target_transform=None,
                 is_valid_file=None, allow_empty=False, **kwargs):
        super().__init__(root, transform=transform, target_transform=target_transform)
        classes, class_to_idx = self.find_classes(os.fspath(root) if root is not None else "")
        base = os.path.basename(os.path.normpath(os.fspath(root))) if root is not None else ""
        lower = base.lower()
        train = not any(k in lower for k in ("val", "test", "valid"))
        self._setup(f"{base or 'root'}", classes, train)
        self.loader, self.extensions = loader or default_loader, extensions
        self.samples = [(os.path.join(str(root), classes[t], f"{i:05d}.png"), t) for i, t in enumerate(self.targets)]
        self.imgs = self.samples

    @staticmethod
    def find_classes(directory):
        return find_classes(directory)

    @staticmethod
    def make_dataset(directory, class_to_idx=None, extensions=None, is_valid_file=None, allow_empty=False):
        return []


class ImageFolder(DatasetFolder):
    _name = "ImageFolder"

    def __init__(self, root=None, transform=None, target_transform=None, loader=None, is_valid_file=None,
                 allow_empty=False, **kwargs):
        super().__init__(root, loader, IMG_EXTENSIONS if is_valid_file is None else None, transform=transform,
                         target_transform=target_transform, is_valid_file=is_valid_file)


class ImageNet(_OnDemand):
    """1000 classes; RGB 64 x 64 (the real images vary in size: scripts resize them anyway)."""

    _name = "ImageNet"

    def __init__(self, root=None, split="train", transform=None, target_transform=None, **kwargs):
        super().__init__(root, transform=transform, target_transform=target_transform)
        self.split = split
        self.wnids = [f"n{i:08d}" for i in range(1000)]
        self.wnid_to_idx = {w: i for i, w in enumerate(self.wnids)}
        self._setup(split, [(f"class {i}",) for i in range(1000)], split == "train")
        self.class_to_idx = {c[0]: i for i, c in enumerate(self.classes)}
        self.samples = [(os.path.join(str(root), split, self.wnids[t], f"{i:05d}.JPEG"), t)
                        for i, t in enumerate(self.targets)]
        self.imgs = self.samples


class CelebA(_OnDemand):
    """RGB 218 x 178; target_type attr (40 binary attributes), identity, bbox, landmarks."""

    _name = "CelebA"
    _shape = (3, 218, 178)
    attr_names_all = (
        "5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose Black_Hair "
        "Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee Gray_Hair Heavy_Makeup "
        "High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard Oval_Face Pale_Skin Pointy_Nose "
        "Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair Wearing_Earrings Wearing_Hat "
        "Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young").split()

    def __init__(self, root=None, split="train", target_type="attr", transform=None, target_transform=None,
                 download=False, **kwargs):
        super().__init__(root, transform=transform, target_transform=target_transform)
        self.split = split
        self.target_type = list(target_type) if isinstance(target_type, (list, tuple)) else [target_type]
        self._setup(split, ["face"], split == "train")
        n = len(self.targets)
        g = sd.generator(self._name, split, "targets")
        self.attr = torch.randint(0, 2, (n, 40), generator=g, dtype=torch.int64, device="cpu")
        self.identity = torch.randint(1, 10178, (n, 1), generator=g, dtype=torch.int64, device="cpu")
        self.bbox = torch.randint(0, 178, (n, 4), generator=g, dtype=torch.int64, device="cpu")
        self.landmarks_align = torch.randint(60, 160, (n, 10), generator=g, dtype=torch.int64, device="cpu")
        self.attr_names = list(self.attr_names_all)
        self.filename = [f"{i:06d}.jpg" for i in range(n)]

    def __getitem__(self, index):
        img = self._image(index)
        picks = {"attr": self.attr[index, :], "identity": self.identity[index, 0], "bbox": self.bbox[index, :],
                 "landmarks": self.landmarks_align[index, :]}
        target = [picks[t] for t in self.target_type]
        target = (tuple(target) if len(target) > 1 else target[0]) if target else None
        if self.transform is not None:
            img = self.transform(img)
        if target is not None and self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


def _photo_set(name: str, num_classes: int, split_arg: str | None, train_splits=("train",), shape=(3, 64, 64),
               default_split="train", extra=None):
    """A classification data set of photos in the real library (file lists, varied sizes)."""

    def __init__(self, root=None, *args, transform=None, target_transform=None, download=False, **kwargs):
        _OnDemand.__init__(self, root, transform=transform, target_transform=target_transform)
        split = default_split
        if split_arg is not None:
            split = kwargs.pop(split_arg, args[0] if args else default_split)
            setattr(self, split_arg, split)
        train = split in train_splits
        key = split if isinstance(split, str) else ("train" if split else "test")
        self._setup(key, [f"{name.lower()}_{i}" for i in range(num_classes)], train)
        self._labels = self.targets
        self._image_files = [f"{i:05d}.jpg" for i in range(len(self.targets))]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        for k, v in (extra or {}).items():
            setattr(self, k, v(self) if callable(v) else v)

    return type(name, (_OnDemand,), {"_name": name, "_shape": shape, "__init__": __init__,
                                      "__doc__": f"{name}: {num_classes} classes, {shape[0]} x {shape[1]} x {shape[2]}."})


Flowers102 = _photo_set("Flowers102", 102, "split")
Food101 = _photo_set("Food101", 101, "split")
OxfordIIITPet = _photo_set("OxfordIIITPet", 37, "split", train_splits=("trainval",), default_split="trainval")
StanfordCars = _photo_set("StanfordCars", 196, "split")
FGVCAircraft = _photo_set("FGVCAircraft", 100, "split", train_splits=("train", "trainval"), default_split="trainval")
DTD = _photo_set("DTD", 47, "split")
GTSRB = _photo_set("GTSRB", 43, "split", shape=(3, 32, 32))
EuroSAT = _photo_set("EuroSAT", 10, None)
Caltech101 = _photo_set("Caltech101", 101, None, extra={"categories": lambda s: s.classes, "y": lambda s: s.targets})
Caltech256 = _photo_set("Caltech256", 257, None, extra={"categories": lambda s: s.classes, "y": lambda s: s.targets})
SUN397 = _photo_set("SUN397", 397, None)
Country211 = _photo_set("Country211", 211, "split")
Places365 = _photo_set("Places365", 365, "split", train_splits=("train-standard", "train-challenge"),
                       default_split="train-standard")
Imagenette = _photo_set("Imagenette", 10, "split")
PCAM = _photo_set("PCAM", 2, "split", shape=(3, 96, 96))
FER2013 = _photo_set("FER2013", 7, "split", shape=(1, 48, 48))
Omniglot = _photo_set("Omniglot", 964, "background", train_splits=(True,), default_split=True, shape=(1, 105, 105))
LFWPeople = _photo_set("LFWPeople", 5749, "split", shape=(3, 250, 250))


# Data sets of torchvision that need their real files (detection, segmentation, video...):
# constructing one under --synthetic-data reports "needs data: ROOT".
NEEDS_DATA = (
    "VOCDetection", "VOCSegmentation", "CocoDetection", "CocoCaptions", "Cityscapes", "Kinetics", "UCF101",
    "HMDB51", "SBDataset", "Kitti", "WIDERFace", "LSUN", "SBU", "Flickr8k", "Flickr30k", "PhotoTour", "SEMEION",
    "INaturalist", "LFWPairs", "CLEVRClassification", "RenderedSST2", "MovingMNIST", "Middlebury2014Stereo",
    "KittiFlow", "Sintel", "FlyingChairs", "FlyingThings3D", "HD1K", "CREStereo", "Kitti2012Stereo",
    "Kitti2015Stereo", "CarlaStereo", "SceneFlowStereo", "SintelStereo", "InStereo2k", "ETH3DStereo",
    "FallingThingsStereo",
)


def needs_data_class(name: str):
    def __init__(self, root=None, *args, **kwargs):
        raise NeedsData(root if root is not None else name, f"torchvision.datasets.{name}")

    return type(name, (VisionDataset,), {"__init__": __init__, "__doc__": f"{name} needs its real files."})


STANDINS = {
    c.__name__: c for c in (
        MNIST, FashionMNIST, KMNIST, EMNIST, QMNIST, USPS, CIFAR10, CIFAR100, SVHN, STL10, FakeData, DatasetFolder,
        ImageFolder, ImageNet, CelebA, Flowers102, Food101, OxfordIIITPet, StanfordCars, FGVCAircraft, DTD, GTSRB,
        EuroSAT, Caltech101, Caltech256, SUN397, Country211, Places365, Imagenette, PCAM, FER2013, Omniglot,
        LFWPeople,
    )
}

for _n in NEEDS_DATA:
    globals()[_n] = needs_data_class(_n)
del _n
