"""The ``torchvision`` a ``--synthetic-data`` run sees.

When the real torchvision imports, its data set classes are replaced by the
stand-ins (``datasets.py`` here) and everything else is left as it is; its
other data sets (detection, video...) report "needs data" when they fail to
find or fetch their files. When it does not import (absent, or a build that
does not match this torch, as the PyPI wheel that links CUDA libraries next to
a CPU-only torch), a stand-in package takes its place in ``sys.modules``:
``datasets``, ``transforms`` (with ``functional`` and ``v2``) and ``utils``.
Any other submodule (``models``, ``ops``, ``io``) raises an ImportError that
says why.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
import warnings
from typing import Any

from . import datasets as standin_datasets, functional as standin_functional, transforms as standin_transforms, vutils as standin_vutils
from ..causes.needsdata import NeedsData

VERSION = "0.0.0+cpu2gpu.standin"
PROVIDED = ("datasets", "transforms", "utils")
_DATASET_SUBMODULES = ("mnist", "cifar", "svhn", "stl10", "folder", "vision", "fakedata", "celeba", "imagenet",
                       "usps", "flowers102", "food101", "oxford_iiit_pet", "gtsrb", "eurosat", "caltech", "dtd",
                       "places365", "omniglot", "stanford_cars", "fgvc_aircraft", "sun397", "country211", "pcam",
                       "fer2013", "lfw", "imagenette")


def _missing(name: str, reason: str) -> str:
    return (f"No module named '{name}': with --synthetic-data, torchvision is a stand-in that has "
            f"{', '.join(PROVIDED)} only (the real torchvision does not import here: {reason})")


class _Finder(importlib.abc.MetaPathFinder):
    """Refuses ``torchvision.<anything we do not provide>`` with a message that says why."""

    def __init__(self, reason: str):
        self.reason = reason

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("torchvision.") and fullname not in sys.modules:
            raise ModuleNotFoundError(_missing(fullname, self.reason), name=fullname)
        return None


def _module(name: str, doc: str | None, names: dict, reason: str, package: bool = False) -> Any:
    # Any: the stand-in modules are built here, their submodules set as attributes afterwards.
    m: Any = types.ModuleType(name, doc)
    m.__dict__.update(names)
    # a spec, so that importlib.util.find_spec("torchvision") answers as for an installed package
    m.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=package)
    if package:
        m.__path__ = []

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(f"module '{name}' has no attribute '{attr}' (the --synthetic-data stand-in of "
                             f"torchvision; the real one does not import here: {reason})")

    m.__getattr__ = __getattr__
    return m


def _public(module) -> dict:
    return {k: v for k, v in vars(module).items() if not k.startswith("_") and k not in ("annotations",)}


def _download_noop(*args, **kwargs):
    """The stand-in fetches nothing: a file the script then reads is reported as needed data."""
    return None


def _datasets_utils(reason: str) -> types.ModuleType:
    names: dict[str, Any] = {n: _download_noop for n in ("download_url", "download_and_extract_archive",
                                                         "extract_archive", "download_file_from_google_drive",
                                                         "verify_str_arg")}
    names["verify_str_arg"] = lambda value, arg=None, valid_values=None, custom_msg=None: value
    names["check_integrity"] = lambda fpath, md5=None: True
    names["check_md5"] = lambda fpath, md5, **kwargs: True

    def list_dir(root, prefix=False):
        root = os.path.expanduser(root)
        return [os.path.join(root, p) if prefix else p for p in os.listdir(root)
                if os.path.isdir(os.path.join(root, p))]

    def list_files(root, suffix, prefix=False):
        root = os.path.expanduser(root)
        return [os.path.join(root, p) if prefix else p for p in os.listdir(root)
                if os.path.isfile(os.path.join(root, p)) and p.endswith(suffix)]

    names.update(list_dir=list_dir, list_files=list_files)
    return _module("torchvision.datasets.utils", "Download helpers: the stand-in fetches nothing.", names, reason)


def install_standin(reason: str) -> types.ModuleType:
    """Put the stand-in package into ``sys.modules`` (the real one does not import)."""
    for key in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        del sys.modules[key]

    ds_names = _public(standin_datasets)
    for drop in ("Dataset", "os", "string", "torch", "sd", "SOURCE", "STANDINS", "NEEDS_DATA", "needs_data_class",
                 "new_image"):
        ds_names.pop(drop, None)
    datasets = _module("torchvision.datasets", standin_datasets.__doc__, ds_names, reason, package=True)
    ds_utils = _datasets_utils(reason)
    datasets.utils = ds_utils

    fn_names = _public(standin_functional)
    for drop in ("enum", "numbers", "torch", "crop_hwc", "is_numpy_array", "new_image", "resize_hwc", "size_pair",
                 "to_hwc"):
        fn_names.pop(drop, None)
    functional = _module("torchvision.transforms.functional", standin_functional.__doc__, fn_names, reason)

    tf_names = {k: v for k, v in _public(standin_transforms).items() if isinstance(v, type)}
    transforms = _module("torchvision.transforms", standin_transforms.__doc__, tf_names, reason, package=True)
    transforms.functional = functional

    v2_fn = _module("torchvision.transforms.v2.functional", standin_functional.__doc__,
                    dict(fn_names, to_image=standin_transforms.ToImage(), to_pure_tensor=standin_transforms.ToPureTensor(),
                         to_dtype=standin_functional.convert_image_dtype), reason)
    v2 = _module("torchvision.transforms.v2", standin_transforms.__doc__, dict(tf_names), reason, package=True)
    v2.functional = v2_fn
    transforms.v2 = v2

    utils = _module("torchvision.utils", standin_vutils.__doc__, {"make_grid": standin_vutils.make_grid,
                                                                   "save_image": standin_vutils.save_image}, reason)

    tv = _module("torchvision", __doc__, {
        "__version__": VERSION, "datasets": datasets, "transforms": transforms, "utils": utils,
        "get_image_backend": lambda: "PIL", "set_image_backend": lambda backend: None,
        "get_video_backend": lambda: "pyav", "set_video_backend": lambda backend: None,
    }, reason, package=True)

    sys.modules.update({
        "torchvision": tv, "torchvision.datasets": datasets, "torchvision.datasets.utils": ds_utils,
        "torchvision.transforms": transforms, "torchvision.transforms.functional": functional,
        "torchvision.transforms.v2": v2, "torchvision.transforms.v2.functional": v2_fn,
        "torchvision.utils": utils,
    })
    for sub in _DATASET_SUBMODULES:  # from torchvision.datasets.mnist import MNIST
        sys.modules[f"torchvision.datasets.{sub}"] = datasets
    sys.meta_path.insert(0, _Finder(reason))
    return tv


def _needs_data_on_failure(cls: Any, name: str) -> None:
    """A real data set we have no stand-in for: a failure to find or fetch its files is missing data."""
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        try:
            original(self, *args, **kwargs)
        except NeedsData:
            raise
        except (OSError, RuntimeError) as e:
            root = args[0] if args else kwargs.get("root")
            raise NeedsData(root if root is not None else name, f"torchvision.datasets.{name}") from e

    cls.__init__ = __init__


def patch_real(tv) -> None:
    """Replace the real torchvision's data sets by the stand-ins (isinstance of its VisionDataset holds)."""
    real = tv.datasets
    base = getattr(real, "VisionDataset", None)
    for name, standin in standin_datasets.STANDINS.items():
        original = getattr(real, name, None)
        if original is None:
            continue
        cls = standin
        if isinstance(base, type):
            cls = type(name, (standin, base), {"__module__": standin.__module__, "__doc__": standin.__doc__})
        setattr(real, name, cls)
        home = sys.modules.get(getattr(original, "__module__", ""), None)
        if home is not None and getattr(home, name, None) is original:
            setattr(home, name, cls)
    replaced = set(standin_datasets.STANDINS)
    for name in dir(real):
        obj = getattr(real, name)
        if (isinstance(obj, type) and isinstance(base, type) and issubclass(obj, base) and obj is not base
                and name not in replaced and not getattr(obj.__init__, "__wrapped__", None)):
            _needs_data_on_failure(obj, name)


def install() -> dict:
    """The stand-in package, or the real torchvision patched. Returns what was done, for the report."""
    if importlib.util.find_spec("torchvision") is None:
        install_standin("it is not installed")
        return {"torchvision": "stand-in", "reason": "torchvision is not installed"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the real torchvision, an optional package, only where it is installed and its build matches this torch
            import torchvision
            import torchvision.datasets  # noqa: F401
    except Exception as e:  # a build that does not match this torch fails in many ways
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        install_standin(reason)
        return {"torchvision": "stand-in", "reason": f"import torchvision failed ({reason})"}
    patch_real(torchvision)
    return {"torchvision": "patched", "reason": f"torchvision {getattr(torchvision, '__version__', '?')}"}
