"""``python -m cpu2gpu.runtime``: the child process that runs one script under instrumentation."""

from .child.child import run_and_exit

if __name__ == "__main__":
    run_and_exit()
