"""cpu2gpu.runtime: runs a script under instrumentation to prove its migration (imports torch)."""
