"""Telling "a package the script imports is not installed" apart from a failure of the migration.

A ``ModuleNotFoundError`` is the environment's, not the migration's, only where the
original would fail the same way: its top-level package cannot be found from the
run (``importlib.util.find_spec`` is None, with the run's own ``sys.path``) and no
file or folder of the user's project has that name. A module of the project that
an import no longer finds (a rewritten relative import) stays a failure.
"""

from __future__ import annotations

import importlib.util
import os

from .needsdata import exception_chain

# Import names whose distribution is named otherwise, for the pip hint.
_DISTRIBUTIONS = {
    "cv2": "opencv-python", "sklearn": "scikit-learn", "PIL": "Pillow", "yaml": "PyYAML",
    "skimage": "scikit-image", "bs4": "beautifulsoup4", "dateutil": "python-dateutil",
    "Crypto": "pycryptodome", "attr": "attrs", "jwt": "PyJWT",
    "serial": "pyserial", "usb": "pyusb", "wx": "wxPython", "gi": "PyGObject", "magic": "python-magic",
}
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "dist-packages"}
_WALK_LIMIT = 20000  # entries looked at: a folder of data is not searched to its end


def _installed(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a broken entry in sys.modules: something of that name is there
        return True


def in_project(top: str, root: str) -> bool:
    """A module or package named ``top`` anywhere under the project folder (the run's copy)."""
    seen = 0
    for folder, dirs, files in os.walk(root):
        seen += len(dirs) + len(files)
        if top in dirs or any(f.partition(".")[0] == top and f.endswith((".py", ".so", ".pyd")) for f in files):
            return True
        if seen > _WALK_LIMIT:
            return False
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
    return False


def find(exc: BaseException, root: str) -> dict | None:
    """{"name", "pip"} of the package not installed that stopped the run, or None."""
    chain = exception_chain(exc)
    if not isinstance(chain[0], (ImportError, SystemExit)):
        return None  # raised while handling an optional import's failure, for another reason
    for e in chain:
        if not isinstance(e, ModuleNotFoundError) or not e.name:
            continue
        top = e.name.partition(".")[0]
        if top and not _installed(top) and not in_project(top, root):
            return {"name": top, "pip": _DISTRIBUTIONS.get(top, top)}
    return None
