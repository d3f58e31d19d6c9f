"""With ``--client-ca`` the probes need no client certificate, admission does.

A real TLS listener runs ``create_app`` with ``Settings.client_ca``; the
handshake requests a client certificate (CERT_OPTIONAL) and the admission
routes demand a verified one (401 without).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.component.server.conftest import serve_tls
from tests.component.server.test_admission_tls import pod_create, review
from tests.fakeapi.server import FakeApiServer
from webhook.kube.client import api_client_for_url
from webhook.server.app import create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs


def client_pki(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a clientAuth certificate signed by it: (ca.crt, client.crt, client.key)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = (directory / f"{name}-ca.crt", directory / f"{name}.crt", directory / f"{name}.key")
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem))
    paths[2].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return paths


@pytest.fixture
async def mtls(tmp_path: Path) -> AsyncIterator[tuple[str, Path, Path]]:
    """(url, server CA, tmp dir) of create_app served with --client-ca = the apiserver client CA."""
    serving = certs.write_certs(tmp_path / "serving", dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    client_ca, _, _ = client_pki(tmp_path, "apiserver")
    async with fake_cluster() as api:
        app = create_app(Settings(cert_file=serving.cert, key_file=serving.key, client_ca=client_ca,
                                  write_status=False, max_request_bytes=1024 * 1024, manage_webhooks=False,
                                  eval_workers=0), api_client=api)
        runner, port = await serve_tls(app)
        yield f"https://localhost:{port}", serving.ca, tmp_path
        await runner.cleanup()


@contextlib.asynccontextmanager
async def fake_cluster() -> AsyncIterator[Any]:
    """An ApiClient on a fake API server holding the ``default`` Namespace."""
    fake = FakeApiServer()
    await fake.start()
    fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    api = api_client_for_url(fake.url)
    try:
        yield api
    finally:
        await api.close()
        await fake.stop()


def client_context(server_ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(server_ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


async def get(url: str, ctx: ssl.SSLContext, method: str = "GET", **kw: object) -> tuple[int, str]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session, \
            session.request(method, url, **kw) as resp:  # type: ignore[arg-type]
        return resp.status, await resp.text()


async def test_probes_answer_without_a_client_certificate(mtls: tuple[str, Path, Path]) -> None:
    url, server_ca, _ = mtls
    ctx = client_context(server_ca)
    assert (await get(url + "/healthz", ctx))[0] == 200
    status, _ = await get(url + "/readyz", ctx)
    assert status in (200, 503)  # answered over TLS without a certificate (readiness itself is the app's)


async def test_admission_without_a_client_certificate_is_401(mtls: tuple[str, Path, Path]) -> None:
    url, server_ca, _ = mtls
    for path in ("/validate", "/mutate"):
        status, text = await get(url + path, client_context(server_ca), "POST", json=review(pod_create()))
        assert status == 401
        assert "client certificate" in text


async def test_admission_with_the_apiservers_certificate_is_served(mtls: tuple[str, Path, Path]) -> None:
    url, server_ca, tmp = mtls
    _, cert, key = (tmp / "apiserver-ca.crt", tmp / "apiserver.crt", tmp / "apiserver.key")
    status, text = await get(url + "/validate", client_context(server_ca, cert, key), "POST",
                             json=review(pod_create()))
    assert status == 200
    assert '"uid":"uid-web"' in text


async def test_a_certificate_from_another_ca_fails_the_handshake(mtls: tuple[str, Path, Path]) -> None:
    url, server_ca, tmp = mtls
    _, cert, key = client_pki(tmp, "stranger")
    with pytest.raises(aiohttp.ClientError):
        await get(url + "/healthz", client_context(server_ca, cert, key))


async def test_plain_http_on_an_admission_server_without_client_ca_needs_no_certificate(tmp_path: Path) -> None:
    # Without --client-ca nothing changes: no certificate is asked for or demanded.
    serving = certs.write_certs(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    async with fake_cluster() as api:
        app: web.Application = create_app(
            Settings(cert_file=serving.cert, key_file=serving.key, write_status=False, max_request_bytes=1024 * 1024,
                     manage_webhooks=False, eval_workers=0),
            api_client=api)
        runner, port = await serve_tls(app)
        try:
            async def synced() -> bool:
                status, _ = await get(f"https://localhost:{port}/readyz", client_context(serving.ca))
                return status == 200

            for _ in range(200):  # reviews get 503 until the policy caches sync
                if await synced():
                    break
                await asyncio.sleep(0.02)
            status, _ = await get(f"https://localhost:{port}/validate", client_context(serving.ca), "POST",
                                  json=review(pod_create()))
            assert status == 200
        finally:
            await runner.cleanup()
