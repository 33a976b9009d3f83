"""The instrumented child: one run of the user's script (or notebook, or DDP rank) under the harness."""
