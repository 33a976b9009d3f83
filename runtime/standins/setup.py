"""``verify --synthetic-data``, child side: set up the stand-in data sources before the script runs.

- torchvision: the real data sets replaced, or a stand-in package when torchvision
  does not import (``standins/torchvision.py``);
- Hugging Face ``datasets.load_dataset``, ``torchaudio.datasets`` and
  ``sklearn.datasets.fetch_*``: patched when the script imports them
  (``huggingface``, ``audio``, ``sklearn`` here);
- every file the script reads stays what it is: a missing one is reported as
  "needs data: PATH" (``needsdata``).

Nothing here draws from the global random generators: the stand-ins seed
their own from the data set's name and split.
"""

from __future__ import annotations

import importlib
import sys

from . import afterimport
from ..causes import needsdata
from . import synthdata
from . import torchvision as standin_torchvision


def _patch(module_name: str, attribute: str):
    def patch(module):
        try:
            getattr(importlib.import_module(f"{__package__}.{module_name}"), attribute)(module)
        except Exception as e:  # a version we do not know: the script runs on the real library
            print(f"cpu2gpu verify: --synthetic-data could not patch {module.__name__}: {e!r}", file=sys.stderr)

    return patch


def install() -> dict:
    """Returns the setup (for the report) and the tracker of the script's own files."""
    setup = standin_torchvision.install()
    afterimport.install({
        "datasets": _patch("huggingface", "patch"),
        "torchaudio.datasets": _patch("audio", "patch"),
        "sklearn.datasets": _patch("sklearn", "patch"),
    })
    setup["tracker"] = needsdata.install()
    return setup


def made() -> list:
    """What the stand-ins made in this run: source, data set, split, samples, digest."""
    return list(synthdata.MADE)
