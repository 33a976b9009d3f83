"""What a run may write, and that nothing of it lives on: Landlock, the write watch, the audit hook, the keeper."""
