"""The simulated devices: a CUDA (and an Apple MPS) device that computes on the CPU and fails as the real one does."""
