"""Run a function on a module right after it is imported, without importing it ourselves.

The data libraries a script might use (Hugging Face ``datasets``, ``sklearn``,
``torchaudio``) take seconds to import: a child patches them only if the
script imports them.
"""

from __future__ import annotations

import importlib.abc
import sys


class _Loader:
    """Wraps the real loader: its module is patched once it has executed."""

    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, patches: dict):
        self.patches = dict(patches)  # module name -> function(module)

    def find_spec(self, fullname, path=None, target=None):
        patch = self.patches.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        del self.patches[fullname]  # once
        spec.loader = _Loader(spec.loader, patch)
        return spec


def install(patches: dict) -> None:
    """Patch each named module when it is imported (at once if it already is)."""
    pending = {}
    for name, patch in patches.items():
        module = sys.modules.get(name)
        if module is not None:
            patch(module)
        else:
            pending[name] = patch
    if pending:
        sys.meta_path.insert(0, AfterImport(pending))
