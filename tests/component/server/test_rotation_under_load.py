"""Certificate rotation under load: a stream of requests over kept-alive and fresh TLS connections
keeps succeeding while the certificate files are replaced, first by a half-written pair, then by a
good one; the new certificate is served after the poll interval and the bad pair is rejected."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import ssl
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from tests.component.server.conftest import Served
from tests.component.server.test_admission_tls import (
    PRIVILEGED_POLICY,
    pod_create,
    review,
    start,
)
from webhook.tls import generate as certs


def serial_of(pem: Path) -> int:
    return x509.load_pem_x509_certificate(pem.read_bytes()).serial_number


async def test_rotation_under_load_fails_no_request(served: Served, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    await start(served, PRIVILEGED_POLICY)
    fresh = tmp_path / "fresh"
    certs.write_certs(fresh, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=2)
    bundle = tmp_path / "both-cas.pem"
    bundle.write_bytes((served.cert_dir / "ca.crt").read_bytes() + (fresh / "ca.crt").read_bytes())
    ctx = ssl.create_default_context(cafile=str(bundle))
    body = review(pod_create("load", privileged=True))
    stop = asyncio.Event()
    outcomes = {"ok": 0, "failed": 0}
    served_serials: set[int] = set()

    async def check(resp: aiohttp.ClientResponse) -> None:
        data = await resp.json()
        good = resp.status == 200 and data["response"]["uid"] == "uid-load" and data["response"]["allowed"] is False
        outcomes["ok" if good else "failed"] += 1

    async def kept_alive() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=2)) as session:
            while not stop.is_set():
                async with session.post(served.url + "/validate", json=body) as resp:
                    await check(resp)

    raw = json.dumps(body).encode()
    port = int(served.url.rsplit(":", 1)[1])

    async def fresh_connections() -> None:
        # A new TCP + TLS connection per request, as the API server makes when it cannot reuse one.
        while not stop.is_set():
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            served_serials.add(x509.load_der_x509_certificate(der).serial_number)
            writer.write(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
            response = await reader.read()
            writer.close()
            head, _, payload = response.partition(b"\r\n\r\n")
            data = json.loads(payload) if head.startswith(b"HTTP/1.1 200") else {}
            good = data.get("response", {}).get("uid") == "uid-load"
            outcomes["ok" if good else "failed"] += 1

    workers = [asyncio.create_task(kept_alive()), asyncio.create_task(fresh_connections())]
    try:
        await asyncio.sleep(0.2)
        old_serial = serial_of(served.cert_dir / "tls.crt")
        # Half-written: the new certificate lands before its key. Rejected; the old pair keeps serving.
        shutil.copy(fresh / "tls.crt", served.cert_dir / "tls.crt")
        await asyncio.sleep(0.3)
        # The key follows: the good new pair is picked up at the next poll (0.05 s here).
        shutil.copy(fresh / "tls.key", served.cert_dir / "tls.key")
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert outcomes["failed"] == 0
    assert outcomes["ok"] > 20
    assert old_serial in served_serials and serial_of(fresh / "tls.crt") in served_serials
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session, \
            session.get(served.url + "/metrics") as resp:
        metrics = await resp.text()
    # The half-written pair was rejected (at least once: a poll may also catch a partly copied file).
    failures = re.search(r'tollgate_certificate_reloads_total\{result="rejected"\} (\d+)', metrics)
    assert failures is not None and int(failures.group(1)) >= 1
    assert 'tollgate_certificate_reloads_total{result="success"} 1.0' in metrics
    rejected = [r for r in caplog.records if r.name == "tollgate.tls" and "rejected" in r.getMessage()]
    assert rejected and rejected[0].levelname == "WARNING"
