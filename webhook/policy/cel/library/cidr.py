"""Kubernetes CIDR library: ``cidr(s)``, ``isCIDR(s)`` and the CIDR methods (pure; no I/O).

Also ``string(IP | CIDR)`` and ``ip(s)``, declared here because they overload across both libraries.

Follows ``k8s.io/apiserver/pkg/cel/library/cidr.go`` (Kubernetes 1.30+), which parses with Go's
``netip.ParsePrefix``: the address may have host bits set (``192.168.0.1/24``; ``masked()`` clears
them), no zone, no IPv4-mapped IPv6, the prefix length is decimal without leading zeros.

A CIDR value is ``{"@cidr": "<canonical address>/<bits>"}``.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from cel_expr_python import cel

from webhook.policy.cel.cost import PYTHON_PART, PYTHON_SCALAR, PYTHON_TEXT
from webhook.policy.cel.library import ip as iplib
from webhook.policy.cel.library._decl import VALUE, LibraryError, T, function, member, overloads

KEY = "@cidr"


def parse_prefix(text: str) -> tuple[iplib.Address, int]:
    """Parse as Kubernetes' ``parseCIDR``: ``(address as written, prefix length)``.

    Raises:
        LibraryError: not ``address/bits`` or out of range.
    """
    address, slash, bits = text.partition("/")
    if not slash or not bits.isascii() or not bits.isdigit() or (len(bits) > 1 and bits[0] == "0"):
        raise LibraryError(f"network address parse error during conversion from string: {text!r}")
    try:
        a = iplib.parse_addr(address)
    except LibraryError as e:
        raise LibraryError(f"network address parse error during conversion from string: {e}") from None
    n = int(bits)
    if n > a.max_prefixlen:
        raise LibraryError(f"network address parse error during conversion from string: {text!r}")
    return a, n


def is_cidr(text: str) -> bool:
    """``isCIDR(<string>) -> bool``."""
    try:
        parse_prefix(text)
    except LibraryError:
        return False
    return True


def cidr(text: str) -> dict[str, str]:
    """``cidr(<string>) -> CIDR``."""
    a, n = parse_prefix(text)
    return {KEY: f"{a}/{n}"}


def _net(x: Any) -> tuple[iplib.Address, int]:
    if isinstance(x, dict) and KEY in x:
        return parse_prefix(x[KEY])
    if isinstance(x, str):
        return parse_prefix(x)
    raise LibraryError("no such overload: expected a CIDR")


def _network(x: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    a, n = _net(x)
    return ipaddress.ip_network(f"{a}/{n}", strict=False)


def contains_ip(c: Any, x: Any) -> bool:
    """``<CIDR>.containsIP(<IP> | <string>) -> bool``."""
    a = iplib.addr(x)
    net = _network(c)
    return a.version == net.version and a in net


def contains_cidr(c: Any, other: Any) -> bool:
    """``<CIDR>.containsCIDR(<CIDR> | <string>) -> bool``: ``other`` lies within ``c``."""
    outer, inner = _network(c), _network(other)
    return outer.version == inner.version and inner.prefixlen >= outer.prefixlen and \
        inner.network_address in outer


def cidr_ip(c: Any) -> dict[str, str]:
    """``<CIDR>.ip() -> IP``: the address part as written (host bits kept)."""
    a, _ = _net(c)
    return {iplib.KEY: str(a)}


def masked(c: Any) -> dict[str, str]:
    """``<CIDR>.masked() -> CIDR``: host bits cleared."""
    net = _network(c)
    return {KEY: f"{net.network_address}/{net.prefixlen}"}


def prefix_length(c: Any) -> int:
    """``<CIDR>.prefixLength() -> int``."""
    return _net(c)[1]


def to_string(x: Any) -> str:
    """``string(<IP> | <CIDR>) -> string``: the canonical text.

    Raises:
        LibraryError: not an IP or CIDR value.
    """
    if isinstance(x, dict) and KEY in x:
        a, n = _net(x)
        return f"{a}/{n}"
    if isinstance(x, dict) and iplib.KEY in x:
        return iplib.to_string(x)
    raise LibraryError("no such overload: string() of a map")


#: The CEL type names Kubernetes declares for IP and CIDR values (ip.go ``IPType = cel.ObjectType("net.IP")``,
#: cidr.go ``CIDRType = cel.ObjectType("net.CIDR")``), by the reserved key of Tollgate's map representation.
NET_TYPES = {iplib.KEY: "net.IP", KEY: "net.CIDR"}


def net_type(x: Any) -> str:
    """``__tg_net_type(<dyn>) -> string``: ``"net.IP"`` or ``"net.CIDR"`` for an IP or CIDR value, else ``""``.

    The run-time half of the ``type()`` rewrite (:func:`webhook.policy.cel.rewrites.rewrite_source`): Kubernetes'
    ip.go and cidr.go declare opaque types, which cel-expr-python cannot; Tollgate's values are maps with one
    reserved key (:data:`NET_TYPES`).
    """
    if isinstance(x, dict) and len(x) == 1:
        return NET_TYPES.get(next(iter(x)), "")
    return ""


def declarations() -> list[Any]:
    """The CIDR library's functions, plus ``ip(s)``/``<CIDR>.ip()`` and ``string(IP|CIDR)``."""
    smap = T.Map(T.STRING, T.STRING)
    return [
        function("isCIDR", "tg_is_cidr", T.BOOL, [T.STRING], is_cidr, rule=PYTHON_SCALAR),
        function("cidr", "tg_cidr", VALUE, [T.STRING], cidr, rule=PYTHON_PART),
        overloads("ip",
                  cel.Overload("tg_ip", VALUE, [T.STRING], impl=iplib.ip),
                  cel.Overload("tg_cidr_ip", VALUE, [VALUE], is_member=True, impl=cidr_ip), rule=PYTHON_PART),
        member("containsIP", "tg_cidr_contains_ip", T.BOOL, [VALUE, T.DYN], contains_ip, rule=PYTHON_SCALAR),
        member("containsCIDR", "tg_cidr_contains_cidr", T.BOOL, [VALUE, T.DYN], contains_cidr, rule=PYTHON_SCALAR),
        member("masked", "tg_cidr_masked", VALUE, [VALUE], masked, rule=PYTHON_PART),
        member("prefixLength", "tg_cidr_prefix_length", T.INT, [VALUE], prefix_length, rule=PYTHON_SCALAR),
        function("string", "tg_string_library_value", T.STRING, [smap], to_string, rule=PYTHON_TEXT),
        function("__tg_net_type", "tg_net_type", T.STRING, [T.DYN], net_type, rule=PYTHON_SCALAR),
    ]
