"""After ``begin_shutdown()`` kept-alive clients are told ``Connection: close``.

Each kept-alive connection gets its next answer in full, marked
``Connection: close``, so the client reconnects instead of sending a request
into a connection the server is about to close; ``drain()`` waits for a
review whose body is still arriving before the runner is cleaned up.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

from tests.component.server.test_admission_tls import pod_create, review
from webhook.admission.handler import AdmissionHandler
from webhook.admission.lifecycle import graceful_stop
from webhook.admission.server import AdmissionServer
from webhook.metrics import Metrics
from webhook.policy import PolicyIndex
from webhook.policy.lookups import InMemoryLookups
from webhook.tls import generate as certs
from webhook.tls.reload import CertReloader


async def test_begin_shutdown_closes_kept_alive_connections_after_a_full_answer(tmp_path: Path) -> None:
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    server = AdmissionServer(AdmissionHandler(PolicyIndex(), InMemoryLookups()), Metrics(),
                             max_request_bytes=1024 * 1024)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.add_routes([*server.routes(), web.get("/healthz", healthz)])
    app.on_response_prepare.append(server.on_response_prepare)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=CertReloader(paths.cert, paths.key).context)
    await site.start()
    url = f"https://localhost:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    body = json.dumps(review(pod_create())).encode()
    cleaned = False
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1)) as kept, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as slow_session:
            async with kept.post(url + "/validate", data=body, headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200
                assert r.headers.get("Connection", "").lower() != "close"
                await r.read()

            release = asyncio.Event()

            async def slow_body() -> AsyncIterator[bytes]:
                yield body[:10]
                await release.wait()
                yield body[10:]

            in_flight = asyncio.ensure_future(slow_session.post(
                url + "/validate", data=slow_body(), headers={"Content-Type": "application/json"}))
            await asyncio.sleep(0.2)  # the slow request's headers have reached the server

            server.begin_shutdown()
            assert server.shutting_down
            # The kept-alive connection gets a complete answer, marked Connection: close.
            async with kept.post(url + "/validate", data=body, headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200
                assert r.headers.get("Connection", "").lower() == "close"
                assert (await r.json())["response"]["uid"] == "uid-web"
            async with kept.get(url + "/healthz") as r:  # every route, via on_response_prepare
                assert r.status == 200
                assert r.headers.get("Connection", "").lower() == "close"

            # Draining waits for the review whose body is still arriving (AppRunner.cleanup alone would
            # drop the rest of its body: aiohttp stops reading once it starts closing connections).
            assert server.in_flight == 1
            stopped = asyncio.ensure_future(graceful_stop(server, runner, delay=0.1, timeout=5.0))
            await asyncio.sleep(0.3)
            assert not stopped.done()
            release.set()
            resp = await in_flight
            assert resp.status == 200
            assert (await resp.json())["response"]["uid"] == "uid-web"
            assert resp.headers.get("Connection", "").lower() == "close"
            resp.release()
            assert await stopped is True  # drained, then the runner was cleaned up
            cleaned = True
    finally:
        if not cleaned:
            await runner.cleanup()
