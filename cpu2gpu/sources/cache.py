"""The check cache: what a file's check found, keyed by its bytes, the tool and the settings.

A second ``cpu2gpu check`` over an unchanged tree reads one small JSON file per file
instead of parsing it. The key is a hash of the file's content, the tool (its version
and the code of the package itself, so that an edited rule never answers from a stale
entry) and every setting that changes what a check reports. The path is not part of it:
the findings are stored without it and get the path they are asked for.

Layout: ``.cpu2gpu_cache/<version>/<key[:2]>/<key>.json``, each entry written through a
temp file and renamed, so that runs side by side never read half an entry.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

from .. import __version__

CACHE_DIR_NAME = ".cpu2gpu_cache"
# the package root (this module lives in cpu2gpu/sources/): an edit to any rule or analysis module
# must invalidate what the cache holds
_PACKAGE = Path(__file__).resolve().parent.parent


def fingerprinted_modules() -> list[Path]:
    """Every module whose code decides a finding: all of the cpu2gpu package."""
    return sorted(_PACKAGE.rglob("*.py"))


@lru_cache(maxsize=1)
def tool_fingerprint() -> str:
    """The version plus the size and mtime of every module of the package."""
    import hashlib  # (imported where a cache is used: OpenSSL takes 3 MB)

    digest = hashlib.sha256(__version__.encode())
    for path in fingerprinted_modules():
        try:
            info = path.stat()
        except OSError:
            continue
        digest.update(f"{path.relative_to(_PACKAGE)}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def settings_fingerprint(rule_codes: Sequence[str], unsafe_fixes: bool, device_expression: Optional[str]) -> str:
    import hashlib

    settings = {"rules": sorted(rule_codes), "unsafe_fixes": unsafe_fixes, "device_expression": device_expression}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def cache_root(project_file: Optional[str]) -> Path:
    """Beside the pyproject.toml the settings came from, else in the current folder."""
    base = Path(project_file).parent if project_file else Path.cwd()
    return base / CACHE_DIR_NAME


class Cache:
    """Entries are plain JSON values (what ``checking`` stores for one file)."""

    def __init__(self, root: Path, settings_key: str) -> None:
        self.root = root
        self.folder = root / __version__
        self.prefix = (tool_fingerprint() + settings_key).encode()
        import hashlib

        self._sha256 = hashlib.sha256
        self.hits = 0
        self.misses = 0
        self._writable = True

    def key(self, data: bytes, kind: str) -> str:
        return self._sha256(self.prefix + kind.encode() + b"\0" + data).hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str):
        try:
            with open(self._path(key), "rb") as handle:
                value = json.loads(handle.read())
        except (OSError, ValueError):
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str, value) -> None:
        if not self._writable:
            return
        path = self._path(key)
        try:
            if not self.root.exists():
                self._create_root()
            path.parent.mkdir(parents=True, exist_ok=True)
            import tempfile

            fd, temp = tempfile.mkstemp(prefix=".entry.", dir=str(path.parent))
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(value, handle, separators=(",", ":"))
            os.replace(temp, path)
        except OSError:
            self._writable = False  # a read-only tree: run without the cache, say nothing

    def _create_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # Neither git nor backup tools should pick the cache up.
        (self.root / ".gitignore").write_text("# Created by cpu2gpu\n*\n", encoding="utf-8")
        (self.root / "CACHEDIR.TAG").write_text(
            "Signature: 8a477f597d28d172789f06886806bc55\n# cpu2gpu's check cache: safe to delete.\n",
            encoding="utf-8")
