"""CIDR library: transcribed from kubernetes staging/src/k8s.io/apiserver/pkg/cel/library/cidr_test.go."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check

# TestCIDR
CASES = [
    ("cidr(192168)", "compile", "found no matching overload for 'cidr'"),
    ('cidr(dyn("192.168.0.0/24"))', "value", {"@cidr": "192.168.0.0/24"}),
    ('cidr("192.168.0.0/")', "error", "network address parse error during conversion from string"),
    ('cidr("192.168.0.0/24").containsIP(ip("192.168.0.1"))', "value", True),
    ('cidr("192.168.0.0/24").containsIP(ip("192.168.1.1"))', "value", False),
    ('cidr("192.168.0.0/24").containsIP("192.168.0.1")', "value", True),
    ('cidr("192.168.0.0/24").containsIP("192.168.1.1")', "value", False),
    ('cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/25"))', "value", True),
    ('cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/23"))', "value", False),
    ('cidr("192.168.0.0/24").containsCIDR("192.168.0.0/25")', "value", True),
    ('cidr("192.168.0.0/24").containsCIDR("192.168.0.0/23")', "value", False),
    ('cidr("192.168.0.0/24").ip()', "value", {"@ip": "192.168.0.0"}),
    ('cidr("192.168.0.0/24").masked()', "value", {"@cidr": "192.168.0.0/24"}),
    ('cidr("192.168.0.1/24").masked()', "value", {"@cidr": "192.168.0.0/24"}),
    ('cidr("192.168.0.0/24").prefixLength()', "value", 24),
    ('cidr("2001:db8::/32")', "value", {"@cidr": "2001:db8::/32"}),
    ('cidr("2001:db8::/")', "error", "network address parse error during conversion from string"),
    ('cidr("2001:db8::/32").containsIP(ip("2001:db8::1"))', "value", True),
    ('cidr("2001:db8::/32").containsIP(ip("2001:dc8::1"))', "value", False),
    ('cidr("2001:db8::/32").containsIP("2001:db8::1")', "value", True),
    ('cidr("2001:db8::/32").containsIP("2001:dc8::1")', "value", False),
    ('cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/33"))', "value", True),
    ('cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/31"))', "value", False),
    ('cidr("2001:db8::/32").containsCIDR("2001:db8::/33")', "value", True),
    ('cidr("2001:db8::/32").containsCIDR("2001:db8::/31")', "value", False),
    ('cidr("2001:db8::/32").ip()', "value", {"@ip": "2001:db8::"}),
    ('cidr("2001:db8::/32").masked()', "value", {"@cidr": "2001:db8::/32"}),
    ('cidr("2001:db8:1::/32").masked()', "value", {"@cidr": "2001:db8::/32"}),
    ('cidr("2001:db8::/32").prefixLength()', "value", 32),
    ('string(cidr("192.168.0.0/24"))', "value", "192.168.0.0/24"),
    # cidr.go: prefix within the address family; isCIDR.
    ('isCIDR("192.168.0.0/33")', "value", False),
    ('isCIDR("192.168.0.0")', "value", False),
    ('isCIDR("10.0.0.1/8")', "value", True),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_cidr(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


# cidr.go declares the opaque type net.CIDR (rewrites.rewrite_source, cidr.net_type).
NET_TYPES = [
    ('type(cidr("192.168.0.0/24")) == net.CIDR', "value", True),
    ('type(cidr("2001:db8::/32")) == net.CIDR', "value", True),
    ('type(cidr("192.168.0.0/24")) == net.IP', "value", False),
    ('type(cidr("192.168.0.0/24").masked()) == net.CIDR', "value", True),
    ('type({"@cidr": "x", "@ip": "y"}) == net.CIDR || type({"@cidr": "x", "@ip": "y"}) == net.IP', "value", False),
    ('type(cidr("192.168.0.0/24")) == type(cidr("10.0.0.0/8"))', "value", True),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), NET_TYPES)
def test_cidr_net_type(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)
