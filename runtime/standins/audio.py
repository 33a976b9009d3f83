"""``torchaudio.datasets`` under ``--synthetic-data`` (patched when the script imports it).

SPEECHCOMMANDS, YESNO, LIBRISPEECH and LJSPEECH give items of the real tuple
layout (float32 waveform 1 x samples, sample rate, labels or transcripts, ids).
Each item is made from its file name alone, so a script that filters
``_walker`` (the official tutorial's ``SubsetSC``) still reads the same clips in
every run; SPEECHCOMMANDS also writes the ``validation_list.txt`` and
``testing_list.txt`` that the tutorial reads, into the run's copy of the data
folder. Other data sets stay the real ones: failing to find or fetch their
files is missing data.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import torch
from torch.utils.data import Dataset

from . import synthdata as sd
from ..causes.needsdata import NeedsData

SOURCE = "torchaudio.datasets"
SPEECH_LABELS = ["backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward", "four", "go",
                 "happy", "house", "learn", "left", "marvin", "nine", "no", "off", "on", "one", "right", "seven",
                 "sheila", "six", "stop", "three", "tree", "two", "up", "visual", "wow", "yes", "zero"]


def _tone(key: str, seconds: float, rate: int, pitch: int) -> torch.Tensor:
    """A clip: a tone whose pitch carries the class, plus noise; float32 1 x samples in [-1, 1]."""
    n = int(seconds * rate)
    g = sd.generator(SOURCE, key)
    t = torch.arange(n, dtype=torch.float32) / rate
    wave = 0.5 * torch.sin(2 * math.pi * (220.0 + 40.0 * pitch) * t)
    wave = wave + 0.1 * torch.randn(n, generator=g, dtype=torch.float32, device="cpu")
    return wave.clamp(-1, 1).unsqueeze(0)


def _words(key: str, count: int) -> str:
    targets = sd.labels(key, "words", count, 5)
    return sd.sentences(key, "transcript", targets[:1], 5, min_words=count, max_words=count)[0].rstrip(".").upper()


class SPEECHCOMMANDS(Dataset):
    SAMPLES = {"training": 256, "validation": 64, "testing": 64}

    def __init__(self, root, url="speech_commands_v0.02", folder_in_archive="SpeechCommands", download=False,
                 subset=None, **kwargs):
        self._path = os.path.join(os.fspath(root), folder_in_archive, url)
        self._archive = self._path
        names = {}
        for part, n in self.SAMPLES.items():
            targets = sd.labels("SPEECHCOMMANDS", part, n, len(SPEECH_LABELS)).tolist()
            names[part] = [os.path.join(SPEECH_LABELS[t], f"{part[:1]}{i:04x}{t:02d}_nohash_{i % 3}.wav")
                           for i, t in enumerate(targets)]
        self._write_lists(names)
        chosen = names[subset] if subset in names else [f for part in names.values() for f in part]
        self._walker = [os.path.join(self._path, f) for f in chosen]
        sd.record(SOURCE, "SPEECHCOMMANDS", subset or "all", len(self._walker), sd.digest(chosen))

    def _write_lists(self, names):
        try:
            os.makedirs(self._path, exist_ok=True)
            for part, filename in (("validation", "validation_list.txt"), ("testing", "testing_list.txt")):
                with open(os.path.join(self._path, filename), "w") as f:
                    f.write("".join(p + "\n" for p in names[part]))
        except OSError:
            pass  # a read-only root: only scripts that read the lists miss them

    def get_metadata(self, n):
        rel = os.path.relpath(self._walker[n], self._path)
        label, filename = os.path.split(rel)
        speaker, _, utterance = os.path.splitext(filename)[0].partition("_nohash_")
        return rel, 16000, os.path.basename(label), speaker, int(utterance or 0)

    def __getitem__(self, n):
        rel, rate, label, speaker, utterance = self.get_metadata(n)
        pitch = SPEECH_LABELS.index(label) if label in SPEECH_LABELS else 0
        return _tone(rel, 1.0, rate, pitch), rate, label, speaker, utterance

    def __len__(self):
        return len(self._walker)


class YESNO(Dataset):
    def __init__(self, root, url=None, folder_in_archive="waves_yesno", download=False, **kwargs):
        self._path = os.path.join(os.fspath(root), folder_in_archive)
        self._walker = []
        for i in range(60):
            bits = [(i >> k) & 1 for k in range(8)]
            self._walker.append("_".join(str(b) for b in bits))
        sd.record(SOURCE, "YESNO", "all", 60, sd.digest(self._walker))

    def __getitem__(self, n):
        fileid = self._walker[n]
        labels = [int(b) for b in fileid.split("_")]
        waveform = torch.cat([_tone(f"{fileid}:{k}", 0.75, 8000, 5 * b) for k, b in enumerate(labels)], dim=1)
        return waveform, 8000, labels

    def __len__(self):
        return len(self._walker)


class LIBRISPEECH(Dataset):
    def __init__(self, root, url="train-clean-100", folder_in_archive="LibriSpeech", download=False, **kwargs):
        self._path = os.path.join(os.fspath(root), folder_in_archive, url)
        n = sd.LARGE_TRAIN_SAMPLES if url.startswith("train") else sd.LARGE_TEST_SAMPLES
        self._walker = [f"{100 + i % 8}-{200 + i % 5}-{i:04d}" for i in range(n)]
        self._url = url
        sd.record(SOURCE, "LIBRISPEECH", url, n, sd.digest(self._walker))

    def get_metadata(self, n):
        fileid = self._walker[n]
        speaker, chapter, utterance = (int(x) for x in fileid.split("-"))
        rel = os.path.join(str(speaker), str(chapter), fileid + ".flac")
        return rel, 16000, _words(f"{self._url}:{fileid}", 6 + n % 7), speaker, chapter, utterance

    def __getitem__(self, n):
        rel, rate, transcript, speaker, chapter, utterance = self.get_metadata(n)
        waveform = _tone(f"{self._url}:{rel}", 1.0 + (n % 3) * 0.5, rate, speaker % 10)
        return waveform, rate, transcript, speaker, chapter, utterance

    def __len__(self):
        return len(self._walker)


class LJSPEECH(Dataset):
    def __init__(self, root, url=None, folder_in_archive="wavs", download=False, **kwargs):
        self._path = os.path.join(os.fspath(root), folder_in_archive)
        n = sd.LARGE_TRAIN_SAMPLES
        self._walker = [f"LJ{1 + i // 20:03d}-{i % 20 + 1:04d}" for i in range(n)]
        sd.record(SOURCE, "LJSPEECH", "all", n, sd.digest(self._walker))

    def __getitem__(self, n):
        fileid = self._walker[n]
        transcript = _words(fileid, 5 + n % 9)
        return _tone(fileid, 1.0 + (n % 4) * 0.25, 22050, n % 10), 22050, transcript, transcript.lower()

    def __len__(self):
        return len(self._walker)


STANDINS = {c.__name__: c for c in (SPEECHCOMMANDS, YESNO, LIBRISPEECH, LJSPEECH)}


def _needs_data_on_failure(cls: Any, name: str) -> None:
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        try:
            original(self, *args, **kwargs)
        except NeedsData:
            raise
        except (OSError, RuntimeError) as e:
            root = args[0] if args else kwargs.get("root")
            raise NeedsData(root if root is not None else name, f"{SOURCE}.{name}") from e

    cls.__init__ = __init__


def patch(module) -> None:
    """``module`` is ``torchaudio.datasets``."""
    for name in list(getattr(module, "__all__", None) or dir(module)):
        obj = getattr(module, name, None)
        if not isinstance(obj, type):
            continue
        if name in STANDINS:
            setattr(module, name, STANDINS[name])
        elif issubclass(obj, Dataset) and not getattr(obj.__init__, "__wrapped__", None):
            _needs_data_on_failure(obj, name)
