"""How reviews are evaluated: inline on the event loop, or in worker processes killed at the deadline."""
