"""Judging runs: starting them (runner), comparing them, DDP, coverage, verify's verdict and migrate's rounds."""
