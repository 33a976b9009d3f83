"""How findings are printed: text for people, JSON for machines."""

from __future__ import annotations

import json
from typing import Sequence

from .engine import Finding

FORMATS = ("text", "json")


def location(finding: Finding) -> str:
    if finding.cell is not None:
        return f"{finding.path}:cell {finding.cell}:{finding.line}:{finding.column}"
    return f"{finding.path}:{finding.line}:{finding.column}"


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


def render(findings: Sequence[Finding], output_format: str, errors: int) -> str:
    if output_format == "json":
        return json.dumps([f.as_dict() for f in findings], indent=2)
    lines = [text_line(f) for f in findings]
    lines.append(summary(findings, errors))
    return "\n".join(lines)
