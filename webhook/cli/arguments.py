"""Argument types of the ``tollgate`` subcommands: a bad value is refused by argparse, in one line, exit 2.

Each function is an ``argparse`` ``type=``: it returns the parsed value or
raises :class:`argparse.ArgumentTypeError` with the reason, which
:class:`webhook.cli.command.OneLineParser` prints as
``tollgate CMD: error: argument --flag: REASON (see tollgate CMD --help)``.
The rules are the API server's, so what the CLI accepts the cluster accepts.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from collections.abc import Callable

__all__ = ["dns_label", "dns_subdomain", "int_in_range", "ip_address", "port", "san_dns_name", "seconds"]

#: RFC 1123 label, as Kubernetes validates a Service or Namespace name (``IsDNS1123Label``).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: A label of a certificate's DNS name: letters of either case, as Go's ``crypto/x509`` matches them.
_SAN_LABEL = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?")


def int_in_range(low: int, high: int | None, what: str = "") -> Callable[[str], int]:
    """An integer type accepting ``low``..``high`` (no upper bound when ``high`` is None).

    Args:
        low: the smallest accepted value.
        high: the largest accepted value, or None.
        what: why the bounds are what they are, appended to the message (e.g. the API server's rule).
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: not a whole number") from None
        if value < low or (high is not None and value > high):
            bounds = f"{low}-{high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"invalid value {value}: must be {bounds}{f' ({what})' if what else ''}")
        return value

    return parse


def port(text: str) -> int:
    """A TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: not a number") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"invalid port {value}: must be 1-65535")
    return value


def ip_address(text: str) -> str:
    """An IPv4 or IPv6 address (a certificate's IP SAN), returned in its canonical form."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid IP address {text!r}") from None


def dns_label(text: str) -> str:
    """An RFC 1123 label (a Service or Namespace name): lower-case alphanumerics and '-', at most 63."""
    if len(text) > 63 or not _DNS_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"invalid name {text!r}: must be a DNS label (RFC 1123: at most 63 lower-case letters, digits or '-', "
            "starting and ending with a letter or digit)")
    return text


def dns_subdomain(text: str) -> str:
    """An RFC 1123 subdomain (an object or ServiceAccount name): dot-separated labels, at most 253 characters."""
    if len(text) > 253 or not all(len(part) <= 63 and _DNS_LABEL.fullmatch(part) for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"invalid name {text!r}: must be a DNS subdomain (RFC 1123: lower-case letters, digits, '-' and '.', "
            "at most 253)")
    return text


def san_dns_name(text: str) -> str:
    """A certificate DNS name: dot-separated labels (any case), optionally starting with a ``*.`` wildcard."""
    name = text.removeprefix("*.")
    labels = name.split(".")
    if not name or len(text) > 253 or not all(len(part) <= 63 and _SAN_LABEL.fullmatch(part) for part in labels):
        raise argparse.ArgumentTypeError(
            f"invalid DNS name {text!r}: must be dot-separated labels of letters, digits and '-' (a leading '*.' "
            "is allowed), as a TLS client matches them")
    return text


def seconds(*, allow_zero: bool) -> Callable[[str], float]:
    """A duration in seconds: a finite number above 0 (or at least 0 when ``allow_zero``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: not a number of seconds") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            bound = "at least 0" if allow_zero else "above 0"
            raise argparse.ArgumentTypeError(f"invalid value {text!r}: must be {bound}")
        return value

    return parse
