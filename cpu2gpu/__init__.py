"""cpu2gpu: find and fix what stops a CPU PyTorch script from running on a GPU.

This package reads source code only; it never imports torch (see ``cpu2gpu.runtime``
for the half that runs scripts).
"""

__version__ = "0.1.0"
__all__ = ["Finding", "SourceError", "check_source", "rewrite_source", "__version__"]


def __getattr__(name: str):
    # The engine (and libcst) load on first use: the command line starts with nothing loaded, so
    # that it can answer a Ctrl-C during its start-up with a quiet exit.
    if name in ("Finding", "SourceError", "check_source", "rewrite_source"):
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
