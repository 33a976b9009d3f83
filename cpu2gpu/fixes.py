"""Edits that fixes are made of, and the one transform that applies them all.

A fix never prints code: it names the original nodes to change and how, so that
every byte it does not touch (comments, blank lines, quotes) stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import libcst as cst


@dataclass(eq=False)
class Replace:
    """Rebuild ``node`` (as already updated by inner edits) with ``build``."""

    node: cst.CSTNode
    build: Callable[[cst.CSTNode], cst.CSTNode]


@dataclass(eq=False)
class InsertAfter:
    """A new statement right after ``stmt`` (a statement of a module or an indented block)."""

    stmt: cst.CSTNode
    code: Union[str, cst.BaseStatement]
    blank_line_before: bool = False


@dataclass(eq=False)
class Remove:
    """Take a statement out (it is inserted elsewhere by another edit)."""

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
                bucket = self.loop_start.setdefault(id(edit.loop), [])
                if all(e.code != edit.code for e in bucket):
                    bucket.append(edit)

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
                return code.visit(self)
            finally:
                self.inserting = None
        stmt = cst.parse_statement(code, config=self.config)
        if blank_line_before:
            stmt = stmt.with_changes(leading_lines=[cst.EmptyLine()])
        return stmt

    def _with_inserts(self, originals: Sequence[cst.CSTNode], updated: Sequence[cst.CSTNode]) -> list:
        body: list = []
        kept = iter(updated)
        for original in originals:
            if id(original) in self.remove:
                continue
            body.append(next(kept))
            for edit in self.after.get(id(original), ()):
                body.append(self._statement(edit.code, edit.blank_line_before))
        return body

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not any(id(s) in self.after or id(s) in self.remove for s in original_node.body):
            return updated_node
        return updated_node.with_changes(body=self._with_inserts(original_node.body, updated_node.body))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock):
        if not any(id(s) in self.after or id(s) in self.remove for s in original_node.body):
            return updated_node
        return updated_node.with_changes(body=self._with_inserts(original_node.body, updated_node.body))

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


def apply_edits(module: cst.Module, edits: Sequence[Edit]) -> cst.Module:
    if not edits:
        return module
    return module.visit(_ApplyEdits(edits, module.config_for_parsing))


# -- the device setup -----------------------------------------------------------------


@dataclass
class DeviceSetup:
    """Where the script's device comes from: a variable it has, or one the rewrite adds."""

    name: str
    exists: bool
    torch_name: str = "torch"
    needs_import: bool = False
    anchor: Optional[cst.CSTNode] = None  # statement to insert after; None: top of the file
    hoist: Optional[cst.CSTNode] = None  # the script's own device statement, moved up to the anchor
    expression: Optional[str] = None  # [tool.cpu2gpu] device-expression, instead of the default
    blank_line: bool = True  # a blank line before the added device line (not when it follows a use_cuda flag)

    def can_hoist(self, stmt: cst.CSTNode, name: str) -> bool:
        """A device statement that reads nothing but torch can move up to the imports."""
        if self.anchor is None:
            return False
        allowed = {self.torch_name, name, "True", "False", "None", "print"}
        return _free_names(stmt) <= allowed

    def setup_edits(self, module: cst.Module) -> list[Edit]:
        if self.hoist is not None:
            moved = self.hoist.with_changes(
                leading_lines=[cst.EmptyLine(), *[l for l in self.hoist.leading_lines if l.comment is not None]])
            return [Remove(self.hoist), InsertAfter(self.anchor, moved)]
        default = f'{self.torch_name}.device("cuda" if {self.torch_name}.cuda.is_available() else "cpu")'
        code = f"{self.name} = {self.expression or default}"
        lines = ([f"import {self.torch_name}"] if self.needs_import else []) + [code]
        if self.anchor is None:
            return [Replace(module, lambda m, lines=lines: _prepend(m, lines))]
        edits: list[Edit] = []
        for index, line in enumerate(lines):
            is_device_line = index == len(lines) - 1
            edits.append(InsertAfter(self.anchor, line, blank_line_before=is_device_line and self.blank_line))
        return edits


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


def _is_import_line(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _imports_torch(stmt: cst.CSTNode, torch_name: str) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                local = alias.evaluated_alias or alias.evaluated_name.split(".", 1)[0]
                if local == torch_name:
                    return True
    return False


def plan_device_setup(module: cst.Module, torch_alias: Optional[str], names_in_use: set[str],
                      expression: Optional[str] = None) -> DeviceSetup:
    """Where to put ``device = torch.device(...)`` and under which names."""
    name = "device" if "device" not in names_in_use else "torch_device"
    torch_name = torch_alias or "torch"
    body = list(module.body)
    index = 0
    if body and _is_docstring(body[0]):
        index = 1
    anchor: Optional[cst.CSTNode] = body[0] if index else None
    while index < len(body) and _is_import_line(body[index]):
        anchor = body[index]
        index += 1
    needs_import = torch_alias is None
    if not needs_import and not any(_imports_torch(s, torch_name) for s in body[:index]):
        # torch is imported further down: the device line goes after the imports around it.
        for position in range(index, len(body)):
            if _imports_torch(body[position], torch_name):
                while position + 1 < len(body) and _is_import_line(body[position + 1]):
                    position += 1
                anchor = body[position]
                break
    setup = DeviceSetup(name=name, exists=False, torch_name=torch_name, needs_import=needs_import, anchor=anchor,
                        expression=expression)
    flag = None if expression is not None or needs_import else _cuda_flag(body[index:], torch_name)
    if flag is not None:
        # use_cuda = torch.cuda.is_available() and not args.no_cuda: the device follows the flag.
        flag_name, flag_stmt = flag
        setup.anchor, setup.blank_line = flag_stmt, False
        setup.expression = f'{torch_name}.device("cuda" if {flag_name} else "cpu")'
    return setup


def _cuda_flag(statements: Sequence[cst.CSTNode], torch_name: str) -> Optional[tuple[str, cst.CSTNode]]:
    """A module-level ``use_cuda = ... torch.cuda.is_available() ...`` that comes before any code
    that builds tensors or models, so a device line right after it is in time for all of them."""
    for stmt in statements:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        code = cst.Module([]).code_for_node(stmt)
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign) \
                and len(stmt.body[0].targets) == 1 and f"{torch_name}.cuda.is_available()" in code \
                and not isinstance(stmt.body[0].value, (cst.Call, cst.IfExp)):
            target = stmt.body[0].targets[0].target
            name = cst.Module([]).code_for_node(target)
            if isinstance(target, (cst.Name, cst.Attribute)) and "cuda" in name.lower():
                return name, stmt
        mentions = code.count(f"{torch_name}.") - code.count(f"{torch_name}.manual_seed")
        if mentions > 0:
            return None  # torch code before any flag: the device goes after the imports
    return None
