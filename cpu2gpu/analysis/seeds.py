"""What one file learns from the rest of its project before it is analysed.

Plain, picklable data (it travels to worker processes and into cache keys):

- ``imported``: for each qualified name this file imports from another project file (spelled
  as its ``ImportTable`` resolves it: ``model.Net``, ``.model.Net``, ``M.Net`` after
  ``import model as M`` resolves to ``model.Net``), what that name is there: a module class
  (with or without parameters), a function that returns a module, tensor or loader, or a
  module-level value;
- ``star_names``: the names a ``from x import *`` brings in, with their qualified names;
- ``incoming``: for the functions and classes of this file that other files call, what they
  are given (a model, a loader, a device...), so that a ``train_epoch(model, loader, opt)``
  defined here and called from ``main.py`` is walked with a model and a loader.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Optional, Union

# The kinds an argument or a result can have across files (``facts.Kind`` values).
CROSSING_KINDS = ("module", "tensor", "loader", "optimizer", "device")


@dataclass(frozen=True)
class Exported:
    """A name defined in a project file, as other files see it."""

    kind: str  # "module_class" | "class" | "function" | "value"
    file: str  # the defining file, relative to the project root, for messages
    name: str  # its name there
    returns: Optional[str] = None  # function: the kind it returns; value: its kind
    holds_state: bool = True  # module class / returned module: has parameters or buffers
    cpu_inputs: tuple = ()  # module class: forward's inputs that stay on the CPU (names, positions)
    returns_elements: tuple = ()  # function returning a tuple: "tensor" (made on the CPU) or None, per element
    returns_class: Union[tuple[()], tuple[str, str]] = ()  # function returning a module: (file, class name) of
    # that module, if known
    loader_params: tuple = ()  # function: parameters (positions, keywords) whose loader's batches it moves to the device


@dataclass(frozen=True)
class CallShape:
    """What the callers of a function (or a class's constructor) in other files pass it."""

    positional: tuple = ()  # one kind (or None) per position
    keywords: tuple = ()  # (name, kind) pairs
    stateful: tuple = ()  # positions / names whose module holds state
    callers: tuple = ()  # the calling files, relative to the project root, for messages
    parameterized: tuple = ()  # positions / names whose module certainly has parameters (every caller's)

    def merge(self, other: "CallShape") -> "CallShape":
        """What every caller agrees on: a position is a model only if no caller says otherwise."""
        length = max(len(self.positional), len(other.positional))
        mine = self.positional + (None,) * (length - len(self.positional))
        theirs = other.positional + (None,) * (length - len(other.positional))
        positional = tuple(_join(a, b) for a, b in zip(mine, theirs))
        keywords = dict(self.keywords)
        for name, kind in other.keywords:
            keywords[name] = _join(keywords[name], kind) if name in keywords else kind
        return CallShape(positional, tuple(sorted(keywords.items())),
                         tuple(sorted(set(self.stateful) | set(other.stateful), key=str)),
                         tuple(sorted(set(self.callers) | set(other.callers))),
                         tuple(sorted(set(self.parameterized) & set(other.parameterized), key=str)))


def _join(a: Optional[str], b: Optional[str]) -> Optional[str]:
    """Two callers' kinds for one parameter. A tensor on the device for one caller and on the CPU
    for another is a device tensor: ``.cpu()`` before ``.numpy()`` is right for both."""
    if a == b:
        return a
    if {a, b} == {"tensor", "device_tensor"}:
        return "device_tensor"
    return None


@dataclass
class Seeds:
    imported: dict = field(default_factory=dict)  # qualified name -> Exported
    star_names: dict = field(default_factory=dict)  # local name -> qualified name
    incoming: dict = field(default_factory=dict)  # "train_epoch" / "Trainer" -> CallShape

    def __bool__(self) -> bool:
        return bool(self.imported or self.star_names or self.incoming)

    def fingerprint(self) -> str:
        """A stable text of everything the analysis reads, for cache keys."""
        data = {
            "imported": {k: _plain(v) for k, v in sorted(self.imported.items())},
            "star": sorted(self.star_names.items()),
            "incoming": {k: _plain(v) for k, v in sorted(self.incoming.items())},
        }
        return json.dumps(data, sort_keys=True, default=list)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _plain(value):
    """``dataclasses.asdict`` as JSON reads it (the same text), without its deep copies: the fingerprint is
    taken for every analysis of a project file."""
    kind = type(value)
    if kind is str or kind is bool or kind is int or value is None:
        return value
    names = _FIELDS.get(kind)
    if names is None and is_dataclass(value):
        names = _FIELDS[kind] = tuple(f.name for f in fields(value))
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return asdict(value) if is_dataclass(value) else value


NO_SEEDS = Seeds()
