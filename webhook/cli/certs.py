"""``tollgate certs``: generate a CA (or reuse one) and a serving certificate, print the caBundle.

    tollgate certs --out-dir DIR [--service S --namespace NS] [--dns-name N ...] [--ip A ...] [--days D]
                   [--ca-cert ca.crt --ca-key ca.key | --new-ca]

Writes ``ca.crt``, ``tls.crt``, ``tls.key`` and, for a new CA, ``ca.key``
(keys mode 0600). A new CA is valid for ``--ca-days`` (10 years), the serving
certificate for ``--days`` (1 year). With ``--ca-cert``/``--ca-key`` the CA is kept: only the
serving certificate is reissued, so the caBundle in the webhook
configurations stays valid (docs/deploying.md). A run into a directory that
already holds ``ca.crt`` and ``ca.key`` keeps that CA the same way (as
``kubeadm init phase certs`` keeps an existing CA); ``--new-ca`` replaces it. Every input a certificate
could not be used with is refused before anything is written (exit 2, one
line): a validity under a day, a name a TLS client would never match, an IP
that is not one, a CA that is not a CA, does not match its key, or has expired.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from webhook.cli.arguments import dns_label, int_in_range, ip_address, san_dns_name
from webhook.cli.command import ExitStatus, Subparsers, UsageError, add_command
from webhook.policy.webhook_configs import WebhookTarget
from webhook.tls import generate as certs

__all__ = ["DEFAULT_CA_DAYS", "DEFAULT_DAYS", "add_parser", "run"]

_DEFAULTS = WebhookTarget()
#: ``--days`` when not given: the serving certificate's validity.
DEFAULT_DAYS = 365
#: ``--ca-days`` when not given: a new CA outlives the serving certificates it signs (kubeadm's CA: 10 years).
DEFAULT_CA_DAYS = 3650


def add_parser(sub: Subparsers) -> None:
    """Register ``tollgate certs``."""
    p = add_command(sub, "certs", run, help="generate a CA and serving certificate; print the caBundle",
                    description="Write ca.crt, ca.key, tls.crt and tls.key (ECDSA P-256 by default) for the webhook "
                                "Service and print the base64 caBundle for the webhook configurations. With "
                                "--ca-cert and --ca-key, keep that CA and reissue only the serving certificate.")
    p.add_argument("--out-dir", type=Path, required=True, help="directory to write ca.crt, ca.key, tls.crt, tls.key")
    p.add_argument("--service", type=dns_label, default=_DEFAULTS.service,
                   help=f"Service name (default {_DEFAULTS.service})")
    p.add_argument("--namespace", type=dns_label, default=_DEFAULTS.namespace,
                   help=f"Service namespace (default {_DEFAULTS.namespace})")
    p.add_argument("--dns-name", type=san_dns_name, action="append", default=[],
                   help="extra SAN DNS name (repeatable)")
    p.add_argument("--ip", type=ip_address, action="append", default=[], help="extra SAN IP address (repeatable)")
    p.add_argument("--days", type=int_in_range(1, None), default=DEFAULT_DAYS,
                   help=f"serving certificate validity in days, at least 1 (default {DEFAULT_DAYS}; capped at the "
                        "CA's expiry)")
    p.add_argument("--ca-days", type=int_in_range(1, None), default=DEFAULT_CA_DAYS,
                   help=f"validity of a new CA in days (default {DEFAULT_CA_DAYS})")
    p.add_argument("--algorithm", choices=("ecdsa", "rsa"), default="ecdsa", help="key type (default ecdsa)")
    p.add_argument("--ca-cert", type=Path, metavar="FILE",
                   help="reuse this CA certificate (PEM, e.g. ca.crt of an earlier run) instead of a new CA")
    p.add_argument("--ca-key", type=Path, metavar="FILE", help="the reused CA's private key (PEM, e.g. ca.key)")
    p.add_argument("--new-ca", action="store_true",
                   help="replace the CA already in --out-dir (the caBundle every webhook configuration carries then "
                        "changes); without it a CA found there is kept")


def _read(flag: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read: {e.strerror or e}") from None


def _reused_ca(args: argparse.Namespace) -> tuple[bytes, bytes] | None:
    """The CA to sign with (checked), or None for a new one: ``--ca-cert``/``--ca-key``, else the one in --out-dir."""
    if args.new_ca and (args.ca_cert is not None or args.ca_key is not None):
        raise UsageError("--new-ca and --ca-cert/--ca-key contradict each other")
    if args.ca_cert is None and args.ca_key is None:
        found = (args.out_dir / "ca.crt", args.out_dir / "ca.key")
        if args.new_ca or not all(p.is_file() for p in found):
            if found[1].exists():
                print(f"tollgate certs: replacing the CA in {args.out_dir} (--new-ca): every webhook "
                      "configuration needs the new caBundle", file=sys.stderr)
            return None
        args.ca_cert, args.ca_key = found
        print(f"tollgate certs: keeping the CA in {args.out_dir} (its caBundle stays valid; --new-ca replaces it)",
              file=sys.stderr)
    if args.ca_cert is None or args.ca_key is None:
        raise UsageError("--ca-cert and --ca-key go together")
    ca_pem, ca_key_pem = _read("--ca-cert", args.ca_cert), _read("--ca-key", args.ca_key)
    try:
        ca = certs.load_ca(ca_pem, ca_key_pem, now=time.time())
    except certs.CertificateRejected as e:
        hint = " (--new-ca replaces it)" if args.ca_cert.parent == args.out_dir else ""
        raise UsageError(f"--ca-cert {args.ca_cert}: cannot sign with this CA: {e}{hint}") from None
    return ca.public_bytes(serialization.Encoding.PEM), ca_key_pem


def run(args: argparse.Namespace) -> int:
    """``tollgate certs``: write the files, print the caBundle; exit 0, or 2 on unusable input (nothing written)."""
    ca = _reused_ca(args)
    names = certs.service_dns_names(args.service, args.namespace) + args.dns_name
    try:
        paths = certs.write_certs(args.out_dir, dns_names=names, ip_addresses=args.ip, days=args.days,
                                  algorithm=args.algorithm, ca=ca, ca_days=args.ca_days)
    except OSError as e:
        raise UsageError(f"--out-dir {args.out_dir}: {e.strerror or e}") from None
    ca_expiry = x509.load_pem_x509_certificate(paths.ca.read_bytes()).not_valid_after_utc
    if ca_expiry < dt.datetime.now(dt.UTC) + dt.timedelta(days=args.days - 1):
        print(f"tollgate certs: warning: the CA expires at {ca_expiry.isoformat()}: the serving certificate is "
              f"valid until then, not {args.days} days", file=sys.stderr)
    written = [p for p in (paths.ca, paths.ca_key, paths.cert, paths.key) if p is not None]
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    print(certs.ca_bundle(paths.ca.read_bytes()))
    return ExitStatus.OK

