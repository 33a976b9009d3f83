"""``python -m cpu2gpu.runtime``: the child process that runs one script under instrumentation."""

if __name__ == "__main__":
    from .child.child import run_and_exit

    run_and_exit()
