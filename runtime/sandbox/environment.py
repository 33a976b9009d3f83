"""The environment a run's child process gets: the parent's, or with ``--clean-env`` only what a
Python program needs to start and find its GPU, plus the names the user allows."""

from __future__ import annotations

import fnmatch
import os
from typing import Iterable, Mapping, Optional

# What a child needs whatever the script: finding programs and libraries (CUDA's included), text
# encodings, the time zone, and which GPUs it may see.
ESSENTIAL = ("PATH", "LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
             "CUDA_HOME", "CUDA_PATH", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
             "SYSTEMROOT", "VIRTUAL_ENV", "CONDA_PREFIX")


def child_environment(parent: Mapping[str, str], clean: bool, allow: Iterable[str] = (),
                      home: Optional[str] = None) -> dict:
    """The parent's environment, or (``clean``) only the essential names and the ``allow`` patterns
    (``WANDB_*``); ``HOME`` and ``TMPDIR`` then point into the run's own folder ``home``, so that
    caches and config files the script writes there stay out of the user's."""
    if not clean:
        return dict(parent)
    patterns = (*ESSENTIAL, *allow)
    env = {name: value for name, value in parent.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)}
    if home is not None:
        for name in ("HOME", "TMPDIR"):
            if not any(fnmatch.fnmatchcase(name, p) for p in allow):
                os.makedirs(home, exist_ok=True)
                env[name] = home
    return env
