"""JSONPatch building for the mutating endpoint (pure; no I/O)."""
