"""The package's layout: its layers import one way, from the interface down, and no modules import
each other in a circle (an import cycle makes a module's import order matter and hides layering
mistakes). Read from the source with ``ast``: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cpu2gpu"

# The layers of cpu2gpu/, top first: a module may import from its own layer and the layers below.
LAYERS = [
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
]


def _unit(module: str) -> str:
    """The top-level part of cpu2gpu a module belongs to (a subpackage, or a module of the top)."""
    return module.split(".")[1] if "." in module else "__init__"


def _imports() -> dict[str, set[str]]:
    """Module -> the cpu2gpu modules it imports at its top level (not the imports inside functions,
    which run later and are how a layer reaches up on purpose, e.g. the lazy CLI)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        package = module if is_package else module.rsplit(".", 1)[0]
        found = graph.setdefault(module, set())
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks are for the type checker only
                continue
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                if not target.startswith("cpu2gpu"):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    is_module = (PACKAGE.parent / Path(*sub.split("."))).with_suffix(".py").exists() \
                        or (PACKAGE.parent / Path(*sub.split("."))).is_dir()
                    found.add(sub if is_module else target)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("cpu2gpu"))
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


def test_no_module_imports_itself_round_a_circle():
    assert _cycle(_imports()) == []


def test_the_layers_import_one_way_from_the_interface_down():
    rank = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    wrong = []
    for module, targets in sorted(_imports().items()):
        for target in sorted(targets):
            if target != "cpu2gpu" and rank[_unit(target)] < rank[_unit(module)]:
                wrong.append(f"{module} imports {target}, a layer above it")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("unit", sorted({_unit(m) for m in _imports()}))
def test_every_part_of_the_package_has_its_layer(unit):
    assert any(unit in layer for layer in LAYERS), f"cpu2gpu.{unit} is in no layer of LAYERS"


def test_the_top_level_holds_only_the_entry_points():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert top == ["__init__", "__main__", "cli", "engine"], top
