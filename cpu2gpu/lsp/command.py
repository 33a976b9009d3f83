"""The ``cpu2gpu server`` command (loaded lazily by the CLI: pygls is an optional extra)."""

from __future__ import annotations

import click

try:
    import pygls  # noqa: F401
except ImportError as error:  # the CLI turns this into a one-line error
    raise ImportError(f"{error.name or 'pygls'} is not installed (pip install 'cpu2gpu[lsp]')") from None


@click.command()
@click.option("--stdio", is_flag=True, help="Talk over stdin/stdout (the default; accepted for editors that pass it).")
@click.option("--debounce", type=click.FloatRange(min=0), default=None,
              help="Seconds to wait after the last change before checking  [default: 0.3]")
@click.pass_context
def server(ctx: click.Context, stdio: bool, debounce: float | None) -> None:
    """Language server (LSP, over stdio): findings as diagnostics, fixes as code actions."""
    from .server import DEBOUNCE_S, build_server

    # 0 after shutdown and exit; 1 after exit alone, or stdin closed without shutdown
    ctx.exit(build_server(DEBOUNCE_S if debounce is None else debounce).serve_stdio())
