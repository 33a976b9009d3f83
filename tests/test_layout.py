"""The layout of both halves: in each, the layers import one way, from the interface down, and no
modules import each other in a circle (an import cycle makes a module's import order matter and
hides layering mistakes), not even through the imports under ``if TYPE_CHECKING:``. Read from the
source with ``ast``: nothing is imported.

- ``cpu2gpu/``, the static half: its top-level imports (an import inside a function runs later and is
  how a layer reaches up on purpose, e.g. the lazy CLI).
- ``runtime/``, installed as ``cpu2gpu.runtime``: every import, at the top or inside a function (most
  of its imports wait for torch or for the child's isolation, so a lazy one counts as much).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Half:
    folder: Path
    dotted: str  # the import name of the folder
    layers: list  # top first: a module may import from its own layer and the layers below
    lazy_counts: bool  # whether imports inside functions count
    top_level: tuple  # the only modules directly in the folder

    def unit(self, module: str) -> str:
        """The part of the half a module belongs to (a subpackage, or a module of the top)."""
        depth = len(self.dotted.split("."))
        parts = module.split(".")
        return parts[depth] if len(parts) > depth else "__init__"


STATIC = Half(ROOT / "cpu2gpu", "cpu2gpu", [
    {"cli", "lsp", "__main__"},  # the interface
    {"runs"},  # runs over many files: targets, workers, the cache, progress
    {"project"},  # the project layer: what files say about each other
    {"notebooks"},  # notebooks: cells to one program and back
    {"output"},  # output formats, rule docs
    {"migration"},  # repairs turned from runtime failures into edits
    {"engine", "__init__"},  # one source: parse, analyse, run the rules, apply the fixes
    {"sources"},  # reading and writing the user's files: discovery, ignore rules, config, positions
    {"rules"},  # the rules: queries over the facts
    {"distributed"},  # the DDP migration
    {"rewrite"},  # fixes as edits, and applying them
    {"analysis"},  # the one walk and its facts
], lazy_counts=False, top_level=("__init__", "__main__", "cli", "engine"))

RUNTIME = Half(ROOT / "runtime", "cpu2gpu.runtime", [
    {"cli", "__main__"},  # the interface: verify and migrate, and the child's entry point
    {"report"},  # text, HTML, JSON, cap, DDP and migrate reports, the progress view
    {"judge"},  # starting runs, comparing them, DDP, migrate's rounds
    {"child"},  # the instrumented run of the user's script
    {"speed"},  # verify --speed: what keeps the GPU idle, counted per step, and the estimate for a named GPU
    {"standins"},  # stand-ins for data and packages (--synthetic-data)
    {"steps"},  # telling, capping and counting training steps
    {"tracing"},  # the user's code as it runs: its files, its lines, its progress
    {"causes"},  # from an exception or an event to a cause and a rule
    {"sandbox"},  # what the run may write, and that nothing of it lives on
    {"device"},  # the simulated CUDA and Apple devices
    {"records", "__init__"},  # the typed records every room reads
], lazy_counts=True, top_level=("__init__", "__main__", "cli", "records"))

HALVES = {"cpu2gpu": STATIC, "runtime": RUNTIME}


def _is_module(half: Half, dotted: str) -> bool:
    path = half.folder.joinpath(*dotted.split(".")[len(half.dotted.split(".")):])
    return path.with_suffix(".py").exists() or path.is_dir()


def _for_the_type_checker(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _statements(tree: ast.Module, lazy: bool, type_checking: bool = False):
    """The import statements to count: the module's top level (not under its ``if``s), or every one
    (not under ``if TYPE_CHECKING:``, which is for the type checker only). ``type_checking``: those under
    ``if TYPE_CHECKING:`` count too."""
    if not lazy:
        for node in tree.body:
            if not isinstance(node, ast.If):
                yield node
            elif type_checking and _for_the_type_checker(node):
                yield from node.body
        return
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if not type_checking and _for_the_type_checker(node):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _imports(half: Half, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the same half it imports (``type_checking``: for the type checker too)."""
    graph: dict[str, set[str]] = {}
    for path in half.folder.rglob("*.py"):
        parts = (*half.dotted.split("."), *path.relative_to(half.folder).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        package = module if is_package else module.rsplit(".", 1)[0]
        found = graph.setdefault(module, set())
        for node in _statements(ast.parse(path.read_text()), half.lazy_counts, type_checking):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                if not target.startswith(half.dotted):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if _is_module(half, sub) else target)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith(half.dotted))
    if half is STATIC:  # the runtime is the other half, not a part of this one
        graph = {m: {t for t in ts if not t.startswith(RUNTIME.dotted)} for m, ts in graph.items()}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle, as the modules around it, or [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1 and target != module and not module.startswith(target + "."):
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return []


@pytest.mark.parametrize("name", HALVES)
def test_no_module_imports_itself_round_a_circle(name):
    assert _cycle(_imports(HALVES[name])) == []


@pytest.mark.parametrize("name", HALVES)
def test_no_cycle_either_through_the_imports_for_the_type_checker(name):
    """A cycle hidden under ``if TYPE_CHECKING:`` still makes the reader follow it round: the types that
    modules share live in a module they all import (e.g. ``analysis.facts`` holds both ``Value`` and
    ``Scope``, which refer to each other)."""
    assert _cycle(_imports(HALVES[name], type_checking=True)) == []


@pytest.mark.parametrize("name", HALVES)
def test_the_layers_import_one_way_from_the_interface_down(name):
    half = HALVES[name]
    rank = {unit: i for i, layer in enumerate(half.layers) for unit in layer}
    wrong = []
    for module, targets in sorted(_imports(half).items()):
        for target in sorted(targets):
            if target != half.dotted and rank[half.unit(target)] < rank[half.unit(module)]:
                wrong.append(f"{module} imports {target}, a layer above it")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name,unit", sorted({(name, half.unit(m)) for name, half in HALVES.items()
                                              for m in _imports(half)}))
def test_every_part_of_the_package_has_its_layer(name, unit):
    assert any(unit in layer for layer in HALVES[name].layers), f"{name}: {unit} is in no layer"


@pytest.mark.parametrize("name", HALVES)
def test_the_top_level_holds_only_the_entry_points(name):
    half = HALVES[name]
    top = sorted(p.stem for p in half.folder.glob("*.py"))
    assert set(top) <= set(half.top_level), top


def test_a_room_of_the_runtime_is_a_package_of_at_most_twelve_modules():
    for room in (p for p in RUNTIME.folder.iterdir() if p.is_dir() and p.name != "__pycache__"):
        modules = [p for p in room.glob("*.py") if p.name != "__init__.py"]
        assert (room / "__init__.py").exists(), f"runtime/{room.name} has no __init__.py"
        assert len(modules) <= 12, f"runtime/{room.name} holds {len(modules)} modules"


def _layout_folders() -> dict[str, set[str]]:
    """The README's Layout block: for each top folder it names, the subfolders it names under it."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    named: dict[str, set[str]] = {}
    top = None
    for line in block.splitlines():
        word = line.split(" ", 1)[0] if not line.startswith(" ") else None
        if word and word.endswith("/"):
            top = word.rstrip("/")
            named[top] = set()
        elif top and line.startswith("  ") and not line.startswith("   ") and line.split()[0].endswith("/"):
            named[top].add(line.split()[0].rstrip("/"))
    return named


@pytest.mark.parametrize("top", ["cpu2gpu", "runtime", "fixtures"])
def test_the_readmes_layout_names_every_folder_and_only_those(top):
    named = _layout_folders()[top]
    there = {p.name for p in (ROOT / top).iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert named == there, f"README's Layout for {top}/: missing {sorted(there - named)}, gone {sorted(named - there)}"
