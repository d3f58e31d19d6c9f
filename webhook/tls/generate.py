"""Generate a CA and a serving certificate for the webhook (``tollgate certs``).

ECDSA P-256 by default (a TLS handshake costs less CPU than with RSA-2048),
with the SANs the API server dials: ``<service>``, ``<service>.<namespace>``,
``<service>.<namespace>.svc`` and ``<service>.<namespace>.svc.cluster.local``,
plus any extra DNS names or IPs (``localhost``/``127.0.0.1`` for ``--local``).
The CA key is written too, so the CA can be kept and only the serving
certificate reissued (:func:`load_ca` checks a CA before it signs again).
Uses ``cryptography``.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, slots=True)
class CertPaths:
    """Where :func:`write_certs` put the PEM files (``ca.crt``, ``tls.crt``, ``tls.key``, and ``ca.key``)."""

    ca: Path
    cert: Path
    key: Path
    #: The CA's private key (None when the CA was given and its key stays where it is).
    ca_key: Path | None = None


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
             algorithm: str = "ecdsa", ca: tuple[bytes, bytes] | None = None,
             ca_days: int | None = None) -> tuple[bytes, bytes, bytes, bytes]:
    """Make a serving certificate signed by a new self-signed CA, or by ``ca``.

    Args:
        dns_names: SAN DNS names; the first is also the subject CN.
        ip_addresses: SAN IP addresses, e.g. ``["127.0.0.1"]``.
        days: validity of the serving certificate, in days (at least 1); the CA's
            ``notAfter`` caps it.
        algorithm: ``ecdsa`` (P-256) or ``rsa`` (2048 bits).
        ca: ``(ca_pem, ca_key_pem)`` of a CA to sign with (check it with :func:`load_ca` first).
        ca_days: validity of a new CA, in days (default ``days``); a CA that outlives the
            serving certificate lets it be reissued under the same caBundle.

    Returns:
        ``(ca_pem, ca_key_pem, cert_pem, key_pem)`` as PEM bytes.

    Raises:
        ValueError: ``days`` below 1, or an invalid IP address.
    """
    ca_days = days if ca_days is None else ca_days
    if days < 1 or ca_days < 1:
        raise ValueError(f"days must be at least 1, got {min(days, ca_days)}")
    now = dt.datetime.now(dt.UTC)
    ca_pem, ca_key_pem = ca if ca is not None else new_ca(days=ca_days, now=now, algorithm=algorithm)
    cert_pem, key_pem = issue_serving(ca_pem, ca_key_pem, dns_names=dns_names, ip_addresses=ip_addresses, days=days,
                                      now=now, algorithm=algorithm)
    return ca_pem, ca_key_pem, cert_pem, key_pem


def write_certs(out_dir: Path, *, dns_names: list[str], ip_addresses: list[str] = (),  # type: ignore[assignment]
                days: int = 365, algorithm: str = "ecdsa", ca: tuple[bytes, bytes] | None = None,
                ca_days: int | None = None) -> CertPaths:
    """Generate and write ``ca.crt``, ``tls.crt``, ``tls.key`` and (for a new CA) ``ca.key`` under ``out_dir``.

    Each file is replaced atomically (a server hot-reloading the directory never
    reads half a file); the keys have mode 0600. With ``ca`` the CA is copied to
    ``ca.crt`` and its key is not written (it stays where it is kept).

    Args:
        out_dir: the directory (created if missing).
        dns_names: SAN DNS names (:func:`generate`).
        ip_addresses: SAN IP addresses.
        days: validity of the serving certificate, in days.
        algorithm: ``ecdsa`` or ``rsa``.
        ca: ``(ca_pem, ca_key_pem)`` to sign with instead of a new CA.
        ca_days: validity of a new CA, in days.

    Raises:
        OSError: the directory or a file cannot be written.
        ValueError: as :func:`generate`.
    """
    ca_pem, ca_key_pem, cert_pem, key_pem = generate(dns_names=dns_names, ip_addresses=ip_addresses, days=days,
                                                     algorithm=algorithm, ca=ca, ca_days=ca_days)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = CertPaths(out_dir / "ca.crt", out_dir / "tls.crt", out_dir / "tls.key",
                      None if ca is not None else out_dir / "ca.key")
    if paths.ca_key is not None:
        _write_atomically(paths.ca_key, ca_key_pem, 0o600)
    _write_atomically(paths.ca, ca_pem, 0o644)
    _write_atomically(paths.key, key_pem, 0o600)
    _write_atomically(paths.cert, cert_pem, 0o644)
    return paths


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def ca_bundle(ca_pem: bytes) -> str:
    """The ``caBundle`` value for a webhook configuration: base64 of the CA PEM."""
    return base64.b64encode(ca_pem).decode("ascii")


def load_ca(ca_pem: bytes, ca_key_pem: bytes, *, now: float) -> x509.Certificate:
    """Check that a CA can sign serving certificates before it is reused.

    Args:
        ca_pem: the CA certificate (PEM; the first certificate is the CA).
        ca_key_pem: its unencrypted private key (PEM), ECDSA or RSA.
        now: the current time, Unix seconds.

    Returns:
        The CA certificate.

    Raises:
        CertificateRejected: ``malformed`` (not PEM, or an encrypted or unsupported key),
            ``not_a_ca`` (no ``basicConstraints`` CA:TRUE, or a ``keyUsage`` without
            ``keyCertSign``), ``key_mismatch``, ``not_yet_valid`` or ``expired``.
    """
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
        key = serialization.load_pem_private_key(ca_key_pem, password=None)
    except (ValueError, TypeError) as e:
        raise CertificateRejected("malformed", f"CA certificate or key is not a usable PEM: {e}") from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise CertificateRejected("malformed", f"CA key must be ECDSA or RSA, got {type(key).__name__}")
    try:
        is_ca = ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    try:
        can_sign = ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    except x509.ExtensionNotFound:
        can_sign = True
    if not is_ca or not can_sign:
        raise CertificateRejected("not_a_ca", f"{ca.subject.rfc4514_string()} is not a CA certificate "
                                              "(basicConstraints CA:TRUE and keyUsage keyCertSign)")
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != ca.public_key().public_bytes(*spki):
        raise CertificateRejected("key_mismatch", "the CA key does not match the CA certificate's public key")
    if now < ca.not_valid_before_utc.timestamp():
        raise CertificateRejected("not_yet_valid", f"CA is not valid before {ca.not_valid_before_utc.isoformat()}")
    if now > ca.not_valid_after_utc.timestamp():
        raise CertificateRejected("expired", f"CA expired at {ca.not_valid_after_utc.isoformat()}")
    return ca


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
                  now: dt.datetime | None = None, algorithm: str = "ecdsa",
                  ip_addresses: list[str] = ()) -> tuple[bytes, bytes]:  # type: ignore[assignment]
    """A serving certificate for ``dns_names`` signed by the CA ``ca_pem`` / ``ca_key_pem``.

    Args:
        ca_pem: the signing CA certificate (PEM; the first certificate is used).
        ca_key_pem: its private key (PEM).
        dns_names: SAN DNS names; the first is also the subject CN (``tollgate`` when empty).
        days: validity from ``now``, in days (capped at the CA's notAfter).
        now: issue time (UTC); default the current time.
        algorithm: key type of the new certificate.
        ip_addresses: SAN IP addresses.

    Returns:
        ``(cert_pem, key_pem)``.

    Raises:
        ValueError: the key does not load or is not a signing key; an invalid IP address.
    """
    now = now or dt.datetime.now(dt.UTC)
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise ValueError("CA key must be ECDSA or RSA")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    key = _key(algorithm)
    not_after = min(now + dt.timedelta(days=days), ca.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0] if dns_names else "tollgate")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
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
