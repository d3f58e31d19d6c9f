"""Kubernetes IP library: ``ip(s)``, ``isIP(s)``, ``ip.isCanonical(s)``, ``string(ip)`` and getters (pure).

Follows ``k8s.io/apiserver/pkg/cel/library/ip.go`` (Kubernetes 1.30+), which parses with Go's
``netip.ParseAddr`` and rejects zones (``fe80::1%eth0``) and IPv4-mapped IPv6 (``::ffff:1.2.3.4``).
Python's ``ipaddress`` agrees with ``netip`` on the rest (no leading zeros in IPv4 octets).

An IP value is ``{"@ip": <canonical text>}``, so CEL ``==`` compares addresses.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from webhook.policy.cel.cost import PYTHON_SCALAR
from webhook.policy.cel.library._decl import VALUE, LibraryError, T, function, member

KEY = "@ip"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_addr(text: str) -> Address:
    """Parse as Kubernetes' ``parseIPAddr``.

    Raises:
        LibraryError: not an address, has a zone, or is IPv4-mapped IPv6.
    """
    if "%" in text:
        raise LibraryError(f"IP address {text!r} with zone value is not allowed")
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise LibraryError(f"IP Address {text!r} parse error during conversion from string") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise LibraryError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return addr


def is_ip(text: str) -> bool:
    """``isIP(<string>) -> bool``."""
    try:
        parse_addr(text)
    except LibraryError:
        return False
    return True


def ip(text: str) -> dict[str, str]:
    """``ip(<string>) -> IP``."""
    return {KEY: str(parse_addr(text))}


def is_canonical(text: str) -> bool:
    """``ip.isCanonical(<string>) -> bool``: ``text`` is the address's canonical form (RFC 5952)."""
    return str(parse_addr(text)) == text


def addr(x: Any) -> Address:
    """The address of an IP value (or of a string, parsed).

    Raises:
        LibraryError: neither.
    """
    if isinstance(x, dict) and KEY in x:
        return ipaddress.ip_address(x[KEY])
    if isinstance(x, str):
        return parse_addr(x)
    raise LibraryError("no such overload: expected an IP address")


def family(x: Any) -> int:
    """``<IP>.family() -> int``: 4 or 6."""
    return addr(x).version


def is_unspecified(x: Any) -> bool:
    """``<IP>.isUnspecified() -> bool`` (0.0.0.0, ::)."""
    return addr(x).is_unspecified


def is_loopback(x: Any) -> bool:
    """``<IP>.isLoopback() -> bool`` (127.0.0.0/8, ::1)."""
    return addr(x).is_loopback


def is_link_local_multicast(x: Any) -> bool:
    """``<IP>.isLinkLocalMulticast() -> bool`` (224.0.0.0/24, ff02::/16), as Go."""
    a = addr(x)
    return a in ipaddress.ip_network("224.0.0.0/24" if a.version == 4 else "ff02::/16")


def is_link_local_unicast(x: Any) -> bool:
    """``<IP>.isLinkLocalUnicast() -> bool`` (169.254.0.0/16, fe80::/10), as Go."""
    a = addr(x)
    return a in ipaddress.ip_network("169.254.0.0/16" if a.version == 4 else "fe80::/10")


def is_global_unicast(x: Any) -> bool:
    """``<IP>.isGlobalUnicast() -> bool`` as Go's ``Addr.IsGlobalUnicast`` (private ranges count)."""
    a = addr(x)
    if a.version == 4 and a == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or is_link_local_unicast(x))


def to_string(x: Any) -> str:
    """``string(<IP>) -> string``: the canonical form."""
    return str(addr(x))


def declarations() -> list[Any]:
    """The IP library's functions (``string(IP)`` is declared in :mod:`.cidr` with ``string(CIDR)``)."""
    return [
        function("isIP", "tg_is_ip", T.BOOL, [T.STRING], is_ip, rule=PYTHON_SCALAR),
        function("ip.isCanonical", "tg_ip_is_canonical", T.BOOL, [T.STRING], is_canonical, rule=PYTHON_SCALAR),
        member("family", "tg_ip_family", T.INT, [VALUE], family, rule=PYTHON_SCALAR),
        member("isUnspecified", "tg_ip_is_unspecified", T.BOOL, [VALUE], is_unspecified, rule=PYTHON_SCALAR),
        member("isLoopback", "tg_ip_is_loopback", T.BOOL, [VALUE], is_loopback, rule=PYTHON_SCALAR),
        member("isLinkLocalMulticast", "tg_ip_is_llm", T.BOOL, [VALUE], is_link_local_multicast, rule=PYTHON_SCALAR),
        member("isLinkLocalUnicast", "tg_ip_is_llu", T.BOOL, [VALUE], is_link_local_unicast, rule=PYTHON_SCALAR),
        member("isGlobalUnicast", "tg_ip_is_gu", T.BOOL, [VALUE], is_global_unicast, rule=PYTHON_SCALAR),
    ]
