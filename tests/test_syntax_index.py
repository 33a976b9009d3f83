"""The syntax index (one walk per file for the rules that read code) and the guard on full walks.

``check`` must stay near the cost of the parse: the analysis reads the statements once, and the rules
that read the code itself query one shared index (``cpu2gpu.analysis.syntaxindex``). The guard counts, for each
file, the walks that start at its ``Module`` node (a libcst visitor, ``.children``, ``matchers.findall``,
``MetadataWrapper``, the index's walk, ``classdefs.walk``) and the generations of its whole code,
during ``check`` and during the language server's analysis of a keystroke: a count, not a time, so it
cannot flake. A rule that adds a walk of its own over the file fails it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst
import pytest

from cpu2gpu.analysis import classdefs, syntaxindex
from cpu2gpu.sources.config import Settings
from cpu2gpu.engine import check_module, parse, select_rules
from cpu2gpu.rewrite.fixes import ACCELERATOR_DEVICE
from cpu2gpu.lsp import documents
from cpu2gpu.analysis.syntaxindex import SyntaxIndex, preorder

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p for p in (ROOT / "fixtures").rglob("*.py") if "__pycache__" not in p.parts)

# Every kind of statement and expression whose fields libcst visits in another order than it declares.
EVERY_SHAPE = '''
import torch
from torch import nn as N, accelerator
@decorator(1)
@other
class A(Base, metaclass=M):
    @staticmethod
    async def f(a, /, b: int = 1, *args, c=2, **kw) -> "T":
        async with open(x) as y, z:
            async for i in aiter(y):
                await g(i)
        with torch.no_grad():
            pass
        return [v async for v in w if v] if a else {k: v for k, v in kw.items()}
try:
    x = f(key=1, *a, **k)
except (ValueError, TypeError) as error:
    y = lambda p, q=3: p + q
else:
    z = (w := 5)
finally:
    del z
match command:
    case [x, y, *rest] if x > y:
        pass
    case {"k": v, **other}:
        pass
    case Point(x=0, y=b) | None:
        pass
    case str() as s:
        pass
t = f"{a!r:>{width}} {b=}"
s = x[1:2, ::3]
print(*args, sep="", **more)
global_value: int = 3
assert torch.cuda.is_available(), "needs a GPU"
'''
if sys.version_info >= (3, 11):
    EVERY_SHAPE += "try:\n    pass\nexcept* OSError as e:\n    pass\n"
if sys.version_info >= (3, 12):
    EVERY_SHAPE += "type Alias[T] = list[T]\ndef generic[T](x: T) -> T:\n    return x\nclass Box[T]:\n    pass\n"


class _Order(cst.CSTVisitor):
    """libcst's own visiting order and parents, over the nodes the index keeps."""

    def __init__(self) -> None:
        self.nodes: list[cst.CSTNode] = []
        self.parents: dict[int, cst.CSTNode] = {}
        self._stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if classdefs.is_searched_type(type(node)):
            self.nodes.append(node)
            if self._stack:
                self.parents[id(node)] = self._stack[-1]
        self._stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self._stack.pop()


@pytest.mark.parametrize("source", [EVERY_SHAPE, *(p.read_text(encoding="utf-8") for p in FIXTURES[::7])],
                         ids=["every-shape", *(str(p.relative_to(ROOT)) for p in FIXTURES[::7])])
def test_the_walk_is_libcsts_visiting_order(source: str) -> None:
    module = cst.parse_module(source)
    expected = _Order()
    module.visit(expected)
    index = SyntaxIndex(module)
    assert [id(n) for n in index.nodes] == [id(n) for n in expected.nodes]
    assert all(index.parent(node) is expected.parents.get(id(node)) for node in index.nodes)
    inner = next((n for n in index.nodes if type(n) in (cst.ClassDef, cst.FunctionDef, cst.For, cst.If)), module)
    assert [id(n) for n in preorder(inner)] == [id(n) for n in expected.nodes[expected.nodes.index(inner):]
                                                  if n is inner or any(a is inner for a in index.ancestors(n))]


def test_mentions_is_a_pre_filter_on_the_text() -> None:
    module = cst.parse_module("x = 1\n")
    assert not SyntaxIndex(module, "x = 1\n").mentions("float64", "double")
    assert SyntaxIndex(module, "x = 1.0  # double\n").mentions("float64", "double")
    assert SyntaxIndex(module).mentions("anything")  # text not at hand: it cannot prove anything


# -- the guard: full walks of a file's tree --------------------------------------------------


class _Walks:
    """Walks that start at the module under watch, and generations of its whole code."""

    def __init__(self) -> None:
        self.module: cst.Module | None = None
        self.walks: list[str] = []
        self.codegen = 0

    def start(self, module: cst.Module) -> None:
        self.module, self.walks, self.codegen = module, [], 0


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> _Walks:
    seen = _Walks()

    def counting(how: str, original):
        def wrapper(node, *args, **kwargs):
            if node is seen.module:
                seen.walks.append(how)
            return original(node, *args, **kwargs)
        return wrapper

    # libcst: visitors (Module.visit, MetadataWrapper.visit, matchers.findall/extract/replace) and .children
    # all go through the module's _visit_and_replace_children.
    monkeypatch.setattr(cst.Module, "_visit_and_replace_children",
                        counting("libcst visitor or .children", cst.Module._visit_and_replace_children))
    monkeypatch.setattr(syntaxindex, "_children", counting("syntax index walk", syntaxindex._children))
    monkeypatch.setattr(classdefs, "child_nodes", counting("classdefs.walk", classdefs.child_nodes))
    original_codegen = cst.Module._codegen_impl

    def codegen(node, *args, **kwargs):
        if node is seen.module:
            seen.codegen += 1
        return original_codegen(node, *args, **kwargs)

    monkeypatch.setattr(cst.Module, "_codegen_impl", codegen)
    return seen


# The rule sets a run may use: the default one; every rule but CG400 (selected by --distributed: the
# DDP migration's plan reads the file with walks of its own); every rule with the accelerator device style.
RULE_SETS = {
    "default": select_rules(),
    "all but CG400": select_rules(["CG"], ["CG400"]),
    "accelerator style": select_rules(["CG"], ["CG400"]),
}


@pytest.mark.parametrize("rule_set", sorted(RULE_SETS))
def test_check_walks_each_file_once_at_most(walks: _Walks, rule_set: str) -> None:
    rules = RULE_SETS[rule_set]
    device = ACCELERATOR_DEVICE if rule_set == "accelerator style" else None
    indexed = 0
    for path in FIXTURES:
        data = path.read_bytes()
        try:
            module = parse(data)
        except Exception:
            continue
        walks.start(module)
        findings = check_module(module, str(path), rules, device_expression=device)
        assert walks.walks in ([], ["syntax index walk"]), f"{path.relative_to(ROOT)}: {walks.walks}"
        # the whole code is generated only where positions fall back to PositionProvider (findings only)
        assert walks.codegen <= (1 if findings else 0), f"{path.relative_to(ROOT)}: {walks.codegen} code generations"
        indexed += bool(walks.walks)
    assert indexed  # (the guard watches something)


def test_a_file_without_findings_is_not_walked_for_the_rules(walks: _Walks) -> None:
    module = parse(b"import torch\nx = torch.ones(3)\nprint(x.sum())\n")
    walks.start(module)
    assert check_module(module, "x.py", select_rules()) == []
    assert walks.walks == [] and walks.codegen == 0  # the text proves that no rule that reads code can fire


def test_the_editor_walks_a_keystroke_once_at_most(walks: _Walks, monkeypatch: pytest.MonkeyPatch) -> None:
    """The language server's analysis of an edited document (documents.analyse, per keystroke)."""
    original_parse = documents.parse

    def watched(text):
        module = original_parse(text)
        walks.start(module)
        return module

    monkeypatch.setattr(documents, "parse", watched)
    settings = Settings()
    for path in FIXTURES:
        report = documents.analyse(str(path), [path.read_text(encoding="utf-8")], settings)
        if report.error is not None:
            continue
        assert walks.walks in ([], ["syntax index walk"]), f"{path.relative_to(ROOT)}: {walks.walks}"
        assert walks.codegen <= (1 if report.located else 0), f"{path.relative_to(ROOT)}: {walks.codegen}"
