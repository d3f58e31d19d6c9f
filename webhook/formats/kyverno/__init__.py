"""Kyverno's CEL policies (``policies.kyverno.io``): :mod:`.convert` turns one into a Tollgate policy (pure)."""
