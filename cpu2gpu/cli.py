"""The command line: ``cpu2gpu check | rewrite | rules | verify``."""

from __future__ import annotations

import atexit
import difflib
import gc
import importlib
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it: 128 + SIGINT

try:  # a Ctrl-C while the modules load (libcst takes a while) ends the run quietly too
    import click

    from . import __version__
    from .sources.cache import CACHE_DIR_NAME, Cache, cache_root, settings_fingerprint
    from .runs.checking import check_data, check_targets
    from .sources.config import ConfigError, Settings, apply_device_style, load_settings
    from .engine import SourceError, rewrite_data, select_rules, tally_fixes
    from .sources.files import (NotRegularFileError, PatternError, Target, check_patterns, discover, mentions_torch,
                        read_source, regular_or_missing)
    from .notebooks.cells import CellError, cell_diff, is_notebook, rewrite_notebook
    from .output.formats import FORMATS, FileError, hidden_fixes_hint, render, shown
    from .runs.parallel import default_jobs
    from .project.projectset import project_seeds
    from .output.ruledoc import rule_help
    from .rules import ALL_RULES, RULES_BY_CODE
    from .analysis.seeds import NO_SEEDS
    from .sources.syntax import python_lines
    from .analysis.torchfloor import DEVICE_STYLES, StyleError
    from .sources.writing import WriteError, write_rewrite
except KeyboardInterrupt:
    raise SystemExit(EXIT_INTERRUPTED) from None

# At exit, Python's cycle collector would read every object still alive (the last files' trees, the
# caches): a fifth of a second after a check of a hundred files. Frozen, they are freed without it.
atexit.register(gc.freeze)


class LazyGroup(click.Group):
    """Commands that need torch are imported only when they run."""

    lazy = {"verify": "cpu2gpu.runtime.cli:verify", "migrate": "cpu2gpu.runtime.cli:migrate",
            "server": "cpu2gpu.lsp.command:server"}

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


# -h as well as --help, for the group and (click passes it down) every command
@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
        return load_settings(Path(paths[0]) if paths and paths[0] != STDIN else Path.cwd())
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


def _known_codes(patterns: Sequence[str], where: str) -> None:
    """Exit 2 on a code or prefix that names no rule (``CG999``): a typo must not pass in silence."""
    codes = [rule.code for rule in ALL_RULES]
    unknown = [p.strip() for p in patterns if p.strip() and not any(c.startswith(p.strip().upper()) for c in codes)]
    if unknown:
        prefixes = sorted({code[:3] for code in codes})
        click.echo(f"error: unknown rule code{'s' if len(unknown) > 1 else ''} in {where}: {', '.join(unknown)}\n"
                   f"known prefixes: CG, {', '.join(prefixes)}\nknown codes: {', '.join(codes)}\n"
                   "(`cpu2gpu rules` lists them)", err=True)
        sys.exit(EXIT_ERROR)


def _rules(settings: Settings, select: Sequence[str], ignore: Sequence[str]):
    _known_codes(_split(select), "--select")
    _known_codes(_split(ignore), "--ignore")
    for key, patterns in (("select", settings.select), ("ignore", settings.ignore),
                          ("extend-select", settings.extend_select)):
        _known_codes(patterns, f"{settings.source}: [tool.cpu2gpu] {key}")
    chosen_select = _split(select) or settings.select
    return select_rules(chosen_select, [*settings.ignore, *_split(ignore)], settings.extend_select)


STDIN = "-"


def _stdin(paths: Sequence[str], stdin_filename: Optional[str]) -> bool:
    """Whether the code comes on standard input: ``-`` (or ``--stdin-filename`` alone)."""
    if STDIN in paths or (stdin_filename is not None and not paths):
        if len(paths) > 1:
            raise click.UsageError("`-` (standard input) cannot be given with other paths")
        return True
    if stdin_filename is not None:
        raise click.UsageError("--stdin-filename goes with `-` (the code on standard input)")
    return False


def _stdin_data() -> bytes:
    data = getattr(sys.stdin, "buffer", sys.stdin).read()
    return data if isinstance(data, bytes) else data.encode("utf-8")


def _stdin_excluded(stdin_filename: Optional[str], settings: Settings, exclude: Sequence[str],
                    force_exclude: bool) -> bool:
    """--force-exclude and a --stdin-filename that matches an exclude pattern: nothing is done to it."""
    if not (force_exclude and stdin_filename):
        return False
    return not _targets([stdin_filename], settings, exclude, force_exclude)


def _no_files(paths: Sequence[str]) -> None:
    shown_paths = ", ".join(shown(path) for path in paths)
    click.echo(f"warning: no Python files found under {shown_paths}", err=True)


def _color() -> Optional[bool]:
    """Colours on a terminal (click's decision), never with NO_COLOR set (https://no-color.org)."""
    return False if os.environ.get("NO_COLOR") else None


_stdin_filename_option = click.option(
    "--stdin-filename", metavar="PATH",
    help="With `-`: the path of the code on standard input (settings, messages, notebook or script).")


_device_style_option = click.option(
    "--device-style", type=click.Choice(DEVICE_STYLES), default=None,
    help="The device setup the fixes add: cuda (torch.cuda.is_available()), accelerator (torch.accelerator, "
         "PyTorch 2.6+), auto (accelerator when the project's torch floor is 2.6+)  "
         "[default: device-style in [tool.cpu2gpu], else cuda]")


def _apply_style(settings: Settings, device_style: Optional[str], stdin: bool, stdin_filename: Optional[str],
                 paths: tuple[str, ...], distributed: bool = False) -> None:
    """The device style asked (or configured) in the settings; a style the project's torch cannot run
    is refused (exit 2)."""
    try:
        apply_device_style(settings, device_style,
                           Path(stdin_filename) if stdin and stdin_filename else Path.cwd() if stdin else Path(paths[0]),
                           distributed)
    except StyleError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(EXIT_ERROR)


@main.command()
@click.argument("paths", nargs=-1)
@click.option("--output-format", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("-o", "--output-file", metavar="PATH", help="Write the report to this file instead of standard output.")
@_stdin_filename_option
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None,
              help="Count the unsafe fixes as fixable ([*]), as `rewrite --unsafe-fixes` applies them.")
@selection_options
@click.option("--exclude", multiple=True, help="Patterns of files and folders to skip in folders (adds to exclude).")
@click.option("--force-exclude", is_flag=True, help="Apply the exclude patterns to files named on the command line too.")
@click.option("--statistics", is_flag=True, help="Print how many findings each rule has instead of the findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings (errors still exit 2).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Files checked in parallel  [default: the number of cores]")
@click.option("--no-cache", is_flag=True, help=f"Neither read nor write {CACHE_DIR_NAME}/.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no summary line.")
@_device_style_option
@click.option("--distributed", type=click.Choice(["ddp"]), default=None,
              help="Also report what a migration to DistributedDataParallel needs (CG400) in scripts that train "
                   "in one process  [default: distributed in [tool.cpu2gpu]]")
def check(paths: tuple[str, ...], output_format: str, output_file: Optional[str], stdin_filename: Optional[str],
          unsafe_fixes: Optional[bool], select: tuple[str, ...], ignore: tuple[str, ...],
          exclude: tuple[str, ...], force_exclude: bool, statistics: bool, exit_zero: bool, jobs: Optional[int],
          no_cache: bool, quiet: bool, device_style: Optional[str] = None, distributed: Optional[str] = None) -> None:
    """Report device-placement problems (reads the code, never runs it).

    PATHS: files and folders (default: the current folder); `-` reads the code from standard input."""
    if statistics and output_format not in ("text", "json"):
        raise click.UsageError("--statistics works with --output-format text or json")
    stdin = _stdin(paths, stdin_filename)
    paths = paths or (".",)
    settings = _settings([stdin_filename] if stdin and stdin_filename else paths)
    _apply_style(settings, device_style, stdin, stdin_filename, paths)
    if distributed:  # (distributed in [tool.cpu2gpu] selects it already)
        settings.extend_select = [*settings.extend_select, "CG400"]  # what the DDP migration needs
    rules = _rules(settings, select, ignore)
    if unsafe_fixes is None:
        unsafe_fixes = settings.unsafe_fixes
    cache = None
    if not no_cache:
        cache = Cache(cache_root(settings.source), settings_fingerprint(
            [rule.code + "!" * rule.selected_explicitly for rule in rules], settings.unsafe_fixes,
            settings.device_expression))
    nothing_found = False
    if stdin:
        excluded = _stdin_excluded(stdin_filename, settings, exclude, force_exclude)
        data = _stdin_data()
        results = [] if excluded else [check_data(stdin_filename or STDIN, data, rules, settings.device_expression)]
    else:
        targets = _targets(paths, settings, exclude, force_exclude)
        nothing_found = not targets
        if nothing_found:
            _no_files(paths)
        results = check_targets(targets, rules, jobs or default_jobs(), cache, quiet, settings.device_expression)
    findings = [finding for result in results for finding in result.findings]
    errors = [result.error for result in results if result.error is not None]
    for error in errors:
        click.echo(error.text(), err=True)
    report = render(findings, output_format, errors, statistics=statistics, quiet=quiet,
                    unsafe_fixes=unsafe_fixes, styled=output_format == "text" and output_file is None)
    if nothing_found and output_format == "text":
        report = ""  # not "All checks passed!": nothing was checked
    if output_file is not None:
        try:
            Path(output_file).write_text(report + "\n" if report else "", encoding="utf-8")
        except OSError as error:
            _echo_error(output_file, f"cannot write the report: {error.strerror or error}")
            sys.exit(EXIT_ERROR)
    elif report:
        click.echo(report, color=_color())
    if errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN)


@main.command()
@click.argument("paths", nargs=-1)
@_stdin_filename_option
@click.option("--in-place", is_flag=True, help="Write the fixes into the files.")
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if a file would change.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=None,
              help="Also apply the fixes that change behaviour (default: unsafe-fixes in [tool.cpu2gpu]).")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit 1 when a file was (or, without --in-place, would be) changed.")
@click.option("--exclude", multiple=True, help="Patterns of files and folders to skip in folders (adds to exclude).")
@click.option("--force-exclude", is_flag=True, help="Apply the exclude patterns to files named on the command line too.")
@_device_style_option
@click.option("--distributed", type=click.Choice(["ddp"]), default=None,
              help="Also migrate each training script to DistributedDataParallel under torchrun (process group, "
                   "DistributedSampler, rank-0 saving and printing); a script that cannot be migrated safely is "
                   "left as it is, with the reason  [default: distributed in [tool.cpu2gpu]]")
@selection_options
def rewrite(paths: tuple[str, ...], in_place: bool, check_only: bool, unsafe_fixes: Optional[bool],
            exit_non_zero_on_fix: bool, exclude: tuple[str, ...], force_exclude: bool, select: tuple[str, ...],
            ignore: tuple[str, ...], stdin_filename: Optional[str] = None,
            device_style: Optional[str] = None, distributed: Optional[str] = None) -> None:
    """Apply the fixes: a unified diff by default, the files with --in-place.

    PATHS: files and folders (default: the current folder); `-` reads the code from standard input
    and writes the rewritten code to standard output."""
    stdin = _stdin(paths, stdin_filename)
    if stdin and in_place:
        raise click.UsageError("--in-place cannot write to standard input: `rewrite -` writes the code to stdout")
    paths = paths or (".",)
    settings = _settings([stdin_filename] if stdin and stdin_filename else paths)
    distributed = distributed or settings.distributed
    _apply_style(settings, device_style, stdin, stdin_filename, paths, distributed is not None)
    rules = _rules(settings, select, ignore)
    if unsafe_fixes is None:
        unsafe_fixes = settings.unsafe_fixes
    if stdin and distributed:
        raise click.UsageError("--distributed works on files (it says what it did, or why not, per file)")
    if stdin:
        _rewrite_stdin(stdin_filename or STDIN, _stdin_data(), rules, unsafe_fixes, settings, check_only,
                       exit_non_zero_on_fix, _stdin_excluded(stdin_filename, settings, exclude, force_exclude))
    tally = click.get_current_context().with_resource(tally_fixes())  # the unsafe fixes left out
    errors = changed = refused = 0
    targets = _targets(paths, settings, exclude, force_exclude)
    if not targets:
        _no_files(paths)
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
        summary: list[str] = []
        if distributed and not is_notebook(target.path):
            from .distributed import Refusal, migrate_bytes_to_ddp  # (only here: check does not load it)

            try:
                new, summary = migrate_bytes_to_ddp(data, new, settings.device_style == "accelerator")
            except Refusal as refusal:
                click.echo(f"{shown(target.path)}: not migrated to DistributedDataParallel: {refusal}; "
                           "the file is left as it is", err=True)
                refused += 1
                continue
        elif distributed:
            click.echo(f"{shown(target.path)}: not migrated to DistributedDataParallel: a notebook does not run "
                       "under torchrun; the file is left as it is", err=True)
            refused += 1
            continue
        if new == data:
            continue
        changed += 1
        _echo_summary(target.path, summary)
        if check_only:
            click.echo(f"Would rewrite {shown(target.path)}", err=True)
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
    _hint_hidden_fixes(tally.hidden)
    if errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if refused or ((check_only or exit_non_zero_on_fix) and changed) else EXIT_CLEAN)


def _echo_summary(path: str, summary: Sequence[str]) -> None:
    """What the DDP migration did, on standard error (the diff stays a diff)."""
    if summary:
        click.echo(f"{shown(path)}: migrated to DistributedDataParallel; run it with "
                   f"`torchrun --nproc-per-node N {shown(path)}`:", err=True)
        for line in summary:
            click.echo(f"  - {line}", err=True)


def _hint_hidden_fixes(hidden: int) -> None:
    hint = hidden_fixes_hint(hidden)
    if hint:
        click.echo(hint, err=True)


def _rewrite_stdin(path: str, data: bytes, rules, unsafe_fixes: bool, settings: Settings, check_only: bool,
                   exit_non_zero_on_fix: bool, excluded: bool) -> None:
    """``rewrite -``: the whole rewritten code on standard output (as editors expect), the messages on
    standard error. A text that cannot be rewritten comes back unchanged (a filter never loses code)."""
    new = data
    if not excluded:
        with tally_fixes() as tally:
            try:
                if is_notebook(path):
                    new = rewrite_notebook(data, path, rules, unsafe_fixes, settings.device_expression)
                else:
                    new = rewrite_data(data, path, rules, unsafe_fixes, settings.device_expression)[1]
            except SourceError as error:
                _error(path, error)
                if not check_only:
                    click.echo(data, nl=False)  # bytes: written as they are
                sys.exit(EXIT_ERROR)
        _hint_hidden_fixes(tally.hidden)
    if check_only:
        if new != data:
            click.echo(f"Would rewrite {shown(path)}", err=True)
        sys.exit(EXIT_FINDINGS if new != data else EXIT_CLEAN)
    click.echo(new, nl=False)
    sys.exit(EXIT_FINDINGS if exit_non_zero_on_fix and new != data else EXIT_CLEAN)


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
    rows = [(rule.code, rule.name, {"safe": "fix", "unsafe": "unsafe fix", None: "no fix"}[rule.fix_safety],
             rule.summary() + ("" if rule.default_enabled else " (off unless selected)")) for rule in ALL_RULES]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for code, name, fix, summary in rows:  # aligned columns, whatever the longest name
        click.echo(f"{code:<{widths[0]}}  {name:<{widths[1]}}  {fix:<{widths[2]}}  {summary}")


@main.command("rule")
@click.argument("code")
def rule_command(code: str) -> None:
    """Explain a rule: what it finds, why it breaks on the GPU, an example (e.g. `cpu2gpu rule CG101`)."""
    rule = RULES_BY_CODE.get(code.strip().upper())
    if rule is None:
        near = [known for known in RULES_BY_CODE if known.startswith(code.strip().upper()[:4])] if code.strip() else []
        hint = f" (did you mean {', '.join(near)}?)" if near and len(near) <= 10 else ""
        click.echo(f"error: unknown rule code: {code}{hint}; `cpu2gpu rules` lists them", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(rule_help(rule))
