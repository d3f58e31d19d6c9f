"""Content-Encoding, the size cap after decoding, and the readiness gate."""

from __future__ import annotations

import gzip
import json
import logging
import ssl
import zlib
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.component.server.conftest import Served
from tests.component.server.test_admission_tls import pod_create, review
from webhook.admission.handler import AdmissionHandler
from webhook.admission.server import AdmissionServer
from webhook.metrics import Metrics
from webhook.policy import PolicyIndex
from webhook.policy.lookups import InMemoryLookups
from webhook.tls import generate as certs
from webhook.tls.reload import CertReloader

BODY = json.dumps(review(pod_create())).encode()


async def post_raw(served: Served, data: bytes, encoding: str) -> tuple[int, str]:
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    async with served.session.post(served.url + "/validate", data=data, headers=headers) as resp:
        return resp.status, await resp.text()


async def test_gzip_and_deflate_bodies_are_decoded(served: Served) -> None:
    await served.wait_ready()
    for data, encoding in ((gzip.compress(BODY), "gzip"), (zlib.compress(BODY), "deflate")):
        status, text = await post_raw(served, data, encoding)
        assert status == 200, text
        assert json.loads(text)["response"]["uid"] == "uid-web"


async def test_a_corrupt_gzip_body_is_400_with_a_reason(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    await served.wait_ready()  # else the readiness gate answers 503 first on a loaded machine
    status, text = await post_raw(served, b"\x1f\x8b\x08\x00garbage-not-gzip", "gzip")
    assert status == 400
    assert "could not be read" in json.loads(text)["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_gzip_bomb_stops_at_the_cap_after_decoding(served: Served) -> None:
    await served.wait_ready()  # else the readiness gate answers 503 first on a loaded machine
    bomb = gzip.compress(b" " * (64 * 1024 * 1024))  # 64 MiB of spaces in ~64 KB; the fixture's cap is 1 MiB
    assert len(bomb) < 1024 * 1024
    status, text = await post_raw(served, bomb, "gzip")
    assert status == 413
    assert "exceeds 1048576 bytes" in text


async def test_an_unsupported_content_encoding_is_415(served: Served) -> None:
    await served.wait_ready()  # else the readiness gate answers 503 first on a loaded machine
    status, text = await post_raw(served, BODY, "compress")
    assert status == 415
    assert "Content-Encoding" in json.loads(text)["message"]


async def test_an_encoding_aiohttp_cannot_decode_is_400(served: Served) -> None:
    await served.wait_ready()  # else the readiness gate answers 503 first on a loaded machine
    # aiohttp refuses br/zstd without their optional packages while parsing the headers, before any
    # handler runs: a 400 (a failed webhook call), never a 500. aiohttp logs that one itself.
    for encoding in ("br", "zstd"):
        status, _ = await post_raw(served, BODY, encoding)
        assert status == 400


async def test_the_readiness_gate_answers_503_until_it_opens(tmp_path: Path) -> None:
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    synced = [False]
    server = AdmissionServer(AdmissionHandler(PolicyIndex(), InMemoryLookups()), Metrics(),
                             max_request_bytes=1024 * 1024, ready=lambda: synced[0])
    app = web.Application()
    app.add_routes(server.routes())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=CertReloader(paths.cert, paths.key).context)
    await site.start()
    url = f"https://localhost:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                ssl=ssl.create_default_context(cafile=str(paths.ca)))) as session:
            for path in ("/validate", "/mutate"):
                async with session.post(url + path, json=review(pod_create())) as resp:
                    # A failed webhook call, not an AdmissionResponse: the API server applies failurePolicy.
                    assert resp.status == 503
                    assert "not synced" in (await resp.json())["message"]
            synced[0] = True
            async with session.post(url + "/validate", json=review(pod_create())) as resp:
                assert resp.status == 200
                assert (await resp.json())["response"]["allowed"] is True
    finally:
        await runner.cleanup()
