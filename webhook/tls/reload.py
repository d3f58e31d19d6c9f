"""TLS serving with certificate hot reload.

The listening socket keeps one "outer" ``SSLContext`` whose ``sni_callback``
hands every new handshake the *current* context. A reload validates the new
pair (:func:`webhook.tls.generate.check_pair`: parseable, key matches, inside
``notBefore``..``notAfter``), builds a fresh context from the files, and only
then swaps it in; a bad, half-written, expired or not-yet-valid pair is
rejected (logged and counted) and the old one keeps serving.
``load_cert_chain`` is never called on a live context (a failed in-place load
breaks later handshakes). Changes are found by polling a content hash, since
Secret volumes swap symlinks rather than rewriting files. TLS 1.2 minimum.

With a client CA the handshake *requests* a client certificate
(``CERT_OPTIONAL``: one that is sent must verify, but none is required), so
the kubelet's probes connect without one; ``webhook.admission.server``
demands a verified certificate on ``/validate`` and ``/mutate``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509

from webhook.tls.generate import CertificateInfo, CertificateRejected, check_pair

log = logging.getLogger("tollgate.tls")

#: ``certificate_status`` reports ``expiringSoon`` this many days before ``notAfter``.
EXPIRY_WARNING_DAYS = 7.0


def build_context(cert_file: Path, key_file: Path, *, client_ca: Path | None = None) -> ssl.SSLContext:
    """A fresh server context for the pair (raises ``ssl.SSLError``/``OSError`` if it is bad).

    With ``client_ca`` the context requests and verifies client certificates
    but does not require one (``CERT_OPTIONAL``); the admission routes
    enforce one per path.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    if client_ca is not None:
        ctx.load_verify_locations(cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def not_after(cert_file: Path) -> float:
    """The certificate's ``notAfter`` as a Unix timestamp (seconds)."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    return cert.not_valid_after_utc.timestamp()


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


class CertReloader:
    """Serve ``cert_file``/``key_file`` and pick up replacements.

    Args:
        cert_file, key_file: PEM paths (e.g. a mounted ``kubernetes.io/tls`` Secret).
        client_ca: if set, request client certificates and verify them against it.
        on_reload: called with ``"success"``, ``"rejected"`` (the new pair was
            read but refused: malformed, key mismatch, expired, not yet valid)
            or ``"failure"`` (the files could not be read) after each attempt.
        clock: wall-clock Unix seconds (tests).
        expiry_warning_days: :meth:`certificate_status` flags ``expiringSoon``
            this many days before ``notAfter``.

    Raises:
        CertificateRejected, ssl.SSLError, OSError: at construction, if the
        initial pair is unusable (fail at start-up, not at the first handshake).
    """

    def __init__(self, cert_file: Path, key_file: Path, *, client_ca: Path | None = None,
                 on_reload: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time,
                 expiry_warning_days: float = EXPIRY_WARNING_DAYS) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca = client_ca
        self.expiry_warning_days = expiry_warning_days
        self._on_reload = on_reload
        self._clock = clock
        cert_pem, key_pem = self._read()
        self.info: CertificateInfo = check_pair(cert_pem, key_pem, now=clock())
        self._current = build_context(cert_file, key_file, client_ca=client_ca)
        self._hash = self._digest(cert_pem, key_pem)
        self.last_reload: dict[str, Any] | None = None
        # The outer context carries the first pair for clients that send no SNI
        # before the callback runs; every handshake is switched to _current.
        self.context = build_context(cert_file, key_file, client_ca=client_ca)
        self.context.sni_callback = self._sni

    @property
    def expiry(self) -> float:
        """The served certificate's ``notAfter``, Unix seconds."""
        return self.info.not_after

    def _read(self) -> tuple[bytes, bytes]:
        return self.cert_file.read_bytes(), self.key_file.read_bytes()

    @staticmethod
    def _digest(cert_pem: bytes, key_pem: bytes) -> bytes:
        return hashlib.sha256(cert_pem + b"\0" + key_pem).digest()

    def _sni(self, sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        sock.context = self._current

    def reload_if_changed(self) -> bool | None:
        """Check the files; returns True (swapped), False (rejected or unreadable) or None (unchanged).

        A rejected pair is not retried until the files change again, except a
        not-yet-valid one, which is retried every poll until it becomes valid.
        """
        try:
            cert_pem, key_pem = self._read()
        except OSError as e:
            log.warning("certificate files unreadable, keeping the current pair: %s", e)
            self._report("failure", "unreadable")
            return False
        digest = self._digest(cert_pem, key_pem)
        if digest == self._hash:
            return None
        try:
            info = check_pair(cert_pem, key_pem, now=self._clock())
            ctx = build_context(self.cert_file, self.key_file, client_ca=self.client_ca)
        except CertificateRejected as e:
            return self._reject(digest, e.reason, str(e), remember=e.reason != "not_yet_valid")
        except (ssl.SSLError, OSError, ValueError) as e:
            return self._reject(digest, "malformed", str(e), remember=True)
        if self._digest(*self._read()) != digest:
            return None  # replaced while loading: the next poll sees the final content
        self._current, self._hash, self.info = ctx, digest, info
        log.info("certificate reloaded from %s", self.cert_file,
                 extra={"serial": info.serial, "notAfter": _iso(info.not_after)})
        self._report("success", "")
        return True

    def _reject(self, digest: bytes, reason: str, detail: str, *, remember: bool) -> bool:
        log.warning("new certificate pair rejected, keeping the current one: %s", detail, extra={"reason": reason})
        self._report("rejected", reason)
        if remember:
            # Remember the bad content, so it is not retried every poll; a fixed pair changes the hash.
            self._hash = digest
        return False

    def _report(self, result: str, reason: str) -> None:
        self.last_reload = {"result": result, "reason": reason, "time": _iso(self._clock())}
        if self._on_reload is not None:
            self._on_reload(result)

    def certificate_status(self, now: float | None = None) -> dict[str, Any]:
        """The served certificate for ``/readyz`` detail (JSON-ready).

        Args:
            now: Unix seconds (default: the clock).

        Returns:
            ``{"subject", "serial" (hex), "notBefore", "notAfter" (RFC 3339 UTC),
            "expiresInSeconds", "expired", "expiringSoon" (within
            ``expiry_warning_days`` of ``notAfter``), "warningDays",
            "lastReload": {"result", "reason", "time"} | None}``.
        """
        now = self._clock() if now is None else now
        left = self.info.not_after - now
        return {
            "subject": self.info.subject, "serial": f"{self.info.serial:x}",
            "notBefore": _iso(self.info.not_before), "notAfter": _iso(self.info.not_after),
            "expiresInSeconds": round(left, 3), "expired": left < 0,
            "expiringSoon": left < self.expiry_warning_days * 86400.0, "warningDays": self.expiry_warning_days,
            "lastReload": self.last_reload,
        }

    async def watch(self, interval: float = 10.0) -> None:
        """Poll every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()
