"""A real TLS listener running ``create_app`` with informers fed by the fake API server over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.fakeapi.server import Cluster, FakeApiServer
from webhook.kube.client import api_client_for_url
from webhook.server.app import COMPONENTS, create_app
from webhook.server.listener import start_listener
from webhook.server.settings import Settings
from webhook.tls import generate as certs


@dataclass
class Served:
    url: str
    session: aiohttp.ClientSession
    cluster: Cluster
    app: web.Application
    cert_dir: Path

    async def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        data = body if isinstance(body, (bytes, str)) else None
        kwargs: dict[str, Any] = {"data": data} if data is not None else {"json": body}
        kwargs.update(kw)
        async with self.session.post(self.url + path, **kwargs) as resp:
            text = await resp.text()
            try:
                return resp.status, await resp.json(content_type=None)
            except ValueError:
                return resp.status, text

    async def wait_ready(self) -> None:
        for _ in range(200):
            async with self.session.get(self.url + "/readyz") as resp:
                if resp.status == 200:
                    return
            await asyncio.sleep(0.01)
        raise AssertionError("webhook never became ready")


async def until(check: Any, timeout: float = 45.0) -> Any:
    """Poll the coroutine function ``check`` every 20 ms until it returns a truthy value (returned).

    The wait is for the condition; ``timeout`` is only a liveness bound (below pytest's per-test hang guard), long
    enough for a fully loaded machine, never a measurement.

    Raises:
        AssertionError: ``timeout`` seconds passed first.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def serve_tls(app: web.Application) -> tuple[web.AppRunner, int]:
    """Run ``app`` behind ``serve``'s own listener (its limits from the app's Settings) on 127.0.0.1, a free port."""
    settings = dataclasses.replace(app[COMPONENTS].settings, host="127.0.0.1", port=0)
    listener = await start_listener(app, settings)
    return listener.runner, listener.site.port


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with serving_from_fake(tmp_path, eval_workers=0) as s:
        yield s


@pytest.fixture
async def served_in_workers(tmp_path: Path) -> AsyncIterator[Served]:
    """As :func:`served`, but every review is evaluated in an evaluation worker process."""
    async with serving_from_fake(tmp_path, eval_workers=1, isolate_above_bytes=0) as s:
        yield s


@contextlib.asynccontextmanager
async def serving_from_fake(tmp_path: Path, **overrides: Any) -> AsyncIterator[Served]:
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    fake = FakeApiServer()
    await fake.start()
    fake.apply("namespaces", {"metadata": {"name": "default", "labels": {"team": "a"}}})
    settings = Settings(cert_file=paths.cert, key_file=paths.key, host="127.0.0.1", port=0, write_status=False,
                        cert_poll_interval=0.05, max_request_bytes=1024 * 1024, manage_webhooks=False,
                        **{"events": False, **overrides})  # an Event written would move the fake's one RV counter
    client = api_client_for_url(fake.url)
    app = create_app(settings, api_client=client)
    runner, port = await serve_tls(app)
    client_ctx = ssl.create_default_context(cafile=str(paths.ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx)) as session:
        yield Served(f"https://localhost:{port}", session, Cluster(fake), app, tmp_path)
    await runner.cleanup()
    await client.close()
    await fake.stop()
