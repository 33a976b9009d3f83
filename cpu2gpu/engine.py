"""Check and rewrite one source text: parse, analyze, run the rules, apply the fixes."""

from __future__ import annotations

import ast
import io
import re
import sys
import threading
import tokenize
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator, Optional, Sequence, Union

import libcst as cst

from .analysis import analyze
from .analysis.facts import Facts
from .analysis.syntaxindex import forget_index
from .rewrite.fixes import Fix, apply_edits, plan_device_setup
from .sources.positions import node_positions
from .rules import ALL_RULES, Hit, Rule, RuleContext
from .analysis.seeds import NO_SEEDS, Seeds
from .sources.syntax import Refusal, brackets_within_limit, newer_syntax, python_lines, python_syntax_error, python_verdict

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
    # Notebooks only: the cell's 0-based index among all the notebook's cells (as nbformat and
    # editors count them), and the finding's place in the text of the .ipynb file itself.
    cell_index: Optional[int] = None
    file_line: Optional[int] = None
    file_column: Optional[int] = None
    file_end_line: Optional[int] = None
    file_end_column: Optional[int] = None

    def as_dict(self) -> dict:
        data = asdict(self)
        for key in NOTEBOOK_FIELDS:
            if data[key] is None:
                del data[key]
        return data


NOTEBOOK_FIELDS = ("cell", "cell_index", "file_line", "file_column", "file_end_line", "file_end_column")


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

    def names(code: str, patterns: Iterable[str]) -> bool:
        """A pattern that picks out this rule's family at least (CG3, CG30, CG301), not CG or ALL."""
        return any(len(p.strip()) >= 3 and code.startswith(p.strip().upper()) for p in patterns)

    chosen = []
    for rule in ALL_RULES:
        if select:
            wanted = matches(rule.code, select)
        else:
            wanted = rule.default_enabled
        wanted = wanted or matches(rule.code, extend_select)
        if wanted and not matches(rule.code, ignore):
            instance = rule()
            instance.selected_explicitly = names(rule.code, select) or names(rule.code, extend_select)
            chosen.append(instance)
    return chosen


# The sources of the last few parsed modules (libcst nodes take no weak references): ``locate``
# reads a file's lines for its noqa comments without generating its code again, which costs half a parse,
# and finds positions with Python's tree of the file (made by ``parse``) without parsing it again.
_RECENT_SOURCES: "OrderedDict[int, tuple[cst.Module, Source, Optional[ast.Module]]]" = OrderedDict()
_RECENT_LIMIT = 4


def _recent(module: cst.Module) -> Optional[tuple[cst.Module, Source, Optional[ast.Module]]]:
    entry = _RECENT_SOURCES.get(id(module))
    return entry if entry is not None and entry[0] is module else None


def source_text(module: cst.Module) -> str:
    text = known_text(module)
    return module.code if text is None else text


def known_text(module: cst.Module) -> Optional[str]:
    """The module's source if it was parsed (or remembered) here, else None: never generated again."""
    entry = _recent(module)
    if entry is None:
        return None
    source = entry[1]
    return source if isinstance(source, str) else source.decode(module.encoding)


def _remember(module: cst.Module, source: Source, tree: Optional[ast.Module] = None) -> None:
    _RECENT_SOURCES[id(module)] = (module, source, tree)
    while len(_RECENT_SOURCES) > _RECENT_LIMIT:
        _RECENT_SOURCES.popitem(last=False)


def forget(module: cst.Module) -> None:
    """Drop what is kept about a module whose file is done (its source, Python's tree of it, its syntax
    index): a run over many files frees each tree once its file is checked."""
    if _recent(module) is not None:
        del _RECENT_SOURCES[id(module)]
    forget_index(module)


def remember_source(module: cst.Module, source: Source) -> None:
    """Keep a module's source for ``locate`` (a module parsed elsewhere, by ``project``)."""
    _remember(module, source)


def _decoded(source: Source) -> str:
    """The text of the file, decoded as Python decodes it (coding line, BOM)."""
    if isinstance(source, str):
        return source
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        return source.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        raise SourceError(f"cannot decode the file: {error}") from None
    except SyntaxError as error:  # an unknown coding line
        raise SourceError(f"cannot decode the file: {error.msg}") from None


def parse(source: Source) -> cst.Module:
    """The file's libcst module, once Python's own parser has accepted it.

    Python judges first: libcst reads code that Python refuses (``b"é"``) and crashes on some of it
    (1,300 nested parentheses); a file nested deeper than ``syntax.MAX_NESTING`` is not analysed.
    Where Python refuses code in a syntax newer than its own (``match`` on 3.9), libcst judges.
    """
    if (b"\x00" in source) if isinstance(source, bytes) else ("\x00" in source):
        raise SourceError("binary file (it contains NUL bytes), not Python source")
    text = _decoded(source)
    tree, refusal = python_verdict(text)
    if refusal is not None:
        module = None if refusal.nesting else _newer_syntax_module(source, text, refusal)
        if module is None:
            raise SourceError(refusal.message, refusal.line, refusal.column)
        tree = None
    else:
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError as error:
            first = error.message.strip().splitlines()[0] if error.message.strip() else "parser error"
            raise SourceError(f"not analysed: valid Python that libcst {_libcst_version()} cannot parse "
                              f"({first})", error.raw_line, error.raw_column + 1) from None
        except (UnicodeDecodeError, LookupError) as error:
            raise SourceError(f"cannot decode the file: {error}") from None
        except SyntaxError as error:
            raise SourceError(f"cannot decode the file: {error.msg}") from None
    if "\x0c" in text:
        _refuse_lost_form_feeds(module, source, text)
    # Python's tree is kept for the positions of the findings: parsing it again then, with the analysis
    # alive, would raise the peak (its parse needs twice what the tree holds; bench_memory).
    _remember(module, source, tree)
    return module


def _newer_syntax_module(source: Source, text: str, refusal: Refusal) -> Optional[cst.Module]:
    """libcst's module of code that this Python refuses, if it is in a newer Python's syntax."""
    if not brackets_within_limit(text):  # libcst may crash on it: never hand it over
        return None
    try:
        module = cst.parse_module(source)
    except Exception:  # libcst refuses it as well: Python's message says more
        return None
    try:
        return module if newer_syntax(module, refusal) else None
    except RecursionError:
        return None


def _refuse_lost_form_feeds(module: cst.Module, source: Source, text: str) -> None:
    """libcst takes a form feed in an indentation for part of the indentation: it cannot give the file
    back byte for byte, nor write new code into it. Such a file is refused, naming the line."""
    exact = module.bytes == source if isinstance(source, bytes) else module.code == source
    if exact and "\x0c" not in module.default_indent:
        return
    line = next((number for number, body in enumerate(python_lines(text), 1)
                 if "\x0c" in body[:len(body) - len(body.lstrip(" \t\x0c"))] and body.strip(" \t\x0c")), None)
    raise SourceError("not analysed: a form feed in the indentation of a line (libcst cannot keep it; "
                      "indent with spaces or tabs only)", line, 1 if line is not None else None)


def _libcst_version() -> str:
    try:
        from importlib.metadata import version

        return version("libcst")
    except Exception:
        return ""


# A tree nested thousands deep (a string made of thousands of implicit concatenations, as in
# pydoc_data/topics.py) exhausts the default recursion limit in libcst's visitors and code
# generation; such a file is retried on a thread whose stack is big enough for a high limit.
_DEEP_STACK_BYTES = 512 * 1024 * 1024
_DEEP_RECURSION_LIMIT = 60_000


def run_with_deep_stack(func, *args):
    """``func(*args)``; on a RecursionError, again on a thread with a deep stack and a high recursion limit
    (SourceError when the tree is too deep even for that)."""
    try:
        return func(*args)
    except RecursionError:
        pass
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = func(*args)
        except BaseException as error:  # handed to the calling thread
            outcome["error"] = error

    old_limit = sys.getrecursionlimit()
    old_stack = threading.stack_size(_DEEP_STACK_BYTES)
    sys.setrecursionlimit(max(old_limit, _DEEP_RECURSION_LIMIT))
    try:
        worker = threading.Thread(target=run, name="cpu2gpu-deep-tree")
        worker.start()
        worker.join()
    finally:
        sys.setrecursionlimit(old_limit)
        threading.stack_size(old_stack)
    error = outcome.get("error")
    if isinstance(error, RecursionError):
        raise SourceError("the code is nested too deeply to analyse") from None
    if error is not None:
        raise error
    return outcome["value"]


@dataclass
class Analysis:
    module: cst.Module
    facts: Facts
    hits: list[Hit]
    context: RuleContext


def analyze_module(module: cst.Module, rules: Sequence[Rule], device_expression: Optional[str] = None,
                   pinned: frozenset[int] = frozenset(), seeds: Seeds = NO_SEEDS,
                   facts: Optional[Facts] = None) -> Analysis:
    """``facts``: the module's facts for these seeds, when already known (the project's reading)."""
    if facts is None or pinned:
        facts = analyze(module, pinned, seeds)
    setup = plan_device_setup(module, facts.torch_alias, facts.names_in_use, device_expression)
    context = RuleContext(facts, setup, known_text(module))
    hits: list[Hit] = []
    for rule in rules:
        if rule.only_for_cpu_scripts_unless_selected and facts.device_aware and not rule.selected_explicitly:
            continue  # a script that runs on the GPU already comes out byte for byte
        hits.extend(rule.check(context))
    return Analysis(module, facts, _distinct(hits), context)


def _distinct(hits: list[Hit]) -> list[Hit]:
    """One hit per rule, node and message: code that the analysis walks twice (a lambda handed to a
    function that calls it) must not be reported, or fixed, twice."""
    seen: set = set()
    kept = []
    for hit in hits:
        key = (hit.code, id(hit.node), hit.message)
        if key not in seen:
            seen.add(key)
            kept.append(hit)
    return kept


def _suppressed(line_text: str, code: str) -> bool:
    match = _NOQA.search(line_text)
    if match is None:
        return False
    codes = match.group("codes")
    return codes is None or code in {c.upper() for c in re.split(r"[\s,]+", codes)}


# Placement findings whose value, once a noqa comment keeps it where it is, must not pull others along.
_PINNED_BY_NOQA = frozenset({"CG101", "CG102", "CG104", "CG106"})


def locate_with_noqa(analysis: Analysis, path: str, rules: Sequence[Rule],
                     device_expression: Optional[str] = None,
                     seeds: Seeds = NO_SEEDS) -> tuple[Analysis, list[tuple[Finding, Hit]]]:
    """``locate``, and where ``# noqa`` keeps a model or a tensor on the CPU, the analysis again with it
    pinned there: a model left on the CPU on purpose must not get its inputs moved to the device."""
    suppressed: list[Hit] = []
    located = locate(analysis, path, suppressed)
    pins = frozenset(id(hit.node) for hit in suppressed if hit.code in _PINNED_BY_NOQA)
    if not pins:
        return analysis, located
    analysis = analyze_module(analysis.module, rules, device_expression, pins, seeds)
    return analysis, locate(analysis, path)


def locate(analysis: Analysis, path: str, suppressed: Optional[list[Hit]] = None) -> list[tuple[Finding, Hit]]:
    """Positions for the hits (computed only for files that have some), minus ``# noqa`` lines
    (collected in ``suppressed`` when it is given)."""
    if not analysis.hits:
        return []
    source = source_text(analysis.module)
    entry = _recent(analysis.module)
    positions = node_positions(analysis.module, [hit.node for hit in analysis.hits], source,
                               entry[2] if entry is not None else None)
    lines = python_lines(source)  # as Python counts them: a form feed or U+2028 ends no line
    located = []
    for hit in analysis.hits:
        where = positions[hit.node]
        text = lines[where.start.line - 1] if where.start.line - 1 < len(lines) else ""
        if "noqa" in text and _suppressed(text, hit.code):
            if suppressed is not None:
                suppressed.append(hit)
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


def check_module(module: cst.Module, path: str, rules: Sequence[Rule], seeds: Seeds = NO_SEEDS,
                 facts: Optional[Facts] = None, device_expression: Optional[str] = None) -> list[Finding]:
    """``device_expression``: the device setup the fixes would add (the configured device style): what
    check reports is what rewrite would do."""
    return run_with_deep_stack(_check_module, module, path, rules, seeds, facts, device_expression)


def _check_module(module: cst.Module, path: str, rules: Sequence[Rule], seeds: Seeds = NO_SEEDS,
                  facts: Optional[Facts] = None, device_expression: Optional[str] = None) -> list[Finding]:
    analysis = analyze_module(module, rules, device_expression, seeds=seeds, facts=facts)
    return [finding for finding, _ in locate_with_noqa(analysis, path, rules, device_expression, seeds)[1]]


def fix_module(module: cst.Module, path: str, rules: Sequence[Rule], unsafe_fixes: bool = False,
               device_expression: Optional[str] = None) -> cst.Module:
    """Apply every available fix at once; the result is parsed again before it is returned."""
    new = run_with_deep_stack(fixed_bytes, module, path, rules, unsafe_fixes, device_expression)
    if new is None:
        return module
    try:
        return cst.parse_module(new)
    except cst.ParserSyntaxError as error:
        raise SourceError(f"internal error: the rewrite does not parse ({error.message}); file left unchanged")


def rewrite_data(data: bytes, path: str, rules: Sequence[Rule], unsafe_fixes: bool = False,
                 device_expression: Optional[str] = None, seeds: Seeds = NO_SEEDS) -> tuple[str, bytes]:
    """The file's encoding and its bytes with the fixes applied (same encoding, BOM and line endings).
    ``seeds``: what the rest of the project says about this file (``project.project_seeds``)."""
    module = parse(data)
    new = run_with_deep_stack(fixed_bytes, module, path, rules, unsafe_fixes, device_expression, b"noqa" in data, seeds)
    return module.encoding, data if new is None else new


@dataclass
class FixTally:
    """What the rewrites of a run left out: the unsafe fixes when unsafe fixes are off."""

    hidden: int = 0


_TALLY: Optional[FixTally] = None


@contextmanager
def tally_fixes() -> Iterator[FixTally]:
    """Count, while the block runs, the unsafe fixes that the rewrites leave out."""
    global _TALLY
    previous, _TALLY = _TALLY, FixTally()
    try:
        yield _TALLY
    finally:
        _TALLY = previous


def fixed_bytes(module: cst.Module, path: str, rules: Sequence[Rule], unsafe_fixes: bool,
                device_expression: Optional[str], has_noqa: Optional[bool] = None,
                seeds: Seeds = NO_SEEDS) -> Optional[bytes]:
    """The module's bytes with every available fix applied, or None when no fix applies.

    The code is generated once (libcst's code generation costs about as much as a parse) and checked
    with Python's parser, which is stricter than libcst's and many times faster.
    """
    analysis = analyze_module(module, rules, device_expression, seeds=seeds)
    hits = analysis.hits
    if not hits:
        return None
    if has_noqa is None:
        has_noqa = "noqa" in source_text(module)
    if has_noqa:
        analysis, located = locate_with_noqa(analysis, path, rules, device_expression, seeds)
        hits = [hit for _, hit in located]
    fixes: list[Fix] = []
    for hit in hits:
        if hit.fix is not None and (hit.fix.safe or unsafe_fixes) and all(hit.fix is not f for f in fixes):
            fixes.append(hit.fix)
    if _TALLY is not None:  # the unsafe fixes left out, for "N more fixes are available with --unsafe-fixes"
        _TALLY.hidden += len({id(hit.fix) for hit in hits if hit.fix is not None and not (hit.fix.safe or unsafe_fixes)})
    if not fixes:
        return None
    edits = [edit for fix in fixes for edit in fix.edits]
    if any(fix.needs_device_setup for fix in fixes):
        uses = [edit for fix in fixes if fix.needs_device_setup for edit in fix.edits]
        edits.extend(analysis.context.setup.setup_edits(module, uses))
    new = apply_edits(module, edits).bytes
    problem = python_syntax_error(new)
    if problem and python_syntax_error(module.bytes):  # newer syntax than this Python's: libcst judges
        try:
            cst.parse_module(new)
            problem = ""
        except cst.ParserSyntaxError as error:
            problem = error.message
    if problem:  # a bug in a fix: never hand out code that does not parse
        raise SourceError(f"internal error: the rewrite does not parse ({problem}); file left unchanged")
    return new


def check_source(code: Source, path: Optional[str] = None, select: Sequence[str] = (),
                 ignore: Sequence[str] = ()) -> list[Finding]:
    """The findings for one source text. Raises ``SourceError`` when it cannot be parsed."""
    return check_module(parse(code), path or "<string>", select_rules(select, ignore))


def rewrite_source(code: Source, path: Optional[str] = None, select: Sequence[str] = (),
                   ignore: Sequence[str] = (), unsafe_fixes: bool = False,
                   device_expression: Optional[str] = None) -> str:
    """The source with every fix applied (safe ones only unless ``unsafe_fixes``)."""
    module = parse(code)
    new = run_with_deep_stack(fixed_bytes, module, path or "<string>", select_rules(select, ignore), unsafe_fixes,
                              device_expression)
    if new is None:
        return code if isinstance(code, str) else code.decode(module.encoding)
    return new.decode(module.encoding)
