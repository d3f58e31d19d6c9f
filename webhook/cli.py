"""Command line: `tollgate serve | certs | test`. Argument parsing only; no logic."""
