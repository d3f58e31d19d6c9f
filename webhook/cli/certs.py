"""``tollgate certs``: generate a CA and a serving certificate, print the caBundle."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook.cli.command import ExitStatus, Subparsers, UsageError, add_command
from webhook.tls import generate as certs

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate certs``."""
    p = add_command(sub, "certs", run, help="generate a CA and serving certificate; print the caBundle",
                       description="Write ca.crt, tls.crt and tls.key (ECDSA P-256 by default) for the webhook "
                                   "Service and print the base64 caBundle for the webhook configurations.")
    p.add_argument("--out-dir", type=Path, required=True, help="directory to write ca.crt, tls.crt, tls.key")
    p.add_argument("--service", default="tollgate", help="Service name (default tollgate)")
    p.add_argument("--namespace", default="tollgate-system", help="Service namespace (default tollgate-system)")
    p.add_argument("--dns-name", action="append", default=[], help="extra SAN DNS name (repeatable)")
    p.add_argument("--ip", action="append", default=[], help="extra SAN IP address (repeatable)")
    p.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    p.add_argument("--algorithm", choices=("ecdsa", "rsa"), default="ecdsa", help="key type (default ecdsa)")


def run(args: argparse.Namespace) -> int:
    """``tollgate certs``: write the files, print the caBundle; exit 0, or 2 when the directory is unusable."""
    names = certs.service_dns_names(args.service, args.namespace) + args.dns_name
    try:
        paths = certs.write_certs(args.out_dir, dns_names=names, ip_addresses=args.ip, days=args.days,
                                  algorithm=args.algorithm)
    except OSError as e:
        raise UsageError(f"--out-dir {args.out_dir}: {e.strerror or e}") from None
    print(f"wrote {paths.ca}, {paths.cert}, {paths.key}", file=sys.stderr)
    print(certs.ca_bundle(paths.ca.read_bytes()))
    return ExitStatus.OK
