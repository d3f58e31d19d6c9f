"""Generate a CA and a serving certificate for the webhook (``tollgate certs``).

ECDSA P-256 by default (a full TLS handshake costs ~1.3x less CPU than
RSA-2048; see ``../shared/bench-reference``), with the SANs the API server
dials: ``<service>``, ``<service>.<namespace>``, ``<service>.<namespace>.svc``
and ``<service>.<namespace>.svc.cluster.local``, plus any extra DNS names or
IPs (``localhost``/``127.0.0.1`` for ``--local``). Uses ``cryptography``.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, slots=True)
class CertPaths:
    """Where :func:`write_certs` put the PEM files (``ca.crt``, ``tls.crt``, ``tls.key``)."""

    ca: Path
    cert: Path
    key: Path


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The DNS names a Service is reached by from the API server."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def _key(algorithm: str):  # type: ignore[no-untyped-def]
    if algorithm == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ValueError(f"unknown key algorithm {algorithm!r} (ecdsa or rsa)")


def generate(*, dns_names: list[str], ip_addresses: list[str] = (), days: int = 365,  # type: ignore[assignment]
             algorithm: str = "ecdsa") -> tuple[bytes, bytes, bytes]:
    """Make a self-signed CA and a serving certificate signed by it.

    Args:
        dns_names: SAN DNS names; the first is also the subject CN.
        ip_addresses: SAN IP addresses, e.g. ``["127.0.0.1"]``.
        days: validity of both certificates, in days.
        algorithm: ``ecdsa`` (P-256) or ``rsa`` (2048 bits).

    Returns:
        ``(ca_pem, cert_pem, key_pem)`` as PEM bytes.
    """
    now = dt.datetime.now(dt.UTC)
    ca_pem, ca_key_pem = new_ca(days=days, now=now, algorithm=algorithm)
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_name = ca.subject
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):  # pragma: no cover - new_ca's
        raise TypeError(f"unexpected CA key type {type(ca_key).__name__}")
    key = _key(algorithm)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0] if dns_names else "tollgate")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


def write_certs(out_dir: Path, *, dns_names: list[str], ip_addresses: list[str] = (),  # type: ignore[assignment]
                days: int = 365, algorithm: str = "ecdsa") -> CertPaths:
    """Generate and write ``ca.crt``, ``tls.crt`` and ``tls.key`` (mode 0600) under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ca_pem, cert_pem, key_pem = generate(dns_names=dns_names, ip_addresses=ip_addresses, days=days,
                                         algorithm=algorithm)
    paths = CertPaths(out_dir / "ca.crt", out_dir / "tls.crt", out_dir / "tls.key")
    paths.ca.write_bytes(ca_pem)
    paths.cert.write_bytes(cert_pem)
    fd = os.open(paths.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    return paths


def ca_bundle(ca_pem: bytes) -> str:
    """The ``caBundle`` value for a webhook configuration: base64 of the CA PEM."""
    return base64.b64encode(ca_pem).decode("ascii")


# -- building blocks for self-managed certificates (webhook/kube/managed_certs.py) -------------------------------------


def new_ca(*, days: int, now: dt.datetime | None = None, algorithm: str = "ecdsa",
           common_name: str = "tollgate-ca") -> tuple[bytes, bytes]:
    """A self-signed CA certificate and its key.

    Args:
        days: validity from ``now``, in days.
        now: issue time (UTC); default the current time. ``notBefore`` is
            backdated 5 minutes for clock skew, as :func:`generate` does.
        algorithm: ``ecdsa`` (P-256) or ``rsa`` (2048 bits).
        common_name: subject CN. Key identifiers tell CAs of the same name apart.

    Returns:
        ``(ca_pem, ca_key_pem)``; the key is unencrypted PKCS#8 PEM.
    """
    now = now or dt.datetime.now(dt.UTC)
    key = _key(algorithm)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return ca.public_bytes(pem), key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption())


def issue_serving(ca_pem: bytes, ca_key_pem: bytes, *, dns_names: list[str], days: int,
                  now: dt.datetime | None = None, algorithm: str = "ecdsa") -> tuple[bytes, bytes]:
    """A serving certificate for ``dns_names`` signed by the CA ``ca_pem`` / ``ca_key_pem``.

    Args:
        ca_pem: the signing CA certificate (PEM; the first certificate is used).
        ca_key_pem: its private key (PEM).
        dns_names: SAN DNS names; the first is also the subject CN.
        days: validity from ``now``, in days (capped at the CA's notAfter).
        now: issue time (UTC); default the current time.
        algorithm: key type of the new certificate.

    Returns:
        ``(cert_pem, key_pem)``.

    Raises:
        ValueError: the key does not load or is not a signing key.
    """
    now = now or dt.datetime.now(dt.UTC)
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise ValueError("CA key must be ECDSA or RSA")
    key = _key(algorithm)
    not_after = min(now + dt.timedelta(days=days), ca.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return cert.public_bytes(pem), key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption())


def load_pem_certificates(pem: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle, in order (``[]`` for empty input).

    Raises:
        ValueError: the data is not PEM certificates.
    """
    return x509.load_pem_x509_certificates(pem) if pem.strip() else []


def issued_by(cert_pem: bytes, ca_pem: bytes) -> bool:
    """Whether the first certificate of ``cert_pem`` was signed by the first of ``ca_pem``."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    ca = x509.load_pem_x509_certificate(ca_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


class CertificateRejected(ValueError):
    """A certificate/key pair that must not be served.

    Attributes:
        reason: ``malformed`` (not PEM, no certificate or no key),
            ``key_mismatch`` (the key does not belong to the certificate),
            ``not_yet_valid`` (``notBefore`` is in the future) or ``expired``
            (``notAfter`` has passed).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CertificateInfo:
    """The served (leaf) certificate's identity and validity window (Unix seconds)."""

    subject: str
    serial: int
    not_before: float
    not_after: float


def check_pair(cert_pem: bytes, key_pem: bytes, *, now: float) -> CertificateInfo:
    """Validate a serving pair before it is loaded.

    Args:
        cert_pem: ``tls.crt``: the leaf certificate first, optionally followed
            by intermediates (as in a ``kubernetes.io/tls`` Secret).
        key_pem: ``tls.key``: the unencrypted private key (PKCS#1, SEC1 or PKCS#8 PEM).
        now: the current time, Unix seconds.

    Returns:
        The leaf certificate's :class:`CertificateInfo`.

    Raises:
        CertificateRejected: malformed, key mismatch, not yet valid, or
            expired. A TLS client (the API server's Go ``crypto/tls``) refuses
            a certificate outside ``notBefore``..``notAfter``, so serving one
            would fail every handshake.
    """
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise CertificateRejected("malformed", f"certificate or key is not a usable PEM: {e}") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        raise CertificateRejected("key_mismatch", "the private key does not match the certificate's public key")
    info = CertificateInfo(cert.subject.rfc4514_string(), cert.serial_number,
                           cert.not_valid_before_utc.timestamp(), cert.not_valid_after_utc.timestamp())
    if now < info.not_before:
        raise CertificateRejected("not_yet_valid", f"certificate is not valid before "
                                                   f"{cert.not_valid_before_utc.isoformat()}")
    if now > info.not_after:
        raise CertificateRejected("expired", f"certificate expired at {cert.not_valid_after_utc.isoformat()}")
    return info
