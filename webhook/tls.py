"""TLS serving with certificate hot reload.

The listening socket keeps one "outer" ``SSLContext`` whose ``sni_callback``
hands every new handshake the *current* context. A reload builds a fresh
context from the files, checks that the key matches the certificate, and
only then swaps it in; a bad or half-written pair is rejected (logged and
counted) and the old one keeps serving. ``load_cert_chain`` is never called
on a live context (a failed in-place load breaks later handshakes). Changes
are found by polling a content hash, since Secret volumes swap symlinks
rather than rewriting files. TLS 1.2 minimum.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from cryptography import x509

log = logging.getLogger("tollgate.tls")


def build_context(cert_file: Path, key_file: Path, *, client_ca: Path | None = None) -> ssl.SSLContext:
    """A fresh server context for the pair (raises ``ssl.SSLError``/``OSError`` if it is bad)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    if client_ca is not None:
        ctx.load_verify_locations(cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def not_after(cert_file: Path) -> float:
    """The certificate's ``notAfter`` as a Unix timestamp (seconds)."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    return cert.not_valid_after_utc.timestamp()


class CertReloader:
    """Serve ``cert_file``/``key_file`` and pick up replacements.

    Args:
        cert_file, key_file: PEM paths (e.g. a mounted ``kubernetes.io/tls`` Secret).
        client_ca: if set, require client certificates signed by it.
        on_reload: called with ``"success"`` or ``"failure"`` after each attempt.

    Raises:
        ssl.SSLError, OSError: at construction, if the initial pair is unusable
        (fail at start-up, not at the first handshake).
    """

    def __init__(self, cert_file: Path, key_file: Path, *, client_ca: Path | None = None,
                 on_reload: Callable[[str], None] | None = None) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca = client_ca
        self._on_reload = on_reload
        self._current = build_context(cert_file, key_file, client_ca=client_ca)
        self._hash = self._digest()
        self.expiry = not_after(cert_file)
        # The outer context carries the first pair for clients that send no SNI
        # before the callback runs; every handshake is switched to _current.
        self.context = build_context(cert_file, key_file, client_ca=client_ca)
        self.context.sni_callback = self._sni

    def _digest(self) -> bytes:
        h = hashlib.sha256()
        for p in (self.cert_file, self.key_file):
            h.update(p.read_bytes())
        return h.digest()

    def _sni(self, sock: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        sock.context = self._current

    def reload_if_changed(self) -> bool | None:
        """Check the files; returns True (swapped), False (rejected) or None (unchanged)."""
        try:
            digest = self._digest()
        except OSError as e:
            log.warning("certificate files unreadable, keeping the current pair: %s", e)
            self._report("failure")
            return False
        if digest == self._hash:
            return None
        try:
            ctx = build_context(self.cert_file, self.key_file, client_ca=self.client_ca)
            expiry = not_after(self.cert_file)
        except (ssl.SSLError, OSError, ValueError) as e:
            log.warning("new certificate pair rejected, keeping the current one: %s", e)
            self._report("failure")
            # Remember the bad content, so it is not retried every poll; a fixed pair changes the hash.
            self._hash = digest
            return False
        self._current, self._hash, self.expiry = ctx, digest, expiry
        log.info("certificate reloaded from %s", self.cert_file)
        self._report("success")
        return True

    def _report(self, result: str) -> None:
        if self._on_reload is not None:
            self._on_reload(result)

    async def watch(self, interval: float = 10.0) -> None:
        """Poll every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()
