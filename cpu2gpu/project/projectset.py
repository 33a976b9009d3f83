"""The project around the files being checked: which project files they import and which call them.

Real training code keeps the model, the data and the loop in different files. For each file to
check, this module works out its ``Seeds`` (see ``seeds.py``): what the names it imports from
other project files are, and what other project files pass to its functions and classes.

- The project root is the nearest folder with ``pyproject.toml``, ``setup.py`` or ``.git``
  above the file, else the file's folder. Files outside it (site-packages) stay unknown.
- Imports are resolved as Python resolves them when the script runs: the importing file's
  folder first, then the root and ``root/src``, packages with and without ``__init__.py``,
  relative imports, re-exports through ``__init__.py``, ``import x as y``, star imports.
- A file is parsed only when it is in play: it imports a project file, or a file in play
  imports it. A cheap scan of its import lines decides that before any parse, so a lone
  script costs nothing here.
- Each file in play is parsed once and analysed with the summaries of what it imports
  (bottom-up; an import cycle reads what is known so far), then the calls it makes into other
  project files become the ``incoming`` seeds of those files, for a few rounds (chains of
  calls across files) until nothing changes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Iterable, Optional

import libcst as cst

from ..analysis import Analyzer, class_holds_state, class_places_itself
from ..engine import SourceError, parse, run_with_deep_stack
from ..sources.files import read_source, skipped_dir
from ..output.formats import shown
from ..analysis.classdefs import walk
from ..analysis.core import iterates_batches
from ..analysis.facts import Kind, Place, Value
from ..analysis.imports import ImportTable, dotted
from ..analysis.seeds import CallShape, Exported, Seeds

ROOT_MARKERS = ("pyproject.toml", "setup.py", ".git")
_UNKNOWN = object()
_MAX_IMPORT_DEPTH = 40  # files summarised inside one another (each costs a few stack frames)
_ROUNDS = 3  # rounds of caller -> callee seeds: main -> Trainer -> train_epoch
_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import\b|import[ \t]+([\w., \t]+))", re.M)
# import_module("models." + name) / import_module(f"models.{name}"): the package (or module) it loads from
_IMPORT_MODULE_CALL = re.compile(rb"""import_module\(\s*f?["']([A-Za-z_][\w.]*)""")


def find_root(path: Path) -> Path:
    """The nearest folder with a project marker above the file; without one, the folder that holds the
    file's package (``pkg/fitting.py`` of an unmarked folder belongs with the scripts beside ``pkg/``,
    which import it), else the file's own folder."""
    folder = path.resolve().parent
    marked = next((candidate for candidate in (folder, *folder.parents) if is_marked_root(candidate)), None)
    if marked is not None:
        return marked
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


def is_marked_root(root: Path) -> bool:
    """A real project root (a marker file), not just the folder a loose script lies in."""
    return any((root / marker).exists() for marker in ROOT_MARKERS)


def _import_names(data: bytes) -> list[str]:
    """The module names of a file's import lines, without parsing it (``.model``, ``nets.cnn``)."""
    names = []
    for match in _IMPORT_LINE.finditer(data):
        if match.group(1) is not None:
            names.append(match.group(1).decode("ascii", "replace"))
        else:
            for part in match.group(2).decode("ascii", "replace").split(","):
                part = part.strip().split()
                if part:
                    names.append(part[0])
    if b"import_module" in data:
        names.extend(m.group(1).decode("ascii").rstrip(".") for m in _IMPORT_MODULE_CALL.finditer(data))
    return names


def _import_nodes(body: Iterable[cst.CSTNode]) -> Iterable[cst.Import | cst.ImportFrom]:
    """Every import statement of a module, also those inside functions, classes, ifs and trys."""
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    yield small
        elif isinstance(stmt, cst.BaseCompoundStatement):
            for field in ("body", "orelse", "finalbody"):
                part = getattr(stmt, field, None)
                while part is not None and not isinstance(part, cst.BaseSuite):
                    part = getattr(part, "body", None)
                if isinstance(part, cst.IndentedBlock):
                    yield from _import_nodes(part.body)
            for handler in getattr(stmt, "handlers", ()):
                if isinstance(handler.body, cst.IndentedBlock):
                    yield from _import_nodes(handler.body.body)


def _assignments(module: cst.Module) -> Iterable[cst.Assign]:
    """Every one-line assignment of a module, also inside functions, classes and blocks."""
    for node in walk(module):
        if type(node) is cst.Assign:
            yield node


class ProjectFile:
    def __init__(self, path: Path, data: bytes) -> None:
        self.path = path
        self.data = data
        self.module: Optional[cst.Module] = None
        self.imports = ImportTable()
        self.stars: list[str] = []  # module names of ``from x import *``
        self.summary: Optional[dict[str, Exported]] = None
        self.analyzer: Optional[Analyzer] = None  # the last analysis of the file, read by its summary
        self.analyzed_with = ""  # the fingerprint of the seeds that analysis read
        self.seeds = Seeds()


class Project:
    """The files of one project tree that the checked files reach, and their seeds."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[Path, Optional[ProjectFile]] = {}
        self._summarizing: set[Path] = set()
        self._outgoing: dict[Path, list] = {}  # calls each file makes into other project files
        self._module_paths: dict[tuple, Optional[Path]] = {}
        self._root_text = str(root)
        self._in_folder: dict[tuple, Optional[Path]] = {}
        self._tree: Optional[list[Path]] = None
        self._bases_of: dict[tuple, list[Path]] = {}
        self._in_play_of: dict[tuple, list[Path]] = {}
        self._module_of: dict[tuple, Optional[Path]] = {}  # (importer, name): the lookup without .parent
        self._present: dict[Path, bool] = {}  # folder or file -> it exists (one stat each)
        self._folders: set[Path] = set()  # the locations found that are (namespace) folders, not files

    # -- where a module lives ---------------------------------------------------------

    def _bases(self, importer: Path, level: int) -> list[Path]:
        key = (importer.parent, level)  # the same for every file of a folder
        bases = self._bases_of.get(key)
        if bases is None:
            bases = self._bases_of[key] = self._find_bases(importer, level)
        return bases

    def _find_bases(self, importer: Path, level: int) -> list[Path]:
        if level:
            base = importer.parent
            for _ in range(level - 1):
                base = base.parent
            return [base]
        bases = [importer.parent, self.root, self.root / "src"]
        bases += [p for p in importer.parent.parents if p == self.root or self.root in p.parents]
        return list(dict.fromkeys(bases))

    def module_path(self, importer: Path, name: str) -> Optional[Path]:
        """The file (or namespace folder) that ``import name`` in ``importer`` loads, inside the root."""
        known = self._module_of.get((importer, name), _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        key = (importer.parent, name)
        if key not in self._module_paths:  # the same few names are looked up from every file of a folder
            self._module_paths[key] = self._find_module(importer, name)
        found = self._module_of[(importer, name)] = self._module_paths[key]
        return found

    def is_folder(self, location: Path) -> bool:
        """Whether a location ``module_path`` gave is a (namespace package's) folder; else it is a file."""
        return location in self._folders

    def _exists(self, path: Path) -> bool:
        present = self._present.get(path)
        if present is None:
            present = self._present[path] = path.exists()
        return present

    def _find_module(self, importer: Path, name: str) -> Optional[Path]:
        stripped = name.lstrip(".")
        level = len(name) - len(stripped)
        for base in self._bases(importer, level):
            key = (base, stripped)
            if key not in self._in_folder:  # torch, numpy...: looked up in the same few folders
                self._in_folder[key] = self._module_in(base, stripped)
            if self._in_folder[key] is not None:
                return self._in_folder[key]
        return None

    def _module_in(self, base: Path, stripped: str) -> Optional[Path]:
        target = base.joinpath(*stripped.split(".")) if stripped else base
        if not self._inside(target):
            return None
        if stripped and not self._exists(base / stripped.split(".", 1)[0]) \
                and not self._exists(base / (stripped.split(".", 1)[0] + ".py")):
            return None  # one stat answers for every name that is not here
        for candidate in (target.with_suffix(".py") if stripped else None, target / "__init__.py"):
            if candidate is not None and candidate.is_file():
                return candidate
        if stripped and target.is_dir():
            self._folders.add(target)
            return target  # a namespace package: its names are submodules
        return None

    def _inside(self, path: Path) -> bool:
        """Within the root. Paths here are built from resolved ones, so a prefix test suffices."""
        text = str(path)
        return text == self._root_text or text.startswith(self._root_text + os.sep)

    def resolve(self, importer: Path, qualified: str) -> Optional[Exported]:
        """What a qualified name (as the importer's ``ImportTable`` spells it) is in its project file."""
        stripped = qualified.lstrip(".")
        dots = qualified[: len(qualified) - len(stripped)]
        parts = stripped.split(".") if stripped else []
        for cut in range(len(parts) - 1, -1, -1):
            module_name, attrs = dots + ".".join(parts[:cut]), parts[cut:]
            if not module_name:
                continue
            location = self.module_path(importer, module_name)
            if location is None:
                continue
            if self.is_folder(location):
                location = self.module_path(importer, f"{module_name}.{attrs[0]}") if len(attrs) > 1 else None
                if location is None:
                    continue
                attrs = attrs[1:]
            summary = self.summary(location)
            if summary is not None and len(attrs) == 1:
                return summary.get(attrs[0])
        return None

    # -- reading files ----------------------------------------------------------------

    def load(self, path: Path) -> Optional[ProjectFile]:
        # paths here are absolute and built from resolved ones: no resolve() (a syscall per part)
        if path not in self.files:
            try:
                self.files[path] = ProjectFile(path, read_source(path))  # a FIFO must not block
            except OSError:
                self.files[path] = None
        return self.files[path]

    def parsed(self, path: Path) -> Optional[ProjectFile]:
        pf = self.load(path)
        if pf is None or pf.module is not None:
            return pf
        try:
            pf.module = parse(pf.data)  # the engine's parse: what it refuses teaches nothing
        except (SourceError, RecursionError, MemoryError, ValueError):  # its own check reports it
            self.files[path] = None
            return None
        for node in _import_nodes(pf.module.body):
            pf.imports.add(node)
            if isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar):
                module = dotted(node.module) if node.module is not None else ""
                pf.stars.append("." * len(node.relative) + (module or ""))
        if b"import_module" in pf.data:
            for assign in _assignments(pf.module):
                pf.imports.add_dynamic(assign)
        return pf

    def project_imports(self, path: Path) -> list[Path]:
        """The project files a file's import lines reach (by a scan of its text, no parse)."""
        pf = self.load(path)
        if pf is None:
            return []
        found = []
        for name in _import_names(pf.data):
            location = self.module_path(pf.path, name)
            if location is not None and not self.is_folder(location) and location != pf.path:
                found.append(location)
            elif location is not None and self.is_folder(location):
                found.extend(p for p in location.glob("*.py"))
        # from pkg import model: model.py is a submodule of pkg
        return list(dict.fromkeys(found))

    # -- summaries ----------------------------------------------------------------------

    def seeds_from_imports(self, pf: ProjectFile) -> None:
        imported: dict[str, Exported] = {}
        for qualified in set(pf.imports.names.values()):
            if qualified.endswith(".*"):
                imported.update(self._any_module_of(pf.path, qualified))
                continue
            location = self.module_path(pf.path, qualified)
            if location is not None and not self.is_folder(location):
                # import model as M / from pkg import model: every name of it, as M.Net resolves
                for name, exported in (self.summary(location) or {}).items():
                    imported[f"{qualified}.{name}"] = exported
            resolved = self.resolve(pf.path, qualified)
            if resolved is not None:
                imported[qualified] = resolved
        star_names: dict[str, str] = {}
        for module_name in pf.stars:
            location = self.module_path(pf.path, module_name)
            if location is None or self.is_folder(location):
                continue
            for name, exported in (self.summary(location) or {}).items():
                if not name.startswith("_"):
                    qualified = f"{module_name}{name}" if module_name.endswith(".") else f"{module_name}.{name}"
                    star_names[name] = qualified
                    imported[qualified] = exported
        pf.seeds.imported, pf.seeds.star_names = imported, star_names

    def _any_module_of(self, importer: Path, pattern: str) -> dict[str, Exported]:
        """``models.*`` (a module of ``models`` chosen at run time): the module classes every module of the
        package that defines the name agrees on (``Model`` is a module class in each); other names stay
        unknown."""
        location = self.module_path(importer, pattern[:-2])
        if location is None:
            return {}
        folder = location if self.is_folder(location) else location.parent if location.name == "__init__.py" else None
        if folder is None:
            return {}
        found: dict[str, list[Exported]] = {}
        for path in sorted(folder.glob("*.py")):
            if path.name != "__init__.py":
                for name, exported in (self.summary(path) or {}).items():
                    found.setdefault(name, []).append(exported)
        return {f"{pattern}.{name}": dataclasses.replace(kinds[0], holds_state=all(e.holds_state for e in kinds))
                for name, kinds in found.items() if all(e.kind == "module_class" for e in kinds)}

    def summary(self, path: Path) -> Optional[dict[str, Exported]]:
        """What a project file exports: its module classes, classes, functions (by what they return)."""
        pf = self.parsed(path)
        if pf is None:
            return None
        if pf.summary is not None:
            return pf.summary
        if pf.path in self._summarizing or len(self._summarizing) >= _MAX_IMPORT_DEPTH:
            return {}  # an import cycle, or a chain too deep to follow at once: settled later
        self._summarizing.add(pf.path)
        try:
            self.seeds_from_imports(pf)
            pf.summary = self._exports(pf, self._analyse(pf))
        finally:
            self._summarizing.discard(pf.path)
        return pf.summary

    def _exports(self, pf: ProjectFile, analyzer: Analyzer) -> dict[str, Exported]:
        rel = self._relative(pf.path)
        exports: dict[str, Exported] = {}
        # re-exports first (``__init__.py``), so that the file's own definitions win
        for local, qualified in pf.imports.names.items():
            if qualified in pf.seeds.imported:
                exports[local] = pf.seeds.imported[qualified]
        for local, qualified in pf.seeds.star_names.items():
            exports.setdefault(local, pf.seeds.imported[qualified])
        for name, cls in analyzer.module_class_values.items():
            exports[name] = Exported("module_class", rel, name,
                                     holds_state=class_holds_state(cls) or class_places_itself(cls),
                                     cpu_inputs=tuple(sorted(cls.cpu_inputs, key=str)))
        facts = analyzer.facts
        moved = {id(v.loader) for v in facts.values if v.kind is Kind.BATCH and v.loader is not None and facts.is_bound(v)}
        moving: dict[str, list] = {}
        for function, key, loader in facts.param_loaders:
            if loader.moved_batches or id(loader) in moved:
                moving.setdefault(function, []).append(key)
        loader_params = {name: tuple(sorted(keys, key=str)) for name, keys in moving.items()}
        for name, value in analyzer.global_scope.names.items():
            if value is None or "." in name:
                continue
            if value.kind is Kind.FUNCTION:
                exports[name] = Exported("function", rel, name, returns=_returned_kind(value.returns),
                                         returns_elements=_returned_elements(facts, value.returns),
                                         holds_state=value.returns is None or value.returns.stateful,
                                         returns_class=self._class_of(rel, analyzer, value.returns),
                                         loader_params=loader_params.get(name, ()))
            elif value.kind is Kind.CLASS:
                exports[name] = Exported("class", rel, name, loader_params=loader_params.get(name, ()),
                                         returns="loader" if iterates_batches(value) else None)
            elif value.kind is Kind.DEVICE and name in analyzer.global_scope.device_names:
                # device = torch.device("cuda" if ...): the project's device, which importers reuse
                exports[name] = Exported("value", rel, name, returns="device")
        exports.update(self._registries(analyzer.facts.module, rel, exports))
        return exports

    @staticmethod
    def _registries(module: cst.Module, rel: str, exports: dict[str, Exported]) -> dict[str, Exported]:
        """``MODELS = {"cnn": CNN, "mlp": MLP}`` at module level: a dict whose values are all module
        classes; ``MODELS[name]()`` is then a model."""
        found = {}
        for stmt in module.body:
            if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                continue
            assign = stmt.body[0]
            if not (isinstance(assign, (cst.Assign, cst.AnnAssign)) and isinstance(assign.value, cst.Dict)):
                continue
            targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
            values = [e.value for e in assign.value.elements if isinstance(e, cst.DictElement)]
            if not values or len(values) != len(assign.value.elements):
                continue
            classes = [c for c in (exports.get(v.value) if isinstance(v, cst.Name) else None for v in values)
                       if c is not None and c.kind == "module_class"]
            if len(classes) == len(values):
                for target in targets:
                    if isinstance(target, cst.Name):
                        found[target.value] = Exported("registry", rel, target.value,
                                                       holds_state=all(c.holds_state for c in classes))
        return found

    @staticmethod
    def _class_of(rel: str, analyzer: Analyzer, value: Optional[Value]) -> tuple:
        cls = value.class_value if value is not None and value.kind is Kind.MODULE else None
        if cls is None or cls.name is None:
            return ()
        if cls.origin_file is not None:
            return (cls.origin_file, cls.name)
        return (rel, cls.name) if analyzer.module_class_values.get(cls.name) is cls else ()

    def _analyse(self, pf: ProjectFile) -> Analyzer:
        """Analyse the file with its seeds as they are now; keep the analysis (its summary and the
        final check read it, the latter only while the seeds have not moved since) and its calls
        into other project files."""
        assert pf.module is not None  # only a parsed file is analysed (``parsed`` came before)
        pf.analyzed_with = pf.seeds.fingerprint()
        analyzer = pf.analyzer = Analyzer(pf.module, seeds=pf.seeds)
        self._outgoing[pf.path] = analyzer.run().outgoing_calls
        return analyzer

    def _relative(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.name

    # -- the files in play and their seeds -----------------------------------------------

    def seeds_for(self, targets: list[Path]) -> dict[Path, Seeds]:
        """The seeds of each target (resolved paths); targets with nothing to learn get none."""
        in_play = self._in_play(targets)
        for path in in_play:
            self.summary(path)
        self._settle(in_play)  # an import cycle summarised a file before what it imports
        for _ in range(_ROUNDS):
            incoming = self._incoming()
            changed = [(p, pf) for p, pf in ((p, self.files.get(p)) for p in in_play)
                       if pf is not None and pf.seeds.incoming != incoming.get(p, {})]
            if not changed:
                break
            for path, stale in changed:
                stale.seeds.incoming = incoming.get(path, {})
                self._analyse(stale)
        # What the callees learnt from their callers (a loader whose batches they move) goes back
        # into the summaries the callers read.
        for path in in_play:
            pf = self.files.get(path)
            if pf is not None and pf.analyzer is not None:
                pf.summary = self._exports(pf, pf.analyzer)
        self._settle(in_play)
        result = {}
        for target in targets:
            pf = self.files.get(target)
            if pf is not None and pf.seeds:
                result[target] = pf.seeds
        return result

    def _settle(self, in_play: list[Path]) -> None:
        """Read the summaries again until no file's imports change (a few rounds at most)."""
        for _ in range(_ROUNDS):
            changed = False
            for path in in_play:
                pf = self.files.get(path)
                if pf is None or pf.module is None:
                    continue
                before = (pf.seeds.imported, pf.seeds.star_names)
                self.seeds_from_imports(pf)
                if (pf.seeds.imported, pf.seeds.star_names) != before:
                    changed = True
                    pf.summary = self._exports(pf, self._analyse(pf))
            if not changed:
                return

    def _in_play(self, targets: list[Path]) -> list[Path]:
        """The targets that import project files, what they import (transitively), and the files
        of the tree that call into them, and their callers in turn (main -> trainer -> train_epoch).
        (Asked twice in a run, by the cache keys and by the seeds: found once.)"""
        key = tuple(targets)
        found = self._in_play_of.get(key)
        if found is None:
            found = self._in_play_of[key] = self._find_in_play(targets)
        return list(found)

    def _find_in_play(self, targets: list[Path]) -> list[Path]:
        in_play: dict[Path, None] = {}
        explored: set[Path] = set()
        targeted = set(targets)

        def explore(start: Iterable[Path]) -> None:
            queue = list(start)
            while queue:
                path = queue.pop()
                if path in explored:
                    continue
                explored.add(path)
                reached = self.project_imports(path)
                if reached or path not in targeted:
                    in_play[path] = None
                for other in reached:
                    in_play.setdefault(other, None)
                    queue.append(other)

        explore(targets)
        frontier = list(targets)
        while frontier:
            callers = self._callers(frontier, frozenset(explored))
            explore(callers)
            frontier = callers
        return list(in_play)

    def digest(self, targets: list[Path]) -> bytes:
        """A digest of every file in play around the targets, from a scan of import lines (no
        parse): what a cache key needs so that a change in model.py re-checks main.py."""
        in_play = self._in_play(targets)
        if not in_play:
            return b""
        import hashlib  # (here: a run without the cache never loads OpenSSL, 3 MB)

        h = hashlib.sha256()
        for path in sorted(in_play):
            pf = self.load(path)
            h.update(self._relative(path).encode() + b"\0" + hashlib.sha256(pf.data if pf else b"").digest())
        return h.hexdigest().encode()

    def _callers(self, targets: list[Path], explored: frozenset = frozenset()) -> list[Path]:
        """Files of the tree whose import lines reach a target (pre-commit names only staged files);
        files already ``explored`` are known."""
        # a target is reached by its own name, or through its package's __init__.py (re-exports)
        packages = {t.parent / "__init__.py" for t in targets if (t.parent / "__init__.py").is_file()}
        targeted = set(targets)
        reachable = targeted | packages
        stems = {t.stem for t in targets} | {t.parent.name for t in packages}
        callers = []
        for path in self._tree_files():
            if path in targeted or path in explored:
                continue
            pf = self.load(path)
            if pf is None or not any(s.encode() in pf.data for s in stems):
                continue
            if any(t in reachable for t in self.project_imports(path)):
                callers.append(path)
        return callers

    def _tree_files(self) -> list[Path]:
        """The Python files that may call into the targets. Without a project marker the root is
        just the script's folder (~/Downloads, /tmp): only its own files, not every folder below."""
        if self._tree is None:
            self._tree = []
            recursive = is_marked_root(self.root)
            for folder, dirs, files in os.walk(self.root):
                dirs[:] = sorted(d for d in dirs if not skipped_dir(Path(folder, d))) if recursive else []
                self._tree.extend(Path(folder, name) for name in sorted(files) if name.endswith(".py"))
        return self._tree

    def _incoming(self) -> dict[Path, dict[str, CallShape]]:
        incoming: dict[Path, dict[str, CallShape]] = {}
        for caller, calls in self._outgoing.items():
            pf = self.files.get(caller)
            for qualified, shape in calls:
                shape = dataclasses.replace(shape, callers=(self._relative(caller),))
                if qualified.startswith("@"):  # @model.py:Net.fit: a method of a module class of that file
                    file, _, name = qualified[1:].partition(":")
                    _add_shape(incoming, self.root / file, name, shape)
                    continue
                exported = pf.seeds.imported.get(qualified) if pf is not None else None
                name = exported.name if exported is not None else None
                if exported is None and pf is not None:  # model.Net.fit: a method of a module class
                    owner, _, method = qualified.rpartition(".")
                    exported = pf.seeds.imported.get(owner)
                    if exported is None or exported.kind != "module_class":
                        continue
                    name = f"{exported.name}.{method}"
                if exported is None or exported.kind not in ("function", "class", "module_class"):
                    continue
                if exported.kind == "module_class" and "." not in name:
                    continue  # Net(...): its constructor is read from its own file
                _add_shape(incoming, self.root / exported.file, name, shape)
        return incoming


def _add_shape(incoming: dict, callee: Path, name: str, shape: CallShape) -> None:
    """One more caller of ``name`` in ``callee``: what all its callers agree on."""
    known = incoming.setdefault(callee, {})
    known[name] = known[name].merge(shape) if name in known else shape


def _returned_elements(facts, value: Optional[Value]) -> tuple:
    """A returned tuple: which elements are tensors made on the CPU (not computed from arguments)."""
    if value is None or value.kind is not Kind.TUPLE:
        return ()
    return tuple("tensor" if e is not None and e.kind in (Kind.TENSOR, Kind.BATCH) and facts.place(e) is Place.CPU
                 else None for e in value.elements)


def _returned_kind(value: Optional[Value]) -> Optional[str]:
    if value is None:
        return None
    if value.kind is Kind.TUPLE:
        return "tuple" if any(e is not None and e.kind in (Kind.TENSOR, Kind.BATCH) for e in value.elements) else None
    kind = {Kind.MODULE: "module", Kind.TENSOR: "tensor", Kind.BATCH: "tensor", Kind.LOADER: "loader",
            Kind.OPTIMIZER: "optimizer"}.get(value.kind)
    if kind == "module" and not value.stateful:
        return None
    if kind == "tensor" and not (value.is_root and value.explicit is None):
        return None  # computed from what it is given: it follows its inputs' device
    return kind


class ProjectSet:
    """The projects of a set of paths, grouped by project root; each project is read once."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.projects: dict[Path, Project] = {}
        self.located: dict[str, tuple[Path, Path]] = {}  # path as given -> (root, resolved path)
        roots: dict[Path, Path] = {}  # folder -> its root (the same for every file of a folder)
        for raw in paths:
            if raw.endswith(".py"):
                path = Path(raw).resolve()
                root = roots.get(path.parent)
                if root is None:
                    root = roots[path.parent] = find_root(path)
                self.projects.setdefault(root, Project(root))
                self.located[raw] = (root, path)

    def _by_root(self, raws: Iterable[str]) -> dict[Path, list[tuple[str, Path]]]:
        groups: dict[Path, list[tuple[str, Path]]] = {}
        for raw in raws:
            if raw in self.located:
                root, path = self.located[raw]
                groups.setdefault(root, []).append((raw, path))
        return groups

    def digests(self) -> dict[str, bytes]:
        """One digest per project (of the files in play around all its targets), by path as given."""
        found: dict[str, bytes] = {}
        for root, items in self._by_root(self.located).items():
            digest = self.projects[root].digest([p for _, p in items])
            for raw, _ in items:
                found[raw] = digest
        return found

    def in_play(self) -> set[str]:
        """The paths (as given) whose project has files in play around them: those with a non-empty
        ``digests()`` entry, found without hashing the files."""
        return {raw for root, items in self._by_root(self.located).items()
                if self.projects[root]._in_play([p for _, p in items]) for raw, _ in items}

    def root_of(self, raw: str) -> Optional[Path]:
        """The project root of a path as given (None: not a Python file)."""
        located = self.located.get(raw)
        return located[0] if located is not None else None

    def release(self, root: Path) -> None:
        """Forget a project once its seeds are read: its files' trees and analyses are freed."""
        if root in self.projects:
            self.projects[root] = Project(root)

    def seeds(self, raws: Iterable[str], parsed: Optional[dict] = None) -> dict[str, Seeds]:
        """The seeds of the given paths. ``parsed``, when given, receives the modules parsed on the
        way (path as given -> (bytes, module, facts or None)), so that a check in this process does not
        parse them again, nor analyse them again when the seeds did not move since the last analysis."""
        seeds: dict[str, Seeds] = {}
        for root, items in self._by_root(raws).items():
            project = self.projects[root]
            try:
                # deep chains of values or imports: retried on a thread with a big stack
                found = run_with_deep_stack(project.seeds_for, [p for _, p in items])
            except Exception as error:  # a bug here must not cost the files their own check
                sys.stderr.write(f"warning: {shown(str(root))}: the project around these files could not be "
                                 f"read ({type(error).__name__}: {error}); each file is checked on its own\n")
                continue
            for raw, path in items:
                if path in found:
                    seeds[raw] = found[path]
                pf = project.files.get(path)
                if parsed is not None and pf is not None and pf.module is not None:
                    analyzer = pf.analyzer
                    current = analyzer is not None and pf.analyzed_with == pf.seeds.fingerprint()
                    parsed[raw] = (pf.data, pf.module, analyzer.facts if analyzer is not None and current else None)
        return seeds


def project_seeds(paths: Iterable[str]) -> dict[str, Seeds]:
    """The seeds of every given Python file, by the path as given."""
    paths = list(paths)
    return ProjectSet(paths).seeds(paths)
