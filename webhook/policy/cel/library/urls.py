"""Kubernetes URL library: ``url(s)``, ``isURL(s)`` and the URL getters (pure; no I/O).

Follows ``k8s.io/apiserver/pkg/cel/library/urls.go`` (Kubernetes 1.24+), which parses with Go's
``net/url.ParseRequestURI``: an absolute URI (``https://host/path?q``, ``mailto:x``) or an absolute
path (``/p``); no fragment splitting; the port must be digits; host characters are checked.
This module reimplements that parser rather than Python's ``urllib`` (which differs: it accepts
``https://a:b:c/`` and does not escape paths).

A URL value is ``{"@url": <the string as given>}``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from webhook.policy.cel.cost import PYTHON_PART, PYTHON_QUERY, PYTHON_SCALAR
from webhook.policy.cel.library._decl import VALUE, LibraryError, T, function, member

KEY = "@url"

_UNRESERVED = set(string.ascii_letters + string.digits + "-_.~")
_HOST_OK = set("!$&'()*+,;=:[]<>\"")
_HEX = set(string.hexdigits)


@dataclass(frozen=True, slots=True)
class ParsedURL:
    """The parts Go's ``url.URL`` keeps, as ``ParseRequestURI`` fills them."""

    scheme: str
    opaque: str
    user: str
    host: str
    path: str
    raw_path: str
    raw_query: str


def _should_escape(c: str, mode: str) -> bool:
    if c in _UNRESERVED:
        return False
    if mode == "host" and c in _HOST_OK:
        return False
    if c in "$&+,/:;=?@":
        return c == "?" if mode == "path" else mode != "host"
    return True


def _is_escape(s: str, i: int) -> bool:
    pair = s[i + 1:i + 3]
    return len(pair) == 2 and all(c in _HEX for c in pair)


def _unescape(s: str, mode: str) -> str:
    i = 0
    while i < len(s):
        c = s[i]
        if c == "%":
            if not _is_escape(s, i):
                raise LibraryError(f"invalid URL escape {s[i:i + 3]!r}")
            i += 3
            continue
        if mode == "host" and ord(c) < 0x80 and _should_escape(c, "host"):
            raise LibraryError(f"invalid character {c!r} in host name")
        i += 1
    return unquote_bytes(s)


def unquote_bytes(s: str) -> str:
    """Percent-decode ``s`` (no ``+`` handling), keeping invalid UTF-8 as replacement characters."""
    out = bytearray()
    i = 0
    raw = s.encode()
    while i < len(raw):
        if raw[i] == 0x25 and i + 3 <= len(raw):
            out.append(int(raw[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "replace")


def _escape(s: str, mode: str) -> str:
    out = []
    for ch in s:
        if ord(ch) < 0x80 and not _should_escape(ch, mode):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(out)


def _valid_port(port: str) -> bool:
    if port == "":
        return True
    return port[0] == ":" and all(c in string.digits for c in port[1:])


def _parse_host(host: str) -> str:
    if host.startswith("["):
        end = host.rfind("]")
        if end < 0:
            raise LibraryError("missing ']' in host")
        if not _valid_port(host[end + 1:]):
            raise LibraryError(f"invalid port {host[end + 1:]!r} after host")
    else:
        i = host.rfind(":")
        if i >= 0 and not _valid_port(host[i:]):
            raise LibraryError(f"invalid port {host[i:]!r} after host")
    return _unescape(host, "host")


def parse_request_uri(raw: str) -> ParsedURL:
    """Parse like Go's ``url.ParseRequestURI``.

    Raises:
        LibraryError: what Go's parser rejects (empty, control characters, relative reference,
            bad scheme, bad port, bad escape, bad host character).
    """
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise LibraryError("net/url: invalid control character in URL")
    if raw == "":
        raise LibraryError("empty url")
    scheme, rest = "", raw
    for i, c in enumerate(raw):
        if c.isascii() and c.isalpha():
            continue
        if c.isascii() and (c.isdigit() or c in "+-."):
            if i == 0:
                break
            continue
        if c == ":":
            if i == 0:
                raise LibraryError("missing protocol scheme")
            scheme, rest = raw[:i].lower(), raw[i + 1:]
        break
    rest, _, raw_query = rest.partition("?") if "?" in rest else (rest, "", "")
    if not rest.startswith("/"):
        if scheme:
            return ParsedURL(scheme, rest, "", "", "", "", raw_query)
        raise LibraryError("invalid URI for request")
    user, host = "", ""
    if scheme and rest.startswith("//"):
        authority, slash, path_rest = rest[2:].partition("/")
        rest = slash + path_rest
        at = authority.rfind("@")
        if at >= 0:
            user = authority[:at]
            _unescape(user, "user")
            authority = authority[at + 1:]
        host = _parse_host(authority)
    path = _unescape(rest, "path")
    raw_path = "" if _escape(path, "path") == rest else rest
    return ParsedURL(scheme, "", user, host, path, raw_path, raw_query)


def is_url(text: str) -> bool:
    """``isURL(<string>) -> bool``."""
    try:
        parse_request_uri(text)
    except LibraryError:
        return False
    return True


def url(text: str) -> dict[str, str]:
    """``url(<string>) -> URL``.

    Raises:
        LibraryError: not a URL ``ParseRequestURI`` accepts.
    """
    try:
        parse_request_uri(text)
    except LibraryError as e:
        raise LibraryError(f"URL parse error during conversion from string: {e}") from None
    return {KEY: text}


def _get(u: Any) -> ParsedURL:
    if not (isinstance(u, dict) and KEY in u):
        raise LibraryError("no such overload: expected a URL")
    return parse_request_uri(u[KEY])


def get_scheme(u: Any) -> str:
    """``<URL>.getScheme() -> string`` (lower-cased, as Go stores it)."""
    return _get(u).scheme


def get_host(u: Any) -> str:
    """``<URL>.getHost() -> string``: host and port, IPv6 literals in brackets."""
    return _get(u).host


def get_hostname(u: Any) -> str:
    """``<URL>.getHostname() -> string``: without port and brackets."""
    host = _get(u).host
    if host.startswith("["):
        return host[1:host.rfind("]")]
    i = host.rfind(":")
    return host[:i] if i >= 0 else host


def get_port(u: Any) -> str:
    """``<URL>.getPort() -> string``: the port digits, or ``""``."""
    host = _get(u).host
    if host.startswith("["):
        host = host[host.rfind("]") + 1:]
    i = host.rfind(":")
    return host[i + 1:] if i >= 0 else ""


def get_escaped_path(u: Any) -> str:
    """``<URL>.getEscapedPath() -> string`` as Go's ``URL.EscapedPath`` (``/with%20space/``)."""
    p = _get(u)
    if p.raw_path and all(c in _HEX or c == "%" or not _should_escape(c, "path") or c in "!$&'()*+,;=:@[]"
                          for c in p.raw_path):
        try:
            if _unescape(p.raw_path, "path") == p.path:
                return p.raw_path
        except LibraryError:
            pass
    if p.path == "*":
        return "*"
    return _escape(p.path, "path")


def get_query(u: Any) -> dict[str, list[str]]:
    """``<URL>.getQuery() -> map<string, list<string>>`` as Go's ``url.ParseQuery`` (bad pairs skipped)."""
    out: dict[str, list[str]] = {}
    for part in _get(u).raw_query.split("&"):
        if part == "" or ";" in part:
            continue
        key, _, value = part.partition("=")
        try:
            k, v = _query_unescape(key), _query_unescape(value)
        except LibraryError:
            continue
        out.setdefault(k, []).append(v)
    return out


def _query_unescape(s: str) -> str:
    for i, c in enumerate(s):
        if c == "%" and not _is_escape(s, i):
            raise LibraryError("invalid escape")
    return unquote_plus(s)


def declarations() -> list[Any]:
    """The URL library's functions."""
    return [
        function("url", "tg_url", VALUE, [T.STRING], url, rule=PYTHON_PART),
        function("isURL", "tg_is_url", T.BOOL, [T.STRING], is_url, rule=PYTHON_SCALAR),
        member("getScheme", "tg_url_get_scheme", T.STRING, [VALUE], get_scheme, rule=PYTHON_PART),
        member("getHost", "tg_url_get_host", T.STRING, [VALUE], get_host, rule=PYTHON_PART),
        member("getHostname", "tg_url_get_hostname", T.STRING, [VALUE], get_hostname, rule=PYTHON_PART),
        member("getPort", "tg_url_get_port", T.STRING, [VALUE], get_port, rule=PYTHON_PART),
        member("getEscapedPath", "tg_url_get_escaped_path", T.STRING, [VALUE], get_escaped_path, rule=PYTHON_PART),
        member("getQuery", "tg_url_get_query", T.Map(T.STRING, T.List(T.STRING)), [VALUE], get_query,
               rule=PYTHON_QUERY),
    ]
