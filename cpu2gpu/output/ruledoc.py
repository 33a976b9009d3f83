"""A rule's documentation for a terminal (``cpu2gpu rule CG101``): its docstring, reStructuredText
markup taken out.

The docstrings are written in a small part of reStructuredText: ``inline code``, a paragraph
ending in ``::`` before an indented example, ``.. code-block:: python`` directives, and headings
underlined with ``===`` or ``---``. On a terminal the code keeps single backquotes (as in the
messages), literal blocks are indented by four spaces, and headings are plain lines.
"""

from __future__ import annotations

import inspect
import re

from ..rules import Rule

_INLINE_CODE = re.compile(r"``(.+?)``")
_ROLE = re.compile(r":[a-z]+:`([^`]+)`")  # :class:`Foo` -> `Foo`
_DIRECTIVE = re.compile(r"^\s*\.\. (?:code-block|code|sourcecode)::.*$")
_UNDERLINE = re.compile(r"^\s*([=\-~^\"'`#*+])\1{2,}\s*$")

_FIX = {"safe": "safe (applied by `cpu2gpu rewrite`)",
        "unsafe": "unsafe (applied by `cpu2gpu rewrite --unsafe-fixes`)",
        None: "none"}


def _inline(text: str) -> str:
    return _ROLE.sub(r"`\1`", _INLINE_CODE.sub(r"`\1`", text))


def render_doc(doc: str) -> list[str]:
    """The lines of a docstring for a terminal."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    literal = False  # inside an indented literal block
    block_indent = 0
    for index, line in enumerate(lines):
        stripped = line.strip()
        if literal:
            indent = len(line) - len(line.lstrip())
            if stripped and block_indent == 0:
                block_indent = indent
            if not stripped or indent >= block_indent > 0:
                if stripped or (out and out[-1]):
                    out.append("    " + line[block_indent:] if stripped else "")
                continue
            literal = False
        if _DIRECTIVE.match(line):
            literal, block_indent = True, 0
            continue
        if _UNDERLINE.match(line) and out and out[-1].strip():
            continue  # the heading above it stays, as a plain line
        if stripped.endswith("::"):
            literal, block_indent = True, 0
            text = stripped[:-2].rstrip()
            if not text:  # a lone "::" introduces the block and says nothing
                continue
            line = line.rstrip()[:-2].rstrip() + ("" if text.endswith(":") else ":")
        out.append(_inline(line))
    while out and not out[-1].strip():
        out.pop()
    return out


def rule_help(rule: type[Rule]) -> str:
    """What ``cpu2gpu rule CODE`` prints: the heading, the fix and the rule's documentation."""
    lines = [f"{rule.code} {rule.name}", ""]
    body = render_doc(rule.__doc__ or rule.summary())
    lines += body[:1] + [""] if body else []
    lines.append(f"Message: {_inline(rule.message)}")
    lines.append(f"Fix: {_FIX.get(rule.fix_safety, str(rule.fix_safety))}")
    if not rule.default_enabled:
        lines.append(f"Off by default: select it with --select {rule.code} or extend-select.")
    rest = body[1:]
    while rest and not rest[0].strip():
        rest = rest[1:]
    if rest:
        lines += [""] + rest
    return "\n".join(lines)
