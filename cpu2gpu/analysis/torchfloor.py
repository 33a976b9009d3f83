"""The oldest PyTorch a project declares, and the device style that it allows.

``torch.accelerator`` exists from PyTorch 2.6 on (older versions raise AttributeError), so the
``accelerator`` device style is refused for a project that declares a lower floor, and ``auto``
picks it only where the floor is 2.6 or higher. The floor is read, never guessed, from the files
next to the project root: ``dependencies`` (and the optional ones) in pyproject.toml, Poetry's
``[tool.poetry.dependencies]``, ``requirements*.txt`` and ``install_requires`` in setup.cfg.
Where several declare one, the lowest counts (any of them may be what gets installed).
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

DEVICE_STYLES = ("cuda", "accelerator", "auto")
ACCELERATOR_MINIMUM = (2, 6)
# torch.accelerator.set_device_index (2.6 had only set_device_idx) and the accelerator-generic
# DDP setup of PyTorch's examples (dist.get_default_backend_for_device) need 2.7.
DDP_ACCELERATOR_MINIMUM = (2, 7)

Version = tuple[int, ...]

# torch, its extras and the version clauses up to a marker: "torch[opt] >=2.1,<3 ; python_version>'3.8'"
_REQUIREMENT = re.compile(r"^\s*torch\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;#@]*)", re.IGNORECASE)
_CLAUSE = re.compile(r"^\s*(?P<op>===|==|~=|>=|>|\^|~|=)?\s*v?(?P<version>\d+(?:\.\d+)*)")


@dataclass(frozen=True)
class Floor:
    version: Version
    requirement: str  # as written: "torch>=2.1"
    source: str  # the file that declares it

    @property
    def text(self) -> str:
        return ".".join(str(part) for part in self.version)


class StyleError(Exception):
    pass


def requirement_floor(requirement: str) -> Optional[Version]:
    """The lowest torch version a requirement allows (``torch>=2.1`` -> (2, 1)), None for no floor
    (another package, a bare ``torch``, only an upper bound)."""
    match = _REQUIREMENT.match(requirement)
    if match is None:
        return None
    rest = requirement[match.start("spec"):]
    if rest[:1].isalnum() or rest[:1] in "-_.":  # torchvision, torch-geometric, torch_scatter
        return None
    return spec_floor(match.group("spec"))


def spec_floor(spec: str) -> Optional[Version]:
    """The floor of version clauses: ``>=2.1,<3`` -> (2, 1); ``^2.1`` (Poetry) -> (2, 1); ``*`` -> None."""
    floors = []
    for clause in spec.split(","):
        found = _CLAUSE.match(clause)
        if found is None or (found.group("op") is None and not clause.strip()[:1].isdigit()):
            continue
        floors.append(tuple(int(part) for part in found.group("version").split(".")))
    return max(floors) if floors else None


def _pyproject(path: Path) -> Iterator[tuple[str, Optional[Version]]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return
    project = data.get("project", {})
    requirements: list = list(project.get("dependencies", []) or [])
    for group in (project.get("optional-dependencies", {}) or {}).values():
        requirements.extend(group if isinstance(group, list) else [])
    for requirement in requirements:
        if isinstance(requirement, str):
            yield requirement, requirement_floor(requirement)
    poetry = data.get("tool", {}).get("poetry", {}).get("dependencies", {})
    if isinstance(poetry, dict) and "torch" in poetry:
        value = poetry["torch"]
        spec = value.get("version", "") if isinstance(value, dict) else value
        if isinstance(spec, str):
            yield f"torch = {spec!r}", spec_floor(spec)


def _requirements_txt(path: Path) -> Iterator[tuple[str, Optional[Version]]]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            yield line, requirement_floor(line)


def _setup_cfg(path: Path) -> Iterator[tuple[str, Optional[Version]]]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
        value = parser.get("options", "install_requires", fallback="")
    except (OSError, UnicodeDecodeError, configparser.Error):
        return
    for line in value.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            yield line, requirement_floor(line)


def _declarations(root: Path) -> Iterator[tuple[Path, Iterable[tuple[str, Optional[Version]]]]]:
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        yield pyproject, _pyproject(pyproject)
    for requirements in sorted(root.glob("requirements*.txt")):
        if requirements.is_file():
            yield requirements, _requirements_txt(requirements)
    setup_cfg = root / "setup.cfg"
    if setup_cfg.is_file():
        yield setup_cfg, _setup_cfg(setup_cfg)


def read_floor(root: Path) -> Optional[Floor]:
    """The lowest torch floor declared next to ``root`` (a folder), None when none is declared."""
    lowest: Optional[Floor] = None
    try:
        declarations = list(_declarations(root))
    except OSError:
        return None
    for path, requirements in declarations:
        for requirement, version in requirements:
            if version is not None and (lowest is None or version < lowest.version):
                lowest = Floor(version, requirement.strip(), str(path))
    return lowest


def _at_least(version: Version, minimum: Version) -> bool:
    width = max(len(version), len(minimum))
    return version + (0,) * (width - len(version)) >= minimum + (0,) * (width - len(minimum))


def resolve_style(style: str, root: Path, minimum: Version = ACCELERATOR_MINIMUM,
                  needs: str = "torch.accelerator") -> str:
    """``cuda`` or ``accelerator`` for the style asked (``auto`` decided by the floor).
    Raises ``StyleError`` (one line) for ``accelerator`` in a project whose torch floor is below
    ``minimum`` (2.6; 2.7 for the DDP setup, ``needs`` saying what needs it)."""
    if style not in DEVICE_STYLES:
        raise StyleError(f"unknown device style {style!r}: use one of {', '.join(DEVICE_STYLES)}")
    if style == "cuda":
        return style
    floor = read_floor(root)
    allowed = floor is not None and _at_least(floor.version, minimum)
    if style == "auto":
        return "accelerator" if allowed else "cuda"
    if floor is not None and not allowed:
        wanted = ".".join(map(str, minimum))
        raise StyleError(
            f"device style `accelerator` needs PyTorch {wanted} or newer ({needs}), but {floor.source} "
            f"declares `{floor.requirement}`: raise the floor to torch>={wanted} or use the `cuda` style")
    return style
