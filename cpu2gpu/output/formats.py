"""How findings are printed: text for people; JSON, GitHub annotations and SARIF for machines."""

from __future__ import annotations

import inspect
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import quote

import click

from .. import __version__
from ..engine import Finding
from ..rules import ALL_RULES, RULES_BY_CODE

FORMATS = ("text", "json", "github", "sarif")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


@dataclass(frozen=True)
class FileError:
    """A file that could not be checked: its path, where in it (if known) and why."""

    path: str
    message: str
    line: Optional[int] = None
    column: Optional[int] = None
    cell: Optional[int] = None

    def text(self) -> str:
        where = shown(self.path)
        if self.cell is not None:
            where += f":cell {self.cell}"
        if self.line is not None:
            where += f":{self.line}:{self.column}"
        return f"{where}: error: {self.message}"


# What would break a report line, or the terminal: control characters, line and paragraph
# separators, and the surrogates that stand for the undecodable bytes of a file name.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    char = match.group()
    if "\udc80" <= char <= "\udcff":  # a byte os.fsdecode could not decode
        return f"\\x{ord(char) - 0xdc00:02x}"
    return ascii(char)[1:-1]


def shown(path: str) -> str:
    """A path as the text reports print it: on one line, its control characters escaped as in a
    Python string literal (``\\n``, ``\\x1b``)."""
    return _UNPRINTABLE.sub(_escape, path)


def _style(text: str, styled: bool, **how) -> str:
    return click.style(text, **how) if styled else text


def location(finding: Finding, styled: bool = False) -> str:
    path = _style(shown(finding.path), styled, bold=True)
    if finding.cell is not None:
        return f"{path}:cell {finding.cell}:{finding.line}:{finding.column}"
    return f"{path}:{finding.line}:{finding.column}"


def applicable(finding: Finding, unsafe_fixes: bool = False) -> bool:
    """Whether ``cpu2gpu rewrite`` applies the finding's fix as things are set (``[*]``)."""
    if not finding.fix_available:
        return False
    rule = RULES_BY_CODE.get(finding.code)
    return unsafe_fixes or rule is None or rule.fix_safety == "safe"


def hidden_fixes(findings: Sequence[Finding], unsafe_fixes: bool = False) -> int:
    """The fixes that ``rewrite`` applies only with ``--unsafe-fixes``."""
    return sum(f.fix_available and not applicable(f, unsafe_fixes) for f in findings)


def hidden_fixes_hint(hidden: int) -> str:
    """The line that says there are fixes that ``rewrite`` leaves out (empty when there are none)."""
    if not hidden:
        return ""
    return f"{hidden} more fix{'es are' if hidden != 1 else ' is'} available with `cpu2gpu rewrite --unsafe-fixes`."


def text_line(finding: Finding, unsafe_fixes: bool = False, styled: bool = False) -> str:
    mark = " " + _style("[*]", styled, fg="cyan") if applicable(finding, unsafe_fixes) else ""
    code = _style(finding.code, styled, fg="red", bold=True)
    return f"{location(finding, styled)}: {code}{mark} {finding.message}"


def summary(findings: Sequence[Finding], errors: int, unsafe_fixes: bool = False) -> str:
    if not findings and not errors:
        return "All checks passed!"
    parts = []
    if findings:
        fixable = sum(applicable(f, unsafe_fixes) for f in findings)
        noun = "finding" if len(findings) == 1 else "findings"
        parts.append(f"Found {len(findings)} {noun}" + (f" ({fixable} fixable with `cpu2gpu rewrite`)" if fixable else ""))
    if errors:
        parts.append(f"{errors} file{'s' if errors != 1 else ''} could not be checked")
    hint = hidden_fixes_hint(hidden_fixes(findings, unsafe_fixes))
    return "; ".join(parts) + "." + (f"\n{hint}" if hint else "")


def render(findings: Sequence[Finding], output_format: str, errors: Sequence[FileError] = (),
           statistics: bool = False, quiet: bool = False, unsafe_fixes: bool = False, styled: bool = False) -> str:
    """The whole report; ``statistics`` gives counts per rule instead of the findings. ``unsafe_fixes``:
    whether ``rewrite`` applies the unsafe fixes too (what ``[*]`` promises); ``styled``: colours for
    a terminal (text only; ``click.echo`` drops them where they do not belong)."""
    if statistics:
        return _statistics_json(findings, unsafe_fixes) if output_format == "json" \
            else _statistics_text(findings, unsafe_fixes)
    if output_format == "json":
        return json.dumps([f.as_dict() for f in findings], indent=2)
    if output_format == "github":
        return "\n".join(github_line(f) for f in findings)
    if output_format == "sarif":
        return json.dumps(sarif(findings, errors), indent=2)
    lines = [text_line(f, unsafe_fixes, styled) for f in findings]
    if not quiet:
        lines.append(summary(findings, len(errors), unsafe_fixes))
    return "\n".join(lines)


def _counts(findings: Sequence[Finding], unsafe_fixes: bool = False) -> list[tuple[str, str, int, bool]]:
    counts = Counter(f.code for f in findings)
    names = {f.code: f.name for f in findings}
    fixable = {f.code for f in findings if applicable(f, unsafe_fixes)}
    return [(code, names[code], counts[code], code in fixable)
            for code in sorted(counts, key=lambda c: (-counts[c], c))]


def _statistics_text(findings: Sequence[Finding], unsafe_fixes: bool = False) -> str:
    rows = _counts(findings, unsafe_fixes)
    if not rows:
        return "All checks passed!"
    width = max(len(str(count)) for _, _, count, _ in rows)
    return "\n".join(f"{count:>{width}}  {code}  {'[*]' if fix else '   '} {name}" for code, name, count, fix in rows)


def _statistics_json(findings: Sequence[Finding], unsafe_fixes: bool = False) -> str:
    return json.dumps([{"code": code, "name": name, "count": count, "fixable": fix}
                       for code, name, count, fix in _counts(findings, unsafe_fixes)], indent=2)


# GitHub Actions workflow commands: https://docs.github.com/actions/reference/workflow-commands-for-github-actions


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_line(finding: Finding) -> str:
    properties = [f"file={_escape_property(finding.path)}"]
    message = finding.message
    if finding.cell is None:
        properties += [f"line={finding.line}", f"col={finding.column}",
                       f"endLine={finding.end_line}", f"endColumn={finding.end_column}"]
    else:  # the annotation goes on the line of the .ipynb file that holds the code; the message names the cell
        if finding.file_line is not None:
            properties += [f"line={finding.file_line}", f"col={finding.file_column}",
                           f"endLine={finding.file_end_line}", f"endColumn={finding.file_end_column}"]
        message = f"cell {finding.cell}, line {finding.line}, column {finding.column}: {message}"
    properties.append(f"title={_escape_property(f'{finding.code} {finding.name}')}")
    return f"::error {','.join(properties)}::{_escape_data(message)}"


# SARIF 2.1.0: https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html


def _level(code: str) -> str:
    # Placement problems crash or leave work behind; portability breaks other machines; CG3 are hints.
    return {"CG1": "error", "CG2": "warning"}.get(code[:3], "note")


def _uri(path: str) -> str:
    candidate = Path(path)
    if candidate.is_absolute():
        return candidate.as_uri()
    return quote(candidate.as_posix())


def _rule_descriptor(rule) -> dict:
    doc = inspect.cleandoc(rule.__doc__ or "") or rule.message
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary()},
        "fullDescription": {"text": doc},
        "help": {"text": doc},
        "defaultConfiguration": {"level": _level(rule.code), "enabled": rule.default_enabled},
        "properties": {"fix": rule.fix_safety or "none"},
    }


def _physical_location(path: str, line: Optional[int], column: Optional[int], end_line: Optional[int] = None,
                       end_column: Optional[int] = None) -> dict:
    location: dict = {"artifactLocation": {"uri": _uri(path)}}
    if line is not None:
        region = {"startLine": line}
        if column is not None:
            region["startColumn"] = column
        if end_line is not None:
            region["endLine"] = end_line
        if end_column is not None:
            region["endColumn"] = end_column
        location["region"] = region
    return location


def _result(finding: Finding, index: int) -> dict:
    result: dict = {
        "ruleId": finding.code,
        "ruleIndex": index,
        "level": _level(finding.code),
        "message": {"text": finding.message},
    }
    if finding.cell is None:
        physical = _physical_location(finding.path, finding.line, finding.column, finding.end_line,
                                      finding.end_column)
    else:  # regions count lines of the notebook file (where the cell's code sits in its JSON);
        # the cell and the place in it go in the message and the properties
        physical = _physical_location(finding.path, finding.file_line, finding.file_column, finding.file_end_line,
                                      finding.file_end_column)
        result["message"]["text"] = f"cell {finding.cell}, line {finding.line}: {finding.message}"
        result["properties"] = {"cell": finding.cell, "line": finding.line, "column": finding.column,
                                "endLine": finding.end_line, "endColumn": finding.end_column}
        if finding.cell_index is not None:
            result["properties"]["cellIndex"] = finding.cell_index
    where: dict = {"physicalLocation": physical}
    if finding.cell is not None:
        where["logicalLocations"] = [{"name": f"cell {finding.cell}", "kind": "module",
                                      "fullyQualifiedName": f"{finding.path}:cell {finding.cell}"}]
    result["locations"] = [where]
    return result


def sarif(findings: Sequence[Finding], errors: Sequence[FileError] = ()) -> dict:
    """One SARIF 2.1.0 log with one run: the catalog as the driver's rules, a result per finding."""
    index = {rule.code: i for i, rule in enumerate(ALL_RULES)}
    notifications = [{
        "level": "error",
        "message": {"text": error.message},
        "locations": [{"physicalLocation": _physical_location(error.path, error.line if error.cell is None else None,
                                                              error.column if error.cell is None else None)}],
    } for error in errors]
    invocation: dict = {"executionSuccessful": not errors}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "cpu2gpu",
                "version": __version__,
                "rules": [_rule_descriptor(rule) for rule in ALL_RULES],
            }},
            "invocations": [invocation],
            "columnKind": "unicodeCodePoints",
            "results": [_result(f, index[f.code]) for f in findings],
        }],
    }
