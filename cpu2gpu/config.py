"""Settings from ``[tool.cpu2gpu]`` in the nearest pyproject.toml."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import libcst

from .files import PatternError, check_patterns

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]


@dataclass
class Settings:
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    unsafe_fixes: bool = False
    device_expression: Optional[str] = None
    source: Optional[str] = None


class ConfigError(Exception):
    pass


def find_pyproject(start: Path) -> Optional[Path]:
    start = start.resolve()
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        try:
            if candidate.is_file():
                return candidate
        except OSError:  # a folder that cannot be looked into: the files in it report it
            continue
    return None


def load_settings(start: Path) -> Settings:
    path = find_pyproject(start)
    if path is None:
        return Settings()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: cannot read [tool.cpu2gpu]: {error}") from None
    table = data.get("tool", {}).get("cpu2gpu", {})

    def strings(key: str) -> list[str]:
        value = table.get(key, table.get(key.replace("_", "-"), []))
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: [tool.cpu2gpu] {key.replace('_', '-')} must be a list of strings")
        return value

    unsafe = table.get("unsafe-fixes", table.get("unsafe_fixes", False))
    if not isinstance(unsafe, bool):
        raise ConfigError(f"{path}: [tool.cpu2gpu] unsafe-fixes must be true or false")
    expression = table.get("device-expression", table.get("device_expression"))
    if expression is not None:
        if not isinstance(expression, str):
            raise ConfigError(f"{path}: [tool.cpu2gpu] device-expression must be a string")
        try:
            libcst.parse_expression(expression)
        except libcst.ParserSyntaxError:
            raise ConfigError(f"{path}: [tool.cpu2gpu] device-expression is not a Python expression: {expression}")
    known = {"select", "ignore", "extend-select", "extend_select", "exclude", "unsafe-fixes", "unsafe_fixes",
             "device-expression", "device_expression"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{path}: [tool.cpu2gpu] unknown setting: {', '.join(unknown)}")
    exclude = strings("exclude")
    try:
        check_patterns(exclude)
    except PatternError as error:
        raise ConfigError(f"{path}: [tool.cpu2gpu] {error}") from None
    return Settings(strings("select"), strings("ignore"), strings("extend_select"), exclude,
                    unsafe, expression, str(path))
