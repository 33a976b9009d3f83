"""The command line: ``cpu2gpu check | rewrite | rules | verify``."""

from __future__ import annotations

import difflib
import importlib
import sys
from pathlib import Path
from typing import Optional, Sequence

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it: 128 + SIGINT

try:  # a Ctrl-C while the modules load (libcst takes a while) ends the run quietly too
    import click

    from . import __version__
    from .cache import CACHE_DIR_NAME, Cache, cache_root, settings_fingerprint
    from .checking import check_targets
    from .config import ConfigError, Settings, load_settings
    from .engine import SourceError, rewrite_data, select_rules
    from .files import (NotRegularFileError, PatternError, Target, check_patterns, discover, mentions_torch,
                        read_source, regular_or_missing)
    from .notebook import CellError, cell_diff, is_notebook, rewrite_notebook
    from .output import FORMATS, FileError, render, shown
    from .parallel import default_jobs
    from .project import project_seeds
    from .rules import ALL_RULES
    from .seeds import NO_SEEDS
    from .syntax import python_lines
    from .writing import WriteError, write_rewrite
except KeyboardInterrupt:
    raise SystemExit(EXIT_INTERRUPTED) from None


class LazyGroup(click.Group):
    """Commands that need torch are imported only when they run."""

    lazy = {"verify": "cpu2gpu.runtime.cli:verify"}

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # Ctrl-C: the workers stop with the run; no traceback, no "Aborted!"
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name in self.lazy:
            module_name, attribute = self.lazy[name].split(":")
            try:
                return getattr(importlib.import_module(module_name), attribute)
            except ImportError as error:
                return _unavailable(name, error)
        return super().get_command(ctx, name)


def _unavailable(name: str, error: ImportError) -> click.Command:
    """A command whose module cannot be imported: say so instead of a traceback."""

    @click.command(name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                   help=f"(unavailable: {error})")
    def command() -> None:
        click.echo(f"error: `cpu2gpu {name}` cannot start: {error}", err=True)
        sys.exit(EXIT_ERROR)

    return command


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="cpu2gpu")
def main() -> None:
    """Move PyTorch scripts from the CPU to the GPU, and prove the move."""


def _echo_error(path: str, message: str) -> None:
    click.echo(FileError(path, message).text(), err=True)


def _error(path: str, error: SourceError) -> None:
    cell = error.cell if isinstance(error, CellError) else None
    click.echo(FileError(path, error.message, error.line, error.column, cell).text(), err=True)


def _settings(paths: Sequence[str]) -> Settings:
    try:
        return load_settings(Path(paths[0]) if paths else Path.cwd())
    except ConfigError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(EXIT_ERROR)


def _read(target: Target) -> Optional[bytes]:
    if target.error is not None:
        _echo_error(target.path, target.error)
        return None
    try:
        return read_source(target.path)
    except FileNotFoundError:
        _echo_error(target.path, "no such file or folder")
    except IsADirectoryError:
        _echo_error(target.path, "is a folder")
    except NotRegularFileError:
        _echo_error(target.path, "not a regular file")
    except OSError as error:
        _echo_error(target.path, f"cannot read the file: {error.strerror or error}")
    return None


def _targets(paths: Sequence[str], settings: Settings, exclude: Sequence[str], force_exclude: bool) -> list[Target]:
    patterns = [*settings.exclude, *_split(exclude)]
    try:
        check_patterns(patterns)
    except PatternError as error:
        raise click.BadParameter(str(error), param_hint="'--exclude'") from None
    return list(discover(paths, patterns, force_exclude=force_exclude))


_selection = [
    click.option("--select", multiple=True, help="Rule codes or prefixes to run (e.g. CG1, CG303)."),
    click.option("--ignore", multiple=True, help="Rule codes or prefixes to skip."),
]


def selection_options(func):
    for option in reversed(_selection):
        func = option(func)
    return func


def _split(values: Sequence[str]) -> list[str]:
    return [part for value in values for part in value.split(",") if part.strip()]


def _rules(settings: Settings, select: Sequence[str], ignore: Sequence[str]):
    chosen_select = _split(select) or settings.select
    return select_rules(chosen_select, [*settings.ignore, *_split(ignore)], settings.extend_select)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--output-format", type=click.Choice(FORMATS), default="text", show_default=True)
@selection_options
@click.option("--exclude", multiple=True, help="Patterns of files and folders to skip in folders (adds to exclude).")
@click.option("--force-exclude", is_flag=True, help="Apply the exclude patterns to files named on the command line too.")
@click.option("--statistics", is_flag=True, help="Print how many findings each rule has instead of the findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings (errors still exit 2).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Files checked in parallel  [default: the number of cores]")
@click.option("--no-cache", is_flag=True, help=f"Neither read nor write {CACHE_DIR_NAME}/.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary line.")
def check(paths: tuple[str, ...], output_format: str, select: tuple[str, ...], ignore: tuple[str, ...],
          exclude: tuple[str, ...], force_exclude: bool, statistics: bool, exit_zero: bool, jobs: Optional[int],
          no_cache: bool, quiet: bool) -> None:
    """Report device-placement problems (reads the code, never runs it)."""
    if statistics and output_format not in ("text", "json"):
        raise click.UsageError("--statistics works with --output-format text or json")
    settings = _settings(paths)
    rules = _rules(settings, select, ignore)
    cache = None
    if not no_cache:
        cache = Cache(cache_root(settings.source), settings_fingerprint(
            [rule.code + "!" * rule.selected_explicitly for rule in rules], settings.unsafe_fixes,
            settings.device_expression))
    targets = _targets(paths, settings, exclude, force_exclude)
    results = check_targets(targets, rules, jobs or default_jobs(), cache, quiet)
    findings = [finding for result in results for finding in result.findings]
    errors = [result.error for result in results if result.error is not None]
    for error in errors:
        click.echo(error.text(), err=True)
    report = render(findings, output_format, errors, statistics=statistics, quiet=quiet)
    if report:
        click.echo(report)
    if errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--in-place", is_flag=True, help="Write the fixes into the files.")
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if a file would change.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None,
              help="Also apply the fixes that change behaviour (default: unsafe-fixes in [tool.cpu2gpu]).")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when a file was (or, without --in-place, would be) changed.")
@click.option("--exclude", multiple=True, help="Patterns of files and folders to skip in folders (adds to exclude).")
@click.option("--force-exclude", is_flag=True, help="Apply the exclude patterns to files named on the command line too.")
@selection_options
def rewrite(paths: tuple[str, ...], in_place: bool, check_only: bool, unsafe_fixes: Optional[bool],
            exit_non_zero_on_fix: bool, exclude: tuple[str, ...], force_exclude: bool, select: tuple[str, ...],
            ignore: tuple[str, ...]) -> None:
    """Apply the fixes: a unified diff by default, the files with --in-place."""
    settings = _settings(paths)
    rules = _rules(settings, select, ignore)
    if unsafe_fixes is None:
        unsafe_fixes = settings.unsafe_fixes
    errors = changed = 0
    targets = _targets(paths, settings, exclude, force_exclude)
    # (the project is read around regular files only: a FIFO or a device would block it)
    seeds = project_seeds([t.path for t in targets if t.error is None and regular_or_missing(t.path)])
    for target in targets:
        data = _read(target)
        if data is None:
            errors += 1
            continue
        if not target.named and not mentions_torch(data) and target.path not in seeds:
            continue
        try:
            if is_notebook(target.path):
                encoding, new = "utf-8", rewrite_notebook(data, target.path, rules, unsafe_fixes,
                                                          settings.device_expression)
            else:
                encoding, new = rewrite_data(data, target.path, rules, unsafe_fixes, settings.device_expression,
                                             seeds.get(target.path, NO_SEEDS))
        except SourceError as error:
            _error(target.path, error)
            errors += 1
            continue
        if new == data:
            continue
        changed += 1
        if check_only:
            click.echo(f"Would rewrite {shown(target.path)}")
        elif in_place:
            try:
                write_rewrite(target.path, data, new)
            except WriteError as error:
                _echo_error(target.path, str(error))
                errors += 1
                continue
            click.echo(f"Rewrote {shown(target.path)}", err=True)
        else:
            name = shown(target.path)
            old_name, new_name = (name, name) if Path(target.path).is_absolute() else (f"a/{name}", f"b/{name}")
            if is_notebook(target.path):  # the cells' code, not the JSON around it
                click.echo(cell_diff(data, new, target.path, old_name, new_name), nl=False)
                continue
            # lines as Python counts them: a form feed or U+2028 inside a line ends no line
            old_text = python_lines(data.decode(encoding, errors="replace"), keepends=True)
            new_text = python_lines(new.decode(encoding, errors="replace"), keepends=True)
            diff = difflib.unified_diff(old_text, new_text, old_name, new_name)
            click.echo("".join(_terminated(diff)), nl=False)
    if (check_only or exit_non_zero_on_fix) and changed:
        sys.exit(EXIT_ERROR if errors else EXIT_FINDINGS)
    sys.exit(EXIT_ERROR if errors else EXIT_CLEAN)


def _terminated(lines):
    for line in lines:
        yield line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"


@main.command()
@click.option("--output-format", type=click.Choice(("text", "json")), default="text", show_default=True)
def rules(output_format: str) -> None:
    """List the rule catalog."""
    if output_format == "json":
        import json

        click.echo(json.dumps([
            {"code": r.code, "name": r.name, "fix": r.fix_safety, "default": r.default_enabled, "summary": r.summary()}
            for r in ALL_RULES
        ], indent=2))
        return
    for rule in ALL_RULES:
        fix = {"safe": "fix", "unsafe": "unsafe fix", None: "no fix"}[rule.fix_safety]
        off = "" if rule.default_enabled else " (off unless selected)"
        click.echo(f"{rule.code}  {rule.name:<28} {fix:<11} {rule.summary()}{off}")
