"""IP library: transcribed from kubernetes staging/src/k8s.io/apiserver/pkg/cel/library/ip_test.go."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check

# TestIP
CASES = [
    ('ip("192.168.0.1")', "value", {"@ip": "192.168.0.1"}),
    ('ip("192.168.0.1.0")', "error", 'IP Address \'192.168.0.1.0\' parse error during conversion from string'),
    ('isIP("192.168.0.1")', "value", True),
    ('isIP("192.168.0.1.0")', "value", False),
    ('ip.isCanonical("127.0.0.1")', "value", True),
    ('ip.isCanonical("127.0.0.1.0")', "error", "parse error during conversion from string"),
    ('ip("192.168.0.1").family()', "value", 4),
    ('ip("0.0.0.0").isUnspecified()', "value", True),
    ('ip("127.0.0.1").isUnspecified()', "value", False),
    ('ip("127.0.0.1").isLoopback()', "value", True),
    ('ip("1.2.3.4").isLoopback()', "value", False),
    ('ip("224.0.0.1").isLinkLocalMulticast()', "value", True),
    ('ip("224.0.1.1").isLinkLocalMulticast()', "value", False),
    ('ip("169.254.169.254").isLinkLocalUnicast()', "value", True),
    ('ip("192.168.0.1").isLinkLocalUnicast()', "value", False),
    ('ip("192.168.0.1").isGlobalUnicast()', "value", True),
    ('ip("255.255.255.255").isGlobalUnicast()', "value", False),
    ('ip("2001:db8::68")', "value", {"@ip": "2001:db8::68"}),
    ('ip("2001:db8:::68")', "error", "parse error during conversion from string"),
    ('isIP("2001:db8::68")', "value", True),
    ('isIP("2001:db8:::68")', "value", False),
    ('ip.isCanonical("2001:db8::68")', "value", True),
    ('ip.isCanonical("2001:DB8::68")', "value", False),
    ('ip.isCanonical("2001:db8:::68")', "error", "parse error during conversion from string"),
    ('ip("2001:db8::68").family()', "value", 6),
    ('ip("::").isUnspecified()', "value", True),
    ('ip("::1").isUnspecified()', "value", False),
    ('ip("::1").isLoopback()', "value", True),
    ('ip("2001:db8::abcd").isLoopback()', "value", False),
    ('ip("ff02::1").isLinkLocalMulticast()', "value", True),
    ('ip("fd00::1").isLinkLocalMulticast()', "value", False),
    ('ip("fe80::1").isLinkLocalUnicast()', "value", True),
    ('ip("fd80::1").isLinkLocalUnicast()', "value", False),
    ('ip("2001:db8::abcd").isGlobalUnicast()', "value", True),
    ('ip("ff00::1").isGlobalUnicast()', "value", False),
    ('string(ip("192.168.0.1"))', "value", "192.168.0.1"),
    # ip.go: zones and IPv4-mapped IPv6 are rejected.
    ('isIP("fe80::1%eth0")', "value", False),
    ('isIP("::ffff:192.168.0.1")', "value", False),
    ('ip("::ffff:192.168.0.1")', "error", "IPv4-mapped IPv6 address"),
    ('isIP("127.0.0.01")', "value", False),
]

# ip.go declares the opaque type net.IP: `type()` of an IP value is net.IP, not a CIDR or a map, and the
# identifier stands for nothing else (rewrites.rewrite_source, cidr.net_type).
NET_TYPES = [
    ('type(ip("192.168.0.1")) == net.IP', "value", True),
    ('type(ip("::1")) == net.IP', "value", True),
    ('type(ip("192.168.0.1")) == net.CIDR', "value", False),
    ('type(cidr("192.168.0.0/24").ip()) == net.IP', "value", True),
    ('type(1) == int && type(ip("1.2.3.4")) != int && type(ip("1.2.3.4")) == net.IP', "value", True),
    ('type({"a": "1.2.3.4"}) == net.IP', "value", False),
    ('type("1.2.3.4") == net.IP', "value", False),
    ('"net.IP" == net.IP', "value", False),
    ('[ip("1.2.3.4"), ip("::1")].all(x, type(x) == net.IP)', "value", True),
    ("type('net.IP') == net.IP", "value", False),
]

# Library values are maps (cel-expr-python cannot declare opaque types from Python), so `cidr(...)` is dyn to
# the checker: a validator finds a constructor's value passed where a string is taken.
OPAQUE = [
    ('isIP(cidr("192.168.0.0/24"))', "compile", "found no matching overload for 'isIP' applied to '(net.CIDR)'"),
    ('ip(ip("10.0.0.1"))', "compile", "found no matching overload for 'ip' applied to '(net.IP)'"),
    ('isCIDR(quantity("1"))', "compile", "found no matching overload for 'isCIDR' applied to '(Quantity)'"),
    ('isIP(string(cidr("192.168.0.0/24")))', "value", False),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_ip(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


@pytest.mark.parametrize(("expr", "kind", "expected"), NET_TYPES)
def test_ip_net_type(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


@pytest.mark.parametrize(("expr", "kind", "expected"), OPAQUE)
def test_ip_opaque_type(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)
