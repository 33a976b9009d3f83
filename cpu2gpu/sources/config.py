"""Settings from ``[tool.cpu2gpu]`` in the nearest pyproject.toml."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import libcst

from .files import PatternError, check_patterns
from ..rewrite.fixes import ACCELERATOR_DEVICE
from ..analysis.torchfloor import DDP_ACCELERATOR_MINIMUM, DEVICE_STYLES, resolve_style

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
    device_style: Optional[str] = None  # cuda | accelerator | auto (torchfloor.resolve_style)
    distributed: Optional[str] = None  # "ddp": rewrite also migrates to DistributedDataParallel


DISTRIBUTED_MODES = ("ddp",)


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
    style = table.get("device-style", table.get("device_style"))
    if style is not None and style not in DEVICE_STYLES:
        raise ConfigError(f"{path}: [tool.cpu2gpu] device-style must be one of {', '.join(DEVICE_STYLES)}")
    if style is not None and expression is not None:
        raise ConfigError(f"{path}: [tool.cpu2gpu] device-style and device-expression: set one of them")
    distributed = table.get("distributed")
    if distributed is not None and distributed not in DISTRIBUTED_MODES:
        raise ConfigError(f"{path}: [tool.cpu2gpu] distributed must be one of {', '.join(DISTRIBUTED_MODES)}")
    known = {"select", "ignore", "extend-select", "extend_select", "exclude", "unsafe-fixes", "unsafe_fixes",
             "device-expression", "device_expression", "device-style", "device_style", "distributed"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{path}: [tool.cpu2gpu] unknown setting: {', '.join(unknown)}")
    exclude = strings("exclude")
    try:
        check_patterns(exclude)
    except PatternError as error:
        raise ConfigError(f"{path}: [tool.cpu2gpu] {error}") from None
    extend_select = strings("extend_select")
    if distributed is not None:  # check (and the editor) say what the DDP migration needs: CG400
        extend_select = [*extend_select, "CG400"]
    return Settings(strings("select"), strings("ignore"), extend_select, exclude,
                    unsafe, expression, str(path), style, distributed)


def apply_device_style(settings: Settings, style: Optional[str], start: Path, distributed: bool = False) -> Settings:
    """The settings with the device setup of the style asked (``--device-style``, else ``device-style``
    in [tool.cpu2gpu]; ``cuda`` when neither) in ``device_expression``. The torch floor is read next to
    the pyproject.toml of the settings, else next to ``start``. Raises ``StyleError``."""
    if style is None:
        style = settings.device_style
    if style is None:
        return settings
    if settings.source is not None:
        root = Path(settings.source).parent
    else:
        start = start.resolve()
        root = start if start.is_dir() else start.parent
    resolved = resolve_style(style, root, DDP_ACCELERATOR_MINIMUM, "the DDP setup: torch.accelerator.set_device_index, "
                             "dist.get_default_backend_for_device") if distributed else resolve_style(style, root)
    if resolved == "accelerator":
        settings.device_expression = ACCELERATOR_DEVICE
    else:  # the style asked overrides a configured device-expression
        settings.device_expression = None
    settings.device_style = resolved
    return settings
