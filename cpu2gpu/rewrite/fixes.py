"""Edits that fixes are made of, and the one transform that applies them all.

A fix never prints code: it names the original nodes to change and how, so that
every byte it does not touch (comments, blank lines, quotes) stays as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union, cast

import libcst as cst

# a statement of a module's or a block's body: both kinds carry leading_lines (BaseStatement does not say so)
Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]

# Comment lines that mark a place in the code rather than annotate the statement below them (a
# notebook's cell starts and its IPython lines): an edit that moves a statement leaves them where
# they are, and a section mark (a cell start) ends the import block that the device setup follows.
PLACE_MARK = "# <cpu2gpu "
SECTION_MARK = PLACE_MARK + "cell "


@dataclass(eq=False)
class Replace:
    """Rebuild ``node`` (as already updated by inner edits) with ``build``."""

    node: cst.CSTNode
    build: Callable[[cst.CSTNode], cst.CSTNode]


def replaced_by(node: cst.CSTNode, new: cst.CSTNode) -> Replace:
    """``node`` becomes ``new``, a node built ahead (edits inside ``node`` are not applied)."""
    return Replace(node, lambda _updated: new)


@dataclass(eq=False)
class InsertAfter:
    """A new statement right after ``stmt`` (a statement of a module or an indented block)."""

    stmt: cst.CSTNode
    code: Union[str, cst.BaseStatement]
    blank_line_before: bool = False


@dataclass(eq=False)
class Remove:
    """Take a statement out (it is inserted elsewhere by another edit). The place marks among its
    leading lines, and the lines above them, stay where they were."""

    stmt: cst.CSTNode


@dataclass(eq=False)
class InsertAtLoopStart:
    """A new first statement in the body of ``loop``."""

    loop: cst.For
    code: str


Edit = Union[Replace, InsertAfter, InsertAtLoopStart, Remove]


@dataclass(eq=False)
class Fix:
    edits: list[Edit]
    safe: bool = True
    needs_device_setup: bool = False
    description: str = ""


# -- expression builders --------------------------------------------------------------

_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.List, cst.Tuple, cst.Dict)


def _as_receiver(expr: cst.BaseExpression) -> cst.BaseExpression:
    """Parenthesize what would bind looser than ``.attr`` (``a + b``, ``x if c else y``)."""
    if isinstance(expr, _ATOMS) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def method_call(receiver: cst.BaseExpression, method: str, *args: cst.BaseExpression) -> cst.Call:
    return cst.Call(
        func=cst.Attribute(value=_as_receiver(receiver), attr=cst.Name(method)),
        args=[cst.Arg(a) for a in args],
    )


def chain_to(expr: cst.BaseExpression, device: str) -> cst.Call:
    """``expr.to(device)``, keeping the whitespace and parentheses around ``expr`` outside."""
    # Parentheses that wrap the whole expression stay outside the new call.
    inner = expr.with_changes(lpar=[], rpar=[]) if isinstance(expr, _ATOMS) else expr
    call = method_call(inner, "to", cst.parse_expression(device))
    return call.with_changes(lpar=expr.lpar, rpar=expr.rpar) if isinstance(expr, _ATOMS) else call


def add_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """Append ``name=value`` to a call, following a trailing comma layout if it has one."""
    new_arg = cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new_arg])
    last = args[-1]
    if not isinstance(last.comma, cst.Comma) and isinstance(last.whitespace_after_arg, cst.ParenthesizedWhitespace):
        # f(\n    a  # note\n) -> f(\n    a, name=value  # note\n): the comment and the line break stay last.
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
                                     whitespace_after_arg=cst.SimpleWhitespace(""))
        args.append(new_arg.with_changes(whitespace_after_arg=last.whitespace_after_arg))
        return call.with_changes(args=args)
    if isinstance(last.comma, cst.Comma):
        # f(\n    a,\n) -> f(\n    a,\n    name=value,\n): reuse the spacing between arguments.
        if len(args) > 1 and isinstance(args[-2].comma, cst.Comma):
            between = args[-2].comma.whitespace_after
        else:
            between = call.whitespace_before_args
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=between))
        new_arg = new_arg.with_changes(comma=last.comma)
    elif last.star:  # f(*a) / f(**kw): a keyword after ** is still valid, after * too
        pass
    args.append(new_arg)
    return call.with_changes(args=args)


# -- applying -------------------------------------------------------------------------


class _ApplyEdits(cst.CSTTransformer):
    def __init__(self, edits: Sequence[Edit], config: cst.PartialParserConfig) -> None:
        super().__init__()
        self.config = config
        self.replace: dict[int, list[Replace]] = {}
        self.after: dict[int, list[InsertAfter]] = {}
        self.loop_start: dict[int, list[InsertAtLoopStart]] = {}
        self.remove: set[int] = set()
        self.inserting: Optional[int] = None
        for edit in edits:
            if isinstance(edit, Remove):
                self.remove.add(id(edit.stmt))
            elif isinstance(edit, Replace):
                self.replace.setdefault(id(edit.node), []).append(edit)
            elif isinstance(edit, InsertAfter):
                bucket = self.after.setdefault(id(edit.stmt), [])
                if all(e.code != edit.code for e in bucket):
                    bucket.append(edit)
            else:
                starts = self.loop_start.setdefault(id(edit.loop), [])
                if all(e.code != edit.code for e in starts):
                    starts.append(edit)

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        updated = super().on_leave(original_node, updated_node)
        if id(original_node) in self.remove and id(original_node) != self.inserting:
            return cst.RemoveFromParent()
        for edit in self.replace.get(id(original_node), ()):
            updated = edit.build(updated)
        return updated

    def _statement(self, code, blank_line_before: bool = False) -> cst.BaseStatement:
        if isinstance(code, cst.CSTNode):
            # A statement moved from elsewhere: the edits inside it still apply.
            self.inserting = id(code)
            try:
                return cast(cst.BaseStatement, code.visit(self))
            finally:
                self.inserting = None
        stmt = cst.parse_statement(code, config=self.config)
        if blank_line_before:
            stmt = stmt.with_changes(leading_lines=[cst.EmptyLine()])
        return stmt

    def _with_inserts(self, original_node: Union[cst.Module, cst.IndentedBlock],
                      updated_node: Union[cst.Module, cst.IndentedBlock]):
        body: list = []
        kept = iter(updated_node.body)
        staying: list[cst.EmptyLine] = []  # lines of removed statements that keep their place
        for original in cast(Sequence[Statement], original_node.body):
            if id(original) in self.remove:
                staying.extend(original.leading_lines[:marked_lines(original.leading_lines)])
                continue
            stmt = cast(Statement, next(kept))
            if staying:
                stmt = stmt.with_changes(leading_lines=[*staying, *stmt.leading_lines])
                staying = []
            body.append(stmt)
            for edit in self.after.get(id(original), ()):
                body.append(self._statement(edit.code, edit.blank_line_before))
        footer = [*staying, *updated_node.footer]
        return updated_node.with_changes(body=body, footer=footer)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not any(id(s) in self.after or id(s) in self.remove for s in original_node.body):
            return updated_node
        return self._with_inserts(original_node, updated_node)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        if not any(id(s) in self.after or id(s) in self.remove for s in original_node.body):
            return updated_node
        return self._with_inserts(original_node, updated_node)

    def leave_For(self, original_node: cst.For, updated_node: cst.For):
        inserts = self.loop_start.get(id(original_node))
        if not inserts:
            return updated_node
        new = [self._statement(edit.code) for edit in inserts]
        block = updated_node.body
        if isinstance(block, cst.SimpleStatementSuite):
            # for x in loader: step(x) -> an indented block, so the move can go first.
            line = cst.SimpleStatementLine(body=block.body, trailing_whitespace=block.trailing_whitespace)
            return updated_node.with_changes(body=cst.IndentedBlock(body=[*new, line]))
        return updated_node.with_changes(body=block.with_changes(body=[*new, *block.body]))


def marked_lines(lines: Sequence[cst.EmptyLine]) -> int:
    """How many of a statement's leading lines belong to its place, not to it: up to its last place mark."""
    count = 0
    for index, line in enumerate(lines):
        if line.comment is not None and line.comment.value.startswith(PLACE_MARK):
            count = index + 1
    return count


def apply_edits(module: cst.Module, edits: Sequence[Edit]) -> cst.Module:
    if not edits:
        return module
    return module.visit(_ApplyEdits(edits, module.config_for_parsing))


# -- the device setup -----------------------------------------------------------------


@dataclass
class GpuFlag:
    """A module-level ``use_cuda = torch.cuda.is_available() and ...``: the script's own choice of the GPU."""

    name: str
    stmt: cst.CSTNode
    expression: str  # the device that follows it


@dataclass
class DeviceSetup:
    """Where the script's device comes from: a variable it has, or one the rewrite adds."""

    name: str
    exists: bool
    torch_name: str = "torch"
    needs_import: bool = False
    anchor: Optional[cst.CSTNode] = None  # the imports of torch, to insert after; None: top of the file
    # The leading imports (None: the top): where the setup goes, with an import of torch, when torch is
    # imported only after the first statement that needs the device.
    fallback: Optional[cst.CSTNode] = None
    hoist: Optional[Statement] = None  # the script's own device statement, moved up to the anchor
    expression: Optional[str] = None  # what a device fixed to the CPU becomes (CG205); None: the default
    configured: Optional[str] = None  # [tool.cpu2gpu] device-expression, instead of the default
    flag: Optional[GpuFlag] = None  # the added device follows it, if it comes before every use

    def can_hoist(self, stmt: cst.CSTNode, name: str) -> bool:
        """A device statement that reads nothing but torch can move up to the imports."""
        if self.anchor is None:
            return False
        allowed = {self.torch_name, name, "True", "False", "None", "print"}
        return _free_names(stmt) <= allowed

    def setup_edits(self, module: cst.Module, uses: Sequence[Edit] = ()) -> list[Edit]:
        """The device added (or the script's own moved up) before ``uses``, the edits that read it."""
        body = list(module.body)
        # The leading imports come before any use; a flag or a later import of torch may not.
        late = self.flag is not None or self.anchor is not self.fallback
        first_use = _first_use(body, uses) if late else len(body)
        if self.hoist is None and self.flag is not None and _index(body, self.flag.stmt) < first_use:
            # Right after the flag, no blank line between: the two lines make one choice.
            return [InsertAfter(self.flag.stmt, f"{self.name} = {self.flag.expression}")]
        anchor, needs_import = self.anchor, self.needs_import
        # torch is imported only after a use: import it again in the leading imports (a moved statement
        # needs a statement to follow, so the script's own device is not moved to the top of the file).
        if anchor is not self.fallback and _index(body, anchor) >= first_use \
                and (self.hoist is None or self.fallback is not None):
            anchor, needs_import = self.fallback, True
        lines: list = [self._import_line()] if needs_import else []
        edits: list[Edit] = []
        if self.hoist is not None:
            edits.append(Remove(self.hoist))
            lines.append(self.hoist.with_changes(leading_lines=[cst.EmptyLine(), *_comments_of(self.hoist)]))
        else:
            default = f'{self.torch_name}.device("cuda" if {self.torch_name}.cuda.is_available() else "cpu")'
            lines.append(f"{self.name} = {self.configured or default}")
        if anchor is None:
            return [*edits, Replace(module, lambda m: _prepend(cast(cst.Module, m), lines))]
        for index, line in enumerate(lines):
            is_device_line = index == len(lines) - 1
            edits.append(InsertAfter(anchor, line, blank_line_before=is_device_line and isinstance(line, str)))
        return edits

    def _import_line(self) -> str:
        return "import torch" if self.torch_name == "torch" else f"import torch as {self.torch_name}"


def _comments_of(stmt: Statement) -> list[cst.EmptyLine]:
    """The comments above a statement that go with it when it moves (those below its place marks)."""
    lines = stmt.leading_lines
    return [line for line in lines[marked_lines(lines):] if line.comment is not None]


def _prepend(module: cst.Module, lines: list[str]) -> cst.Module:
    statements = [cst.parse_statement(line, config=module.config_for_parsing) for line in lines]
    body = list(module.body)
    if body:
        # The file's header comments stay on top.
        first = body[0]
        statements[0] = statements[0].with_changes(leading_lines=first.leading_lines)
        body[0] = first.with_changes(leading_lines=[cst.EmptyLine()])
    return module.with_changes(body=[*statements, *body])


def _free_names(node: cst.CSTNode) -> set[str]:
    """The names an expression or statement reads or binds (attribute names excluded)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            names.add(current.value)
        elif isinstance(current, cst.Attribute):
            stack.append(current.value)
        elif isinstance(current, cst.Arg):
            stack.append(current.value)  # not the keyword
        else:
            stack.extend(current.children)
    return names


def _index(body: Sequence[cst.CSTNode], stmt: Optional[cst.CSTNode]) -> int:
    # None (no anchor: the top of the file) is found nowhere: past the end
    return next((index for index, s in enumerate(body) if s is stmt), len(body))


def _edit_node(edit: Edit) -> cst.CSTNode:
    if isinstance(edit, Replace):
        return edit.node
    if isinstance(edit, InsertAtLoopStart):
        return edit.loop
    return edit.stmt


def _first_use(body: Sequence[cst.CSTNode], uses: Sequence[Edit]) -> int:
    """The index of the first module-level statement that runs an edit of ``uses``: one that holds the
    edit, or names a function or class defined above it whose code holds one (it runs when called)."""
    targets = {id(_edit_node(edit)) for edit in uses}
    if not targets:
        return len(body)
    users: set[str] = set()
    for index, stmt in enumerate(body):
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            if _touches(stmt, targets, users, into_functions=True):
                users.add(stmt.name.value)
            # A class body runs where it stands; its methods when they are called.
            if not isinstance(stmt, cst.ClassDef) or not _touches(stmt, targets, set(), into_functions=False):
                continue
            return index
        if _touches(stmt, targets, users, into_functions=False):
            return index
    return len(body)


def _touches(stmt: cst.CSTNode, targets: set[int], names: set[str], into_functions: bool) -> bool:
    """Whether ``stmt`` holds one of the ``targets`` nodes or mentions one of ``names``."""
    stack = [stmt]
    while stack:
        current = stack.pop()
        if id(current) in targets or (isinstance(current, cst.Name) and current.value in names):
            return True
        if isinstance(current, cst.FunctionDef) and current is not stmt and not into_functions:
            continue
        stack.extend(current.children)
    return False


def _is_import_line(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _starts_section(stmt: Statement) -> bool:
    return any(line.comment is not None and line.comment.value.startswith(SECTION_MARK)
               for line in stmt.leading_lines)


def _end_of_imports(body: Sequence[Statement], index: int) -> int:
    """The last of the import lines that follow ``body[index]`` without a section mark between them."""
    while index + 1 < len(body) and _is_import_line(body[index + 1]) and not _starts_section(body[index + 1]):
        index += 1
    return index


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _imports_torch(stmt: cst.CSTNode, torch_name: str, any_form: bool = False) -> bool:
    """``import torch`` (under ``torch_name``); with ``any_form``, any import from torch too."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                local = alias.evaluated_alias or alias.evaluated_name.split(".", 1)[0]
                if local == torch_name or (any_form and alias.evaluated_name.split(".", 1)[0] == "torch"):
                    return True
        elif any_form and isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
            if cst.Module([]).code_for_node(small.module).split(".", 1)[0] == "torch":
                return True
    return False


# The device setup of the `accelerator` device style (PyTorch 2.6+): CUDA, ROCm, MPS, XPU... or the CPU.
ACCELERATOR_DEVICE = ('torch.accelerator.current_accelerator() if torch.accelerator.is_available() '
                      'else torch.device("cpu")')


def uses_accelerator_style(setup: DeviceSetup) -> bool:
    """Whether the device setup the rewrite adds is the ``accelerator`` style's."""
    return setup.configured is not None and f"{setup.torch_name}.accelerator." in setup.configured


def plan_device_setup(module: cst.Module, torch_alias: Optional[str], names_in_use: set[str],
                      expression: Optional[str] = None) -> DeviceSetup:
    """Where to put ``device = torch.device(...)`` and under which names.

    It goes after the imports of the cell (the section) that imports torch, so that a notebook run
    from the top has it before any cell needs it; or right after the script's own GPU flag."""
    name = "device" if "device" not in names_in_use else "torch_device"
    torch_name = torch_alias or "torch"
    body = list(module.body)
    start = 1 if body and _is_docstring(body[0]) else 0
    leading = _end_of_imports(body, start) if start < len(body) and _is_import_line(body[start]) else start - 1
    fallback = body[leading] if leading >= 0 else None
    needs_import = torch_alias is None
    if expression == ACCELERATOR_DEVICE and torch_name != "torch":  # import torch as th
        expression = re.sub(r"\btorch\.", f"{torch_name}.", expression)
    # Without `import torch` (only `from torch import nn`), the cell of the first import from torch.
    torch_import = next((index for index in range(start, len(body))
                         if _imports_torch(body[index], torch_name, any_form=needs_import)), None)
    anchor = body[_end_of_imports(body, torch_import)] if torch_import is not None else fallback
    setup = DeviceSetup(name=name, exists=False, torch_name=torch_name, needs_import=needs_import, anchor=anchor,
                        fallback=fallback, expression=expression, configured=expression)
    if expression is None and not needs_import:
        setup.flag = _gpu_flag(body, torch_name)
        if setup.flag is not None and not _torch_code_before(body, setup.flag.stmt, torch_name):
            # A device fixed to the CPU (CG205) comes after the flag: it can follow the flag too.
            setup.expression = setup.flag.expression
    return setup


# Names that say a flag is about the GPU: use_cuda, args.cuda, is_cuda, train_on_gpu, use_gpu, gpu_available...
_GPU_WORDS = ("cuda", "gpu")


def _gpu_flag(body: Sequence[cst.CSTNode], torch_name: str) -> Optional[GpuFlag]:
    """The first module-level ``flag = torch.cuda.is_available() [and ...]`` whose name is about the GPU."""
    for stmt in body:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1):
            continue
        target = stmt.body[0].targets[0].target
        word = target.value if isinstance(target, cst.Name) else \
            target.attr.value if isinstance(target, cst.Attribute) else ""
        if any(w in word.lower() for w in _GPU_WORDS) and _chooses_gpu(stmt.body[0].value, torch_name):
            flag = cst.Module([]).code_for_node(target)
            return GpuFlag(flag, stmt, f'{torch_name}.device("cuda" if {flag} else "cpu")')
    return None


def _chooses_gpu(value: cst.BaseExpression, torch_name: str) -> bool:
    """Whether ``value`` says "use CUDA": ``torch.cuda.is_available()`` alone or joined by ``and``/``or``
    (``not args.no_cuda and torch.cuda.is_available()``). Under ``not`` it says the opposite, and
    ``"cuda" if torch.cuda.is_available() else "cpu"`` is a device, not a flag."""
    if isinstance(value, cst.BooleanOperation):
        return _chooses_gpu(value.left, torch_name) or _chooses_gpu(value.right, torch_name)
    return isinstance(value, cst.Call) and not value.args \
        and cst.Module([]).code_for_node(value.func) == f"{torch_name}.cuda.is_available"


def _torch_code_before(body: Sequence[cst.CSTNode], stmt: cst.CSTNode, torch_name: str) -> bool:
    """Whether module-level code above ``stmt`` (imports, functions and classes aside) calls into torch."""
    for current in body[:_index(body, stmt)]:
        if isinstance(current, (cst.FunctionDef, cst.ClassDef)) or _is_import_line(current):
            continue
        code = cst.Module([]).code_for_node(current)
        if code.count(f"{torch_name}.") - code.count(f"{torch_name}.manual_seed") > 0:
            return True
    return False
