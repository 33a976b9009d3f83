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

from . import __version__
from .engine import Finding
from .rules import ALL_RULES

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


def location(finding: Finding) -> str:
    path = shown(finding.path)
    if finding.cell is not None:
        return f"{path}:cell {finding.cell}:{finding.line}:{finding.column}"
    return f"{path}:{finding.line}:{finding.column}"


def text_line(finding: Finding) -> str:
    mark = " [*]" if finding.fix_available else ""
    return f"{location(finding)}: {finding.code}{mark} {finding.message}"


def summary(findings: Sequence[Finding], errors: int) -> str:
    if not findings and not errors:
        return "All checks passed!"
    parts = []
    if findings:
        fixable = sum(f.fix_available for f in findings)
        noun = "finding" if len(findings) == 1 else "findings"
        parts.append(f"Found {len(findings)} {noun}" + (f" ({fixable} fixable with `cpu2gpu rewrite`)" if fixable else ""))
    if errors:
        parts.append(f"{errors} file{'s' if errors != 1 else ''} could not be checked")
    return "; ".join(parts) + "."


def render(findings: Sequence[Finding], output_format: str, errors: Sequence[FileError] = (),
           statistics: bool = False, quiet: bool = False) -> str:
    """The whole report; ``statistics`` gives counts per rule instead of the findings."""
    if statistics:
        return _statistics_json(findings) if output_format == "json" else _statistics_text(findings)
    if output_format == "json":
        return json.dumps([f.as_dict() for f in findings], indent=2)
    if output_format == "github":
        return "\n".join(github_line(f) for f in findings)
    if output_format == "sarif":
        return json.dumps(sarif(findings, errors), indent=2)
    lines = [text_line(f) for f in findings]
    if not quiet:
        lines.append(summary(findings, len(errors)))
    return "\n".join(lines)


def _counts(findings: Sequence[Finding]) -> list[tuple[str, str, int, bool]]:
    counts = Counter(f.code for f in findings)
    names = {f.code: f.name for f in findings}
    fixable = {f.code for f in findings if f.fix_available}
    return [(code, names[code], counts[code], code in fixable)
            for code in sorted(counts, key=lambda c: (-counts[c], c))]


def _statistics_text(findings: Sequence[Finding]) -> str:
    rows = _counts(findings)
    if not rows:
        return "All checks passed!"
    width = max(len(str(count)) for _, _, count, _ in rows)
    return "\n".join(f"{count:>{width}}  {code}  {'[*]' if fix else '   '} {name}" for code, name, count, fix in rows)


def _statistics_json(findings: Sequence[Finding]) -> str:
    return json.dumps([{"code": code, "name": name, "count": count, "fixable": fix}
                       for code, name, count, fix in _counts(findings)], indent=2)


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
    else:  # a line of the notebook's JSON would point at the wrong place: name the cell instead
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
    else:  # regions count lines of the notebook file; a cell's lines go in the properties
        physical = _physical_location(finding.path, None, None)
        result["message"]["text"] = f"cell {finding.cell}, line {finding.line}: {finding.message}"
        result["properties"] = {"cell": finding.cell, "line": finding.line, "column": finding.column,
                                "endLine": finding.end_line, "endColumn": finding.end_column}
    result["locations"] = [{"physicalLocation": physical}]
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
