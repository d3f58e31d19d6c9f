"""Kubernetes CEL library values: ``quantity``, ``url``, ``ip`` and ``cidr`` (pure; no I/O).

Follows kubernetes.io "CEL in Kubernetes" (Kubernetes quantity, URL, IP address and CIDR
libraries). cel-expr-python cannot declare opaque types from Python, so each value is a map with
one reserved key holding its canonical form — ``{"@quantity": "1/2"}`` (an exact rational),
``{"@url": "https://..."}``, ``{"@ip": "10.0.0.1"}``, ``{"@cidr": "10.0.0.0/8"}`` — which keeps
CEL's ``==`` semantic, as in Kubernetes: ``quantity('1Gi') == quantity('1024Mi')``. Invalid input
raises ``ValueError``, which the engine turns into a CEL error value.
"""

from __future__ import annotations

import ipaddress
import re
from fractions import Fraction
from typing import Any
from urllib.parse import parse_qs, urlsplit

Q, U, I, C = "@quantity", "@url", "@ip", "@cidr"

_SUFFIXES = {
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity string (``"1.5Gi"``, ``"500m"``, ``"1e3"``).

    Raises:
        ValueError: not a quantity.
    """
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"invalid quantity: {text!r}")
    number = Fraction(m.group(1))
    if m.group(2):
        return number * Fraction(10) ** int(m.group(2)[1:])
    return number * _SUFFIXES[m.group(3) or ""]


def is_quantity(text: str) -> bool:
    """``isQuantity(string)``."""
    return bool(_QUANTITY.match(text))


def _q(value: Fraction) -> dict[str, str]:
    return {Q: str(value)}


def quantity(text: str) -> dict[str, str]:
    """``quantity(string)``."""
    return _q(parse_quantity(text))


def _value(q: Any) -> Fraction:
    if isinstance(q, dict) and Q in q:
        return Fraction(q[Q])
    if isinstance(q, int) and not isinstance(q, bool):
        return Fraction(q)
    raise ValueError("expected a quantity")


def q_is_integer(q: Any) -> bool:
    """``<Quantity>.isInteger()``: exactly an integer that fits in int64."""
    v = _value(q)
    return v.denominator == 1 and -(2**63) <= v.numerator < 2**63


def q_as_integer(q: Any) -> int:
    """``<Quantity>.asInteger()``; an error when not an int64 integer."""
    if not q_is_integer(q):
        raise ValueError("quantity is not an integer or overflows int64")
    return int(_value(q))


def q_as_float(q: Any) -> float:
    """``<Quantity>.asApproximateFloat()``."""
    return float(_value(q))


def q_sign(q: Any) -> int:
    """``<Quantity>.sign()``: -1, 0 or 1."""
    v = _value(q)
    return (v > 0) - (v < 0)


def q_add(q: Any, other: Any) -> dict[str, str]:
    """``<Quantity>.add(<Quantity> | int)``."""
    return _q(_value(q) + _value(other))


def q_sub(q: Any, other: Any) -> dict[str, str]:
    """``<Quantity>.sub(<Quantity> | int)``."""
    return _q(_value(q) - _value(other))


def q_compare(q: Any, other: Any) -> int:
    """``<Quantity>.compareTo(<Quantity>)``: -1, 0 or 1."""
    a, b = _value(q), _value(other)
    return (a > b) - (a < b)


def q_less(q: Any, other: Any) -> bool:
    """``<Quantity>.isLessThan(<Quantity>)``."""
    return _value(q) < _value(other)


def q_greater(q: Any, other: Any) -> bool:
    """``<Quantity>.isGreaterThan(<Quantity>)``."""
    return _value(q) > _value(other)


# -- URL -----------------------------------------------------------------------------------------
def is_url(text: str) -> bool:
    """``isURL(string)``: an absolute URI or an absolute path (Go's ``url.ParseRequestURI``)."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    if " " in text:
        return False
    return (bool(parts.scheme) and (bool(parts.netloc) or bool(parts.path))) or text.startswith("/")


def url(text: str) -> dict[str, str]:
    """``url(string)``."""
    if not is_url(text):
        raise ValueError(f"invalid URL: {text!r}")
    return {U: text}


def _parts(u: Any) -> Any:
    if not (isinstance(u, dict) and U in u):
        raise ValueError("expected a URL")
    return urlsplit(u[U])


def url_scheme(u: Any) -> str:
    """``<URL>.getScheme()``."""
    return _parts(u).scheme


def url_host(u: Any) -> str:
    """``<URL>.getHost()``: host and port, IPv6 in brackets."""
    return _parts(u).netloc.rsplit("@", 1)[-1]


def url_hostname(u: Any) -> str:
    """``<URL>.getHostname()``: the host without port or brackets."""
    return _parts(u).hostname or ""


def url_port(u: Any) -> str:
    """``<URL>.getPort()``: the port as a string, or ``""``."""
    port = _parts(u).port
    return "" if port is None else str(port)


def url_path(u: Any) -> str:
    """``<URL>.getEscapedPath()``."""
    return _parts(u).path


def url_query(u: Any) -> dict[str, list[str]]:
    """``<URL>.getQuery()``: ``map(string, list(string))``."""
    return {k: v for k, v in parse_qs(_parts(u).query, keep_blank_values=True).items()}


# -- IP and CIDR -------------------------------------------------------------------------------
def is_ip(text: str) -> bool:
    """``isIP(string)``: an IPv4 or IPv6 address without zone; IPv4-mapped IPv6 is rejected."""
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return False
    return not (isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None)


def ip(text: str) -> dict[str, str]:
    """``ip(string)``."""
    if not is_ip(text):
        raise ValueError(f"invalid IP address: {text!r}")
    return {I: str(ipaddress.ip_address(text))}


def ip_is_canonical(text: str) -> bool:
    """``ip.isCanonical(string)``."""
    if not is_ip(text):
        raise ValueError(f"invalid IP address: {text!r}")
    return str(ipaddress.ip_address(text)) == text


def _addr(x: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(x, dict) and I in x:
        return ipaddress.ip_address(x[I])
    if isinstance(x, str):
        return ipaddress.ip_address(ip(x)[I])
    raise ValueError("expected an IP address")


def ip_family(x: Any) -> int:
    """``<IP>.family()``: 4 or 6."""
    return _addr(x).version


def ip_is_unspecified(x: Any) -> bool:
    """``<IP>.isUnspecified()``."""
    return _addr(x).is_unspecified


def ip_is_loopback(x: Any) -> bool:
    """``<IP>.isLoopback()``."""
    return _addr(x).is_loopback


def ip_is_link_local_multicast(x: Any) -> bool:
    """``<IP>.isLinkLocalMulticast()`` (224.0.0.0/24, ff02::/16)."""
    a = _addr(x)
    net = ipaddress.ip_network("224.0.0.0/24" if a.version == 4 else "ff02::/16")
    return a in net


def ip_is_link_local_unicast(x: Any) -> bool:
    """``<IP>.isLinkLocalUnicast()``."""
    a = _addr(x)
    return a.is_link_local and not a.is_multicast


def ip_is_global_unicast(x: Any) -> bool:
    """``<IP>.isGlobalUnicast()`` as Go defines it: not unspecified, loopback, multicast or link-local."""
    a = _addr(x)
    if a.version == 4 and a == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)


def is_cidr(text: str) -> bool:
    """``isCIDR(string)``."""
    if "/" not in text:
        return False
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return is_ip(text.split("/", 1)[0])


def cidr(text: str) -> dict[str, str]:
    """``cidr(string)`` (the address part is kept as written, as Kubernetes does)."""
    if not is_cidr(text):
        raise ValueError(f"invalid CIDR: {text!r}")
    address, prefix = text.split("/", 1)
    return {C: f"{ipaddress.ip_address(address)}/{int(prefix)}"}


def _net(x: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if isinstance(x, dict) and C in x:
        return ipaddress.ip_network(x[C], strict=False)
    if isinstance(x, str):
        return ipaddress.ip_network(cidr(x)[C], strict=False)
    raise ValueError("expected a CIDR")


def cidr_contains_ip(c: Any, x: Any) -> bool:
    """``<CIDR>.containsIP(<IP> | string)``."""
    a = _addr(x)
    n = _net(c)
    return a.version == n.version and a in n


def cidr_contains_cidr(c: Any, other: Any) -> bool:
    """``<CIDR>.containsCIDR(<CIDR> | string)``."""
    a, b = _net(c), _net(other)
    return a.version == b.version and b.subnet_of(a)  # type: ignore[arg-type]


def cidr_ip(c: Any) -> dict[str, str]:
    """``<CIDR>.ip()``: the address part as written."""
    if not (isinstance(c, dict) and C in c):
        raise ValueError("expected a CIDR")
    return {I: c[C].split("/", 1)[0]}


def cidr_masked(c: Any) -> dict[str, str]:
    """``<CIDR>.masked()``: the network address with the same prefix."""
    n = _net(c)
    return {C: f"{n.network_address}/{n.prefixlen}"}


def cidr_prefix_length(c: Any) -> int:
    """``<CIDR>.prefixLength()``."""
    return _net(c).prefixlen
