"""Check and rewrite one source text: parse, analyze, run the rules, apply the fixes."""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Sequence, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .analysis import analyze
from .facts import Facts
from .fixes import Fix, apply_edits, plan_device_setup
from .rules import ALL_RULES, Hit, Rule, RuleContext

Source = Union[str, bytes]

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)


@dataclass
class Finding:
    """One problem, with 1-based lines and columns (columns in characters, ends exclusive)."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    message: str
    fix_available: bool
    cell: Optional[int] = None

    def as_dict(self) -> dict:
        data = asdict(self)
        if self.cell is None:
            del data["cell"]
        return data


class SourceError(Exception):
    """A file that cannot be analysed (syntax error, undecodable bytes)."""

    def __init__(self, message: str, line: Optional[int] = None, column: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


def select_rules(select: Sequence[str] = (), ignore: Sequence[str] = (), extend_select: Sequence[str] = ()) -> list[Rule]:
    """Rules by code or prefix, as ruff does: ``CG1`` selects every CG1xx rule."""

    def matches(code: str, patterns: Iterable[str]) -> bool:
        return any(code.startswith(p.strip().upper()) for p in patterns if p.strip())

    chosen = []
    for rule in ALL_RULES:
        if select:
            wanted = matches(rule.code, select)
        else:
            wanted = rule.default_enabled
        wanted = wanted or matches(rule.code, extend_select)
        if wanted and not matches(rule.code, ignore):
            chosen.append(rule())
    return chosen


def parse(source: Source) -> cst.Module:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as error:
        # Python's own parser names the place and the cause more precisely than libcst's.
        try:
            ast.parse(source)
        except SyntaxError as python_error:
            raise SourceError(f"syntax error: {python_error.msg}", python_error.lineno,
                              python_error.offset) from None
        except (ValueError, UnicodeDecodeError):
            pass
        raise SourceError(f"syntax error: {error.message}", error.raw_line, error.raw_column + 1) from None
    except (UnicodeDecodeError, LookupError) as error:
        raise SourceError(f"cannot decode the file: {error}") from None


@dataclass
class Analysis:
    module: cst.Module
    facts: Facts
    hits: list[Hit]
    context: RuleContext


def analyze_module(module: cst.Module, rules: Sequence[Rule], device_expression: Optional[str] = None) -> Analysis:
    facts = analyze(module)
    setup = plan_device_setup(module, facts.torch_alias, facts.names_in_use, device_expression)
    context = RuleContext(facts, setup)
    hits: list[Hit] = []
    for rule in rules:
        hits.extend(rule.check(context))
    return Analysis(module, facts, hits, context)


def _suppressed(line_text: str, code: str) -> bool:
    match = _NOQA.search(line_text)
    if match is None:
        return False
    codes = match.group("codes")
    return codes is None or code in {c.upper() for c in re.split(r"[\s,]+", codes)}


def locate(analysis: Analysis, path: str) -> list[tuple[Finding, Hit]]:
    """Positions for the hits (computed only for files that have some), minus ``# noqa`` lines."""
    if not analysis.hits:
        return []
    positions = MetadataWrapper(analysis.module, unsafe_skip_copy=True).resolve(PositionProvider)
    lines = analysis.module.code.splitlines()
    located = []
    for hit in analysis.hits:
        where = positions[hit.node]
        text = lines[where.start.line - 1] if where.start.line - 1 < len(lines) else ""
        if "noqa" in text and _suppressed(text, hit.code):
            continue
        finding = Finding(
            path=path,
            line=where.start.line,
            column=where.start.column + 1,
            end_line=where.end.line,
            end_column=where.end.column + 1,
            code=hit.code,
            name=hit.name,
            message=hit.message,
            fix_available=hit.fix is not None,
        )
        located.append((finding, hit))
    located.sort(key=lambda pair: (pair[0].line, pair[0].column, pair[0].code))
    return located


def check_module(module: cst.Module, path: str, rules: Sequence[Rule]) -> list[Finding]:
    return [finding for finding, _ in locate(analyze_module(module, rules), path)]


def fix_module(module: cst.Module, path: str, rules: Sequence[Rule], unsafe_fixes: bool = False,
               device_expression: Optional[str] = None) -> cst.Module:
    """Apply every available fix at once; the result is parsed again before it is returned."""
    analysis = analyze_module(module, rules, device_expression)
    hits = analysis.hits
    if any("noqa" in line for line in module.code.splitlines()):
        hits = [hit for _, hit in locate(analysis, path)]
    fixes: list[Fix] = []
    for hit in hits:
        if hit.fix is not None and (hit.fix.safe or unsafe_fixes) and all(hit.fix is not f for f in fixes):
            fixes.append(hit.fix)
    if not fixes:
        return module
    edits = [edit for fix in fixes for edit in fix.edits]
    if any(fix.needs_device_setup for fix in fixes):
        edits.extend(analysis.context.setup.setup_edits(module))
    fixed = apply_edits(module, edits)
    try:
        return cst.parse_module(fixed.bytes if isinstance(fixed.code, str) else fixed.code)
    except cst.ParserSyntaxError as error:  # a bug in a fix: never hand out code that does not parse
        raise SourceError(f"internal error: the rewrite does not parse ({error.message}); file left unchanged")


def check_source(code: Source, path: Optional[str] = None, select: Sequence[str] = (),
                 ignore: Sequence[str] = ()) -> list[Finding]:
    """The findings for one source text. Raises ``SourceError`` when it cannot be parsed."""
    return check_module(parse(code), path or "<string>", select_rules(select, ignore))


def rewrite_source(code: Source, path: Optional[str] = None, select: Sequence[str] = (),
                   ignore: Sequence[str] = (), unsafe_fixes: bool = False,
                   device_expression: Optional[str] = None) -> str:
    """The source with every fix applied (safe ones only unless ``unsafe_fixes``)."""
    module = fix_module(parse(code), path or "<string>", select_rules(select, ignore), unsafe_fixes,
                        device_expression)
    return module.code
