"""Slow and malformed clients against ``serve``'s TLS listener: cut at the head deadline, never locking others out.

A client that opens a connection and sends part of a request head is closed
once ``header_timeout`` passes (the idle timeout is an hour here, so nothing
else could have closed it). More partial connections than ``max_connections``
do not keep a review or ``/healthz`` from being answered: a new connection
takes the place of the one that has waited longest for its head. A head that
does not parse is answered 400, counted, and logged on one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import generate_latest

from tests.component.server.conftest import serve_tls
from tests.component.server.test_local_mode import POLICY, PRIVILEGED, review, until
from webhook.metrics import Metrics
from webhook.server.app import COMPONENTS, create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

PARTIAL_HEAD = b"POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
SLOW_BODY = (b"POST /validate?timeout=30s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{")


@dataclass
class Listening:
    port: int
    client_ssl: ssl.SSLContext
    session: aiohttp.ClientSession
    metrics: Metrics

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    async def partial(self, sent: bytes = PARTIAL_HEAD) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection that completes its TLS handshake, sends part of a request (its head), and stops."""
        reader, writer = await asyncio.open_connection("localhost", self.port, ssl=self.client_ssl)
        writer.write(sent)
        await writer.drain()
        return reader, writer

    def counted(self, sample: str) -> float:
        for line in generate_latest(self.metrics.registry).decode().splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
        return 0.0


@contextlib.asynccontextmanager
async def listening(tmp_path: Path, **limits: float) -> AsyncIterator[Listening]:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(POLICY.format(name="no-privileged", failure_policy="Fail",
                                                   expression=PRIVILEGED))
    paths = certs.write_certs(tmp_path / "certs", dns_names=["localhost"], days=1)
    app = create_app(Settings(local_dir=policies, cert_file=paths.cert, key_file=paths.key, eval_workers=0,
                              **limits))  # type: ignore[arg-type]
    runner, port = await serve_tls(app)
    client_ssl = ssl.create_default_context(cafile=str(paths.ca))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as session:
            served = Listening(port, client_ssl, session, app[COMPONENTS].metrics)

            async def ready() -> bool:
                async with session.get(served.url + "/readyz") as resp:
                    return resp.status == 200

            await until(ready)
            yield served
    finally:
        await runner.cleanup()


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    async with asyncio.timeout(30):  # hang guard only
        return await reader.read() == b""


async def test_a_client_that_stops_in_the_middle_of_its_request_head_is_cut(tmp_path: Path) -> None:
    async with listening(tmp_path, header_timeout=0.3, idle_timeout=3600) as served:
        reader, writer = await served.partial()
        assert await closed_by_server(reader)
        writer.close()
        assert served.counted('tollgate_http_connections_closed_total{reason="header_timeout"}') == 1


async def test_a_head_sent_byte_by_byte_is_cut_at_its_deadline_not_renewed_by_each_byte(tmp_path: Path) -> None:
    async with listening(tmp_path, header_timeout=0.5, idle_timeout=3600) as served:
        reader, writer = await served.partial()
        with contextlib.suppress(ConnectionError):
            while not reader.at_eof():
                writer.write(b"X")  # a byte of a header name every 50 ms: always "sending"
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.05):
                        await reader.read(1)
        assert await closed_by_server(reader)
        writer.close()
        assert served.counted('tollgate_http_connections_closed_total{reason="header_timeout"}') == 1


async def test_a_later_head_on_a_kept_alive_connection_is_cut_at_its_own_deadline(tmp_path: Path) -> None:
    # The first head's timer is still pending when the second head starts (it is not cancelled when a head
    # arrives in time); when it fires it must wait for the second head's deadline, then cut.
    async with listening(tmp_path, header_timeout=0.5, idle_timeout=3600) as served:
        reader, writer = await served.partial(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        async with asyncio.timeout(30):  # hang guard only
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            await reader.readexactly(length)
        assert head.startswith(b"HTTP/1.1 200")
        writer.write(PARTIAL_HEAD)
        await writer.drain()
        assert await closed_by_server(reader)
        writer.close()
        assert served.counted('tollgate_http_connections_closed_total{reason="header_timeout"}') == 1


@pytest.mark.parametrize("sent", [PARTIAL_HEAD, SLOW_BODY], ids=["partial-heads", "slow-bodies"])
async def test_reviews_and_probes_are_answered_while_more_partial_requests_are_open_than_the_cap(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, sent: bytes) -> None:
    async with listening(tmp_path, header_timeout=60, idle_timeout=3600, max_connections=8) as served:
        slow = [await served.partial(sent) for _ in range(20)]
        async with served.session.post(served.url + "/validate", json=review(privileged=True)) as resp:
            assert resp.status == 200
            body = await resp.json()
        async with served.session.get(served.url + "/healthz") as probe:
            assert probe.status == 200
        assert body["response"]["allowed"] is False
        assert "no privileged containers" in body["response"]["status"]["message"]
        assert served.counted('tollgate_http_connections_closed_total{reason="evicted"}') >= 12
        assert served.counted("tollgate_http_connections") <= 8
        for _reader, writer in slow:
            writer.close()
    assert not [r for r in caplog.records if r.exc_info], "an evicted connection logged a traceback"


async def test_a_malformed_head_is_answered_400_counted_and_logged_on_one_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with listening(tmp_path) as served:
        with caplog.at_level(logging.INFO):
            for _ in range(5):
                reader, writer = await asyncio.open_connection("localhost", served.port, ssl=served.client_ssl)
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nBad Header\r\n\r\n")
                status = await reader.readline()
                writer.close()
                assert status.startswith(b"HTTP/1.") and b" 400 " in status
        assert served.counted("tollgate_http_malformed_requests_total") == 5
        records = [r for r in caplog.records if r.name.startswith(("aiohttp", "tollgate.http"))]
        assert [r.getMessage() for r in records] == ["malformed HTTP request head, answered 400"]
        assert records[0].exc_info is None
