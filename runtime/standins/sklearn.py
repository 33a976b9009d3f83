"""``sklearn.datasets.fetch_*`` under ``--synthetic-data`` (patched when the script imports it).

The downloaders of the common tutorials are replaced by small seeded data of
the real layout: ``fetch_openml`` for MNIST and Fashion-MNIST (784 pixel
columns, string targets), ``fetch_california_housing``, ``fetch_covtype``,
``fetch_20newsgroups`` and ``fetch_olivetti_faces``. The ``load_*`` functions
read files that ship with scikit-learn and stay as they are. Any other
``fetch_*`` is the real one: if it cannot fetch its data, the run needs data.
"""

from __future__ import annotations

import functools

import torch

from . import synthdata as sd
from ..causes.needsdata import NeedsData

SOURCE = "sklearn.datasets"
ROWS = sd.TRAIN_SAMPLES + sd.TEST_SAMPLES  # scripts split the one table themselves
NEWSGROUPS = ["alt.atheism", "comp.graphics", "comp.os.ms-windows.misc", "comp.sys.ibm.pc.hardware",
              "comp.sys.mac.hardware", "comp.windows.x", "misc.forsale", "rec.autos", "rec.motorcycles",
              "rec.sport.baseball", "rec.sport.hockey", "sci.crypt", "sci.electronics", "sci.med", "sci.space",
              "soc.religion.christian", "talk.politics.guns", "talk.politics.mideast", "talk.politics.misc",
              "talk.religion.misc"]
HOUSING = ["MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population", "AveOccup", "Latitude", "Longitude"]


def _np():
    import numpy  # an optional package: this module imports without it

    return numpy


def _bunch(**fields):
    from sklearn.utils import Bunch  # the script's scikit-learn, an optional package: this module imports without it

    return Bunch(**fields)


def _frame(X, y, feature_names, target_name, as_frame):
    """pandas objects when asked for (and pandas is here), as scikit-learn gives them."""
    if not as_frame:
        return X, y, None
    try:
        import pandas as pd  # an optional package
    except ImportError:
        return X, y, None
    data = pd.DataFrame(X, columns=feature_names)
    target = pd.Series(y, name=target_name)
    return data, target, pd.concat([data, target], axis=1)


def _pixels(name: str, n: int):
    targets = sd.labels(name, "all", n, 10)
    images = sd.images(name, "all", targets, 10, 1, 28, 28).reshape(n, 784)
    np = _np()
    return images.numpy().astype(np.float64), np.array([str(t) for t in targets.tolist()], dtype=object), targets


OPENML = {"mnist_784": 554, "fashion-mnist": 40996}


def fetch_openml(real, name=None, *, version="active", data_id=None, return_X_y=False, as_frame="auto", **kwargs):
    key = (name or "").lower() or {v: k for k, v in OPENML.items()}.get(data_id)
    if key not in OPENML:
        return _or_needs_data(real, f"fetch_openml({name or data_id!r})", name=name, version=version,
                              data_id=data_id, return_X_y=return_X_y, as_frame=as_frame, **kwargs)
    X, y, targets = _pixels(key, ROWS)
    sd.record(SOURCE, f"fetch_openml({key})", "all", ROWS, sd.digest(targets))
    features = [f"pixel{i}" for i in range(1, 785)]
    X, y, frame = _frame(X, y, features, "class", as_frame in (True, "auto"))
    if return_X_y:
        return X, y
    return _bunch(data=X, target=y, frame=frame, categories=None, feature_names=features, target_names=["class"],
                  DESCR=f"{key}: a synthetic stand-in ({ROWS} rows)", details={"name": key, "id": OPENML[key]},
                  url="")


def fetch_california_housing(real, *, return_X_y=False, as_frame=False, **kwargs):
    X = sd.features("california_housing", "all", ROWS, 8)
    w = torch.linspace(-1.0, 1.0, 8)
    y = (X @ w * 0.5 + 2.0).clamp(0.15, 5.0)
    sd.record(SOURCE, "fetch_california_housing", "all", ROWS, sd.digest(X, y))
    X, y = X.double().numpy(), y.double().numpy()
    X, y, frame = _frame(X, y, HOUSING, "MedHouseVal", as_frame)
    if return_X_y:
        return X, y
    return _bunch(data=X, target=y, frame=frame, feature_names=list(HOUSING), target_names=["MedHouseVal"],
                  DESCR="California housing: a synthetic stand-in")


def fetch_covtype(real, *, return_X_y=False, as_frame=False, **kwargs):
    targets = sd.labels("covtype", "all", ROWS, 7)
    X = sd.features("covtype", "all", ROWS, 54) + targets.unsqueeze(1).float() * 0.3
    sd.record(SOURCE, "fetch_covtype", "all", ROWS, sd.digest(X, targets))
    names = [f"feature_{i}" for i in range(54)]
    X, y, frame = _frame(X.double().numpy(), (targets + 1).numpy().astype(_np().int32), names, "Cover_Type", as_frame)
    if return_X_y:
        return X, y
    return _bunch(data=X, target=y, frame=frame, feature_names=names, target_names=["Cover_Type"],
                  DESCR="Covertype: a synthetic stand-in")


def fetch_20newsgroups(real, *, subset="train", categories=None, return_X_y=False, **kwargs):
    names = sorted(categories) if categories else list(NEWSGROUPS)
    n = sd.split_size(subset != "test") * (2 if subset == "all" else 1)
    targets = sd.labels("20newsgroups", subset, n, len(names))
    texts = sd.sentences("20newsgroups", subset, targets, len(names), 20, 60)
    sd.record(SOURCE, "fetch_20newsgroups", subset, n, sd.digest(targets, "".join(texts)))
    np = _np()
    y = targets.numpy().astype(np.int64)
    if return_X_y:
        return texts, y
    return _bunch(data=texts, target=y, target_names=names,
                  filenames=np.array([f"{names[t]}/{i}" for i, t in enumerate(y.tolist())], dtype=object),
                  DESCR="20 newsgroups: a synthetic stand-in")


def fetch_olivetti_faces(real, *, return_X_y=False, **kwargs):
    targets = torch.arange(400) // 10  # 40 people, 10 faces each, as the real set
    images = sd.images("olivetti_faces", "all", targets, 40, 1, 64, 64)[:, 0].float() / 255.0
    sd.record(SOURCE, "fetch_olivetti_faces", "all", 400, sd.digest(images))
    np = _np()
    data = images.reshape(400, 4096).numpy()
    y = targets.numpy().astype(np.int64)
    if return_X_y:
        return data, y
    return _bunch(data=data, images=images.numpy(), target=y, DESCR="Olivetti faces: a synthetic stand-in")


STANDINS = {f.__name__: f for f in (fetch_openml, fetch_california_housing, fetch_covtype, fetch_20newsgroups,
                                    fetch_olivetti_faces)}


def _or_needs_data(real, what, *args, **kwargs):
    try:
        return real(*args, **kwargs)
    except OSError as e:  # not cached, and no network (URLError is an OSError)
        raise NeedsData(f"sklearn:{what}", f"{SOURCE}.{what}", is_path=False) from e


def patch(module) -> None:
    """``module`` is ``sklearn.datasets``."""
    for name in dir(module):
        real = getattr(module, name, None)
        if not name.startswith("fetch_") or not callable(real) or getattr(real, "__wrapped__", None):
            continue
        if name in STANDINS:
            call = functools.partial(STANDINS[name], real)
        else:
            call = functools.partial(_or_needs_data, real, name)
        setattr(module, name, functools.update_wrapper(call, real))
