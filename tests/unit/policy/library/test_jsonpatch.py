"""JSONPatch library (jsonpatch.go, MutatingAdmissionPolicy): ``jsonpatch.escapeKey``."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check

# kubernetes.io "CEL in Kubernetes" / MutatingAdmissionPolicy JSONPatch examples (RFC 6901 escaping).
CASES = [
    ('jsonpatch.escapeKey("k8s.io/my~label")', "value", "k8s.io~1my~0label"),
    ('jsonpatch.escapeKey("plain")', "value", "plain"),
    ('"/metadata/labels/" + jsonpatch.escapeKey("example.com/team")', "value", "/metadata/labels/example.com~1team"),
    ("jsonpatch.escapeKey(1)", "compile", "found no matching overload"),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_escape_key(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)
