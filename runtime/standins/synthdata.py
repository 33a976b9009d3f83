"""Deterministic stand-in data: the same bytes in every run of one verification.

Every draw goes through a private ``torch.Generator`` seeded from the data set's
name and split, never through the global generators: the original and the
migrated runs must see identical data, and the script's own random stream
(shuffling, dropout, initialisation) must not move because a data set was made.

Images are learnable: each class has a smooth template and every sample is its
template plus noise, so a model's loss falls and two runs can be compared by
their trend as well as step by step.
"""

from __future__ import annotations

import hashlib

import torch

# Samples per split. Small enough that a child builds them in milliseconds,
# large enough for a few batches of 64 and for every class of CIFAR-100.
TRAIN_SAMPLES = 256
TEST_SAMPLES = 128
# Data sets of large images (STL10 96x96, ImageNet-like folders) get fewer.
LARGE_TRAIN_SAMPLES = 64
LARGE_TEST_SAMPLES = 32
LARGE_PIXELS = 64 * 64

# What the stand-ins made in this process, for the report: name, split, samples, digest.
MADE: list = []


def seed_of(*parts) -> int:
    text = "\x00".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & (2**63 - 1)


def generator(*parts) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed_of(*parts))
    return g


def split_size(train: bool, pixels: int = 0) -> int:
    if pixels > LARGE_PIXELS:
        return LARGE_TRAIN_SAMPLES if train else LARGE_TEST_SAMPLES
    return TRAIN_SAMPLES if train else TEST_SAMPLES


def labels(name: str, split: str, n: int, num_classes: int, offset: int = 0) -> torch.Tensor:
    """Balanced labels in a seeded order: every class appears once there are enough samples."""
    g = generator(name, split, "labels")
    order = torch.randperm(n, generator=g, device="cpu")
    return (torch.arange(n, dtype=torch.int64) % max(1, num_classes))[order] + offset


def images(name: str, split: str, targets: torch.Tensor, num_classes: int, channels: int, height: int,
           width: int) -> torch.Tensor:
    """uint8 N x C x H x W: a per-class template (shared by all splits) plus per-sample noise."""
    n = int(targets.numel())
    g_t = generator(name, "templates")
    coarse = torch.rand(max(1, num_classes), channels, 4, 4, generator=g_t, dtype=torch.float32, device="cpu")
    g = generator(name, split, "noise")
    noise = torch.rand(n, channels, height, width, generator=g, dtype=torch.float32, device="cpu")
    if n == 0:
        return torch.zeros(0, channels, height, width, dtype=torch.uint8)
    idx = (targets.clamp(min=0) % max(1, num_classes)).long()
    smooth = torch.nn.functional.interpolate(coarse[idx], size=(height, width), mode="bilinear",
                                             align_corners=False)
    return ((0.65 * smooth + 0.35 * noise) * 255.0).round().clamp(0, 255).to(torch.uint8)


def features(name: str, split: str, n: int, dims: int) -> torch.Tensor:
    g = generator(name, split, "features")
    return torch.randn(n, dims, generator=g, dtype=torch.float32, device="cpu")


_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "si", "pe", "du", "ga", "hi", "zo", "be", "fu", "ya")


def _word(i: int) -> str:
    return _SYLLABLES[i % 16] + _SYLLABLES[(i // 16) % 16] + ("" if i < 256 else _SYLLABLES[(i // 256) % 16])


def sentences(name: str, split: str, targets: torch.Tensor, num_classes: int, min_words: int = 8,
              max_words: int = 24) -> list:
    """One text per target, drawn from a small made-up vocabulary; each class prefers words of its
    own, so a text classifier can learn. Texts are plain lowercase words with a final period."""
    g = generator(name, split, "text")
    n = int(targets.numel())
    lengths = torch.randint(min_words, max_words + 1, (n,), generator=g, device="cpu").tolist()
    common = torch.randint(0, 200, (n, max_words), generator=g, device="cpu")
    own = torch.randint(0, 20, (n, max_words), generator=g, device="cpu")
    pick_own = torch.rand(n, max_words, generator=g, device="cpu") < 0.4
    out = []
    for i, t in enumerate(targets.tolist()):
        cls = int(t) % max(1, num_classes)
        words = [_word(200 + cls * 20 + int(own[i, k])) if pick_own[i, k] else _word(int(common[i, k]))
                 for k in range(lengths[i])]
        out.append(" ".join(words) + ".")
    return out


def digest(*arrays) -> str:
    """A short fingerprint of what was made, so a report can show that the runs saw the same data."""
    h = hashlib.sha256()
    for a in arrays:
        if isinstance(a, torch.Tensor):
            raw = a.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            h.update(raw.numpy().tobytes() if _has_numpy() else bytes(raw.tolist()))
        elif hasattr(a, "tobytes"):  # a numpy array
            h.update(a.tobytes())
        else:
            h.update(repr(a).encode())
    return h.hexdigest()[:16]


def record(source: str, name: str, split: str, samples: int, fingerprint: str) -> None:
    entry = {"source": source, "dataset": name, "split": split, "samples": samples, "digest": fingerprint}
    if entry not in MADE:
        MADE.append(entry)


def _has_numpy() -> bool:
    try:
        import numpy  # noqa: F401  (an optional package)
    except ImportError:
        return False
    return True
