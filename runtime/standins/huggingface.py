"""Hugging Face ``datasets.load_dataset`` under ``--synthetic-data``.

A known hub data set (MNIST, Fashion-MNIST, CIFAR-10/100, IMDB, Rotten
Tomatoes, AG News, Yelp, Emotion, SST-2) is built with ``Dataset.from_dict`` in
the real columns and features (``ClassLabel`` names included), small and seeded
by its name and split. Local builders (``csv``, ``json``, ``imagefolder``...)
are the script's own files and run as they are: a missing file is then missing
data. Any other name goes to the real ``load_dataset``; if that cannot reach or
find it, the run needs data ("huggingface:NAME").
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any, Optional

from . import synthdata as sd
from ..causes.needsdata import NeedsData
from .image import new_image, pil

SOURCE = "datasets.load_dataset"
LOCAL_BUILDERS = {"csv", "json", "text", "parquet", "arrow", "pandas", "imagefolder", "audiofolder",
                  "videofolder", "webdataset", "sql", "xml"}
_DIGITS = [str(i) for i in range(10)]
_FASHION = ["T - shirt / top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
            "Ankle boot"]
_CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
_CIFAR20 = ["aquatic_mammals", "fish", "flowers", "food_containers", "fruit_and_vegetables",
            "household_electrical_devices", "household_furniture", "insects", "large_carnivores",
            "large_man-made_outdoor_things", "large_natural_outdoor_scenes", "large_omnivores_and_herbivores",
            "medium_mammals", "non-insect_invertebrates", "people", "reptiles", "small_mammals", "trees",
            "vehicles_1", "vehicles_2"]

# name -> (kind, columns, label names, splits)
# image: (image column, label column, (C, H, W)); text: (text column, label column, with an idx column)
KNOWN: dict[str, tuple[str, Any, Optional[list[str]], tuple[str, ...]]] = {
    "mnist": ("image", ("image", "label", (1, 28, 28)), _DIGITS, ("train", "test")),
    "fashion_mnist": ("image", ("image", "label", (1, 28, 28)), _FASHION, ("train", "test")),
    "cifar10": ("image", ("img", "label", (3, 32, 32)), _CIFAR10, ("train", "test")),
    "cifar100": ("image", ("img", "fine_label", (3, 32, 32)), None, ("train", "test")),
    "imdb": ("text", ("text", "label", False), ["neg", "pos"], ("train", "test", "unsupervised")),
    "rotten_tomatoes": ("text", ("text", "label", False), ["neg", "pos"], ("train", "validation", "test")),
    "ag_news": ("text", ("text", "label", False), ["World", "Sports", "Business", "Sci/Tech"], ("train", "test")),
    "yelp_review_full": ("text", ("text", "label", False), ["1 star", "2 star", "3 stars", "4 stars", "5 stars"],
                         ("train", "test")),
    "yelp_polarity": ("text", ("text", "label", False), ["1", "2"], ("train", "test")),
    "emotion": ("text", ("text", "label", False), ["sadness", "joy", "love", "anger", "fear", "surprise"],
                ("train", "validation", "test")),
    "sst2": ("text", ("sentence", "label", True), ["negative", "positive"], ("train", "validation", "test")),
}
ALIASES = {
    "ylecun/mnist": "mnist", "zalando-datasets/fashion_mnist": "fashion_mnist", "uoft-cs/cifar10": "cifar10",
    "uoft-cs/cifar100": "cifar100", "stanfordnlp/imdb": "imdb", "cornell-movie-review-data/rotten_tomatoes":
    "rotten_tomatoes", "fancyzhx/ag_news": "ag_news", "yelp/yelp_review_full": "yelp_review_full",
    "fancyzhx/yelp_polarity": "yelp_polarity", "dair-ai/emotion": "emotion", "stanfordnlp/sst2": "sst2",
    "glue/sst2": "sst2", "nyu-mll/glue/sst2": "sst2",
}


def canonical(path, name=None):
    key = str(path).strip().lower()
    for candidate in ((f"{key}/{name}".lower() if name else None), key):
        if candidate and candidate in KNOWN:
            return candidate
        if candidate and candidate in ALIASES:
            return ALIASES[candidate]
    return None


def _build(hf, key: str, split: str):
    kind, columns, names, _ = KNOWN[key]
    train = split == "train"
    n = sd.split_size(train)
    if kind == "image":
        if pil() is None:
            raise NeedsData(f"huggingface:{key}", f"{SOURCE}({key!r}) (image columns need Pillow)", is_path=False)
        image_col, label_col, (c, h, w) = columns
        fine = names or [f"class_{i}" for i in range(100)]
        targets = sd.labels(key, split, n, len(fine))
        chw = sd.images(key, split, targets, len(fine), c, h, w)
        images = [new_image(x.permute(1, 2, 0).contiguous(), "L" if c == 1 else "RGB") for x in chw]
        data = {image_col: images, label_col: targets.tolist()}
        features = {image_col: hf.Image(), label_col: hf.ClassLabel(names=fine)}
        if key == "cifar100":
            data["coarse_label"] = [t % 20 for t in data[label_col]]
            features["coarse_label"] = hf.ClassLabel(names=_CIFAR20)
        fingerprint = sd.digest(chw, targets)
    else:
        text_col, label_col, with_idx = columns
        assert names is not None, key  # every text data set above names its labels
        targets = sd.labels(key, split, n, len(names))
        texts = sd.sentences(key, split, targets, len(names))
        labels = targets.tolist() if split not in ("unsupervised",) else [-1] * n
        if key == "sst2" and split == "test":
            labels = [-1] * n  # the hub hides the test labels
        data = {text_col: texts, label_col: labels}
        features = {text_col: hf.Value("string"), label_col: hf.ClassLabel(names=names)}
        if with_idx:
            data = {"idx": list(range(n)), **data}
            features = {"idx": hf.Value("int32"), **features}
        fingerprint = sd.digest(targets, "".join(texts))
    sd.record(SOURCE, key, split, n, fingerprint)
    return hf.Dataset.from_dict(data, features=hf.Features(features), split=split)


_SPLIT = re.compile(r"^\s*([\w.-]+)\s*(?:\[\s*(-?\d*%?)\s*:\s*(-?\d*%?)\s*\])?\s*$")


def _bound(text: str, n: int, default: int) -> int:
    if not text:
        return default
    value = int(round(float(text[:-1]) * n / 100)) if text.endswith("%") else int(text)
    return max(0, min(n, value if value >= 0 else n + value))


def _select(hf, key: str, split_spec: str):
    """A split, with the slicing syntax ("train[:10%]", "test[100:200]") and "train+test"."""
    splits = KNOWN[key][3]
    parts = []
    for part in str(split_spec).split("+"):
        m = _SPLIT.match(part)
        if not m or m.group(1) not in splits:
            raise ValueError(f'Unknown split "{part}". Should be one of {list(splits)}.')
        ds = _build(hf, key, m.group(1))
        if m.group(2) is not None:
            n = len(ds)
            ds = ds.select(range(_bound(m.group(2), n, 0), _bound(m.group(3), n, n)))
        parts.append(ds)
    return parts[0] if len(parts) == 1 else hf.concatenate_datasets(parts)


def _arguments(args, kwargs):
    names = ("path", "name", "data_dir", "data_files", "split")
    bound = dict(zip(names, args))
    for k in names:
        if k in kwargs:
            bound[k] = kwargs[k]
    return bound


def patch(hf) -> None:
    """Replace ``hf.load_dataset`` (only on the Hugging Face package: a script's own ``datasets.py`` stays)."""
    real = getattr(hf, "load_dataset", None)
    if real is None or not hasattr(hf, "DatasetDict") or not hasattr(hf, "ClassLabel"):
        return

    @functools.wraps(real)
    def load_dataset(*args, **kwargs):
        bound = _arguments(args, kwargs)
        path = bound.get("path")
        key = canonical(path, bound.get("name")) if isinstance(path, str) else None
        if key is None:
            if not isinstance(path, str) or path.lower() in LOCAL_BUILDERS or os.path.exists(path):
                return real(*args, **kwargs)
            try:
                return real(*args, **kwargs)
            except OSError as e:  # not cached and not reachable: a hub data set we cannot make
                raise NeedsData(f"huggingface:{path}", f"{SOURCE}({path!r})", is_path=False) from e
        split = bound.get("split")
        if split is None:
            out = hf.DatasetDict({s: _build(hf, key, s) for s in KNOWN[key][3]})
        elif isinstance(split, (list, tuple)):
            out = [_select(hf, key, s) for s in split]
        else:
            out = _select(hf, key, str(split))
        if kwargs.get("streaming"):
            if isinstance(out, list):
                return [d.to_iterable_dataset() for d in out]
            if isinstance(out, hf.DatasetDict):
                return hf.IterableDatasetDict({k: d.to_iterable_dataset() for k, d in out.items()})
            return out.to_iterable_dataset()
        return out

    hf.load_dataset = load_dataset
    load_module = getattr(hf, "load", None)
    if load_module is not None and getattr(load_module, "load_dataset", None) is real:
        load_module.load_dataset = load_dataset

