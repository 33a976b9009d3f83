"""What git ignores: the ``.gitignore`` files of a repository, read as git reads them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # imported where an ignore file is read: a tree without one never loads it
    import pathspec


def _absolute(path: Path) -> Path:
    # Not resolve(): a link inside the tree is judged where it lies, as git does.
    return Path(os.path.abspath(path))


def _repository_root(folder: Path) -> Optional[Path]:
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def _read_spec(path: Path) -> Optional[pathspec.PathSpec]:
    try:
        # lines as git splits them: at \n only (a form feed or U+2028 is part of a pattern)
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError:
        return None
    import pathspec

    try:
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
    except Exception:  # a line git reads but pathspec refuses (`!`, `\\`, `[z-a]`): without it
        spec = pathspec.GitIgnoreSpec.from_lines([line for line in lines if _usable(line)])
    return spec if spec.patterns else None


def _usable(line: str) -> bool:
    import pathspec

    try:
        pathspec.GitIgnoreSpec.from_lines([line])
    except Exception:
        return False
    return True


class IgnoreRules:
    """The ignore files that apply along a folder walk.

    Each ``.gitignore`` speaks about the paths below its own folder, so every spec is
    kept with its folder and asked about paths relative to it. Git does not look into
    an ignored folder, so the walk prunes those and a later file cannot re-include
    what lies inside them.
    """

    def __init__(self) -> None:
        self._specs: dict[Path, pathspec.PathSpec] = {}
        self._seen: set[Path] = set()

    @classmethod
    def for_folder(cls, folder: Path) -> "IgnoreRules":
        """The rules for a walk from ``folder``: its repository's ignore files above it too."""
        rules = cls()
        folder = _absolute(folder)
        root = _repository_root(folder)
        if root is not None:
            exclude = _read_spec(root / ".git" / "info" / "exclude")
            if exclude is not None:
                rules._specs[root] = exclude
            for above in reversed(folder.relative_to(root).parents):
                rules.enter(root / above)
            if folder != root and rules.ignores(folder, is_dir=True):
                # A folder named on the command line is checked even where git ignores it
                # (a vendored package, a virtual environment): only the ignore files inside it apply.
                rules = cls()
        return rules

    def enter(self, folder: Path) -> None:
        """Read the ``.gitignore`` of a folder the walk reaches (once)."""
        folder = _absolute(folder)
        if folder in self._seen:
            return
        self._seen.add(folder)
        spec = _read_spec(folder / ".gitignore")
        if spec is None:
            return
        if folder in self._specs:  # .git/info/exclude and the root .gitignore: one spec
            spec = self._specs[folder] + spec
        self._specs[folder] = spec

    def ignores(self, path: Path, is_dir: bool) -> bool:
        if not self._specs:
            return False
        path = _absolute(path)
        for base, spec in self._specs.items():
            try:
                relative = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if spec.match_file(relative + "/" if is_dir else relative):
                return True
        return False
