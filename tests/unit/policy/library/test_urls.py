"""URL library: transcribed from the examples of kubernetes staging/src/k8s.io/apiserver/pkg/cel/library/urls.go
(Go net/url.ParseRequestURI semantics)."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check

# urls.go: url, isURL, getScheme/getHost/getHostname/getPort/getEscapedPath/getQuery
CASES = [
    ("url('https://example.com:80/').getHost()", "value", "example.com:80"),
    ("url('https://example.com/').getHost()", "value", "example.com"),
    ("url('https://[::1]:80/').getHost()", "value", "[::1]:80"),
    ("url('https://[::1]/').getHost()", "value", "[::1]"),
    ("url('/path').getHost()", "value", ""),
    ("url('https://example.com:80/').getHostname()", "value", "example.com"),
    ("url('https://127.0.0.1:80/').getHostname()", "value", "127.0.0.1"),
    ("url('https://[::1]:80/').getHostname()", "value", "::1"),
    ("url('/path').getHostname()", "value", ""),
    ("url('https://example.com:80/').getPort()", "value", "80"),
    ("url('https://example.com/').getPort()", "value", ""),
    ("url('/path').getPort()", "value", ""),
    ("url('https://example.com/path').getEscapedPath()", "value", "/path"),
    ("url('https://example.com/path with spaces/').getEscapedPath()", "value", "/path%20with%20spaces/"),
    ("url('https://example.com/with space/').getEscapedPath()", "value", "/with%20space/"),
    ("url('https://example.com').getEscapedPath()", "value", ""),
    ("url('https://example.com/path?k1=a&k2=b&k2=c').getQuery()", "value", {"k1": ["a"], "k2": ["b", "c"]}),
    ("url('https://example.com/path?key with spaces=value with spaces').getQuery()", "value",
     {"key with spaces": ["value with spaces"]}),
    ("url('https://example.com/path?').getQuery()", "value", {}),
    ("url('https://example.com/path').getQuery()", "value", {}),
    ("url('https://example.com/path').getScheme()", "value", "https"),
    ("url('HTTPS://example.com/').getScheme()", "value", "https"),
    ("isURL('https://example.com:80/path?query=val')", "value", True),
    ("isURL('/absolute-path')", "value", True),
    ("isURL('https://a:b:c/')", "value", False),
    ("isURL('../relative-path')", "value", False),
    ("isURL('example.com')", "value", False),
    ("isURL('https://exa mple.com/')", "value", False),
    ("isURL('https://example.com/%zz')", "value", False),
    ("isURL('')", "value", False),
    ("url('../relative-path')", "error", "URL parse error during conversion from string"),
    ("isURL(1)", "compile", "found no matching overload for 'isURL'"),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_urls(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)
