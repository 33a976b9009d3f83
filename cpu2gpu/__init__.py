"""cpu2gpu: find and fix what stops a CPU PyTorch script from running on a GPU.

This package reads source code only; it never imports torch (see ``cpu2gpu.runtime``
for the half that runs scripts).
"""

from .engine import Finding, SourceError, check_source, rewrite_source

__version__ = "0.1.0"
__all__ = ["Finding", "SourceError", "check_source", "rewrite_source", "__version__"]
