"""Long fuzz run: many malformed AdmissionReviews against a real ``tollgate serve``-style TLS server.

    python bench/fuzz_admission.py --examples 100000

Uses the same generator as ``tests/component/server/test_hostile_input.py``
(hypothesis), sends each body over a kept-alive TLS connection, and counts
failures: any 5xx, a reply without the request's uid, or a hang (a 10 s
client timeout). Prints how many inputs were tried; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.component.server.conftest import serve_tls
from tests.component.server.test_admission_tls import PRIVILEGED_POLICY
from tests.component.server.test_hostile_input import corrupted_review
from tests.fakeapi.server import FakeApiServer
from webhook.kube.client import api_client_for_url
from webhook.server.app import create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs


def generate(n: int) -> list[bytes]:
    bodies: list[bytes] = []

    @settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        bodies.append(corrupted_review(data))

    collect()
    return bodies


async def run(examples: int, batch: int) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-fuzz-"))
    paths = certs.write_certs(tmp, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    cluster = FakeApiServer()
    await cluster.start()
    cluster.apply("clusteradmissionpolicies", PRIVILEGED_POLICY)
    client = api_client_for_url(cluster.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=False,
                              manage_webhooks=False, eval_workers=0), api_client=client)
    runner, port = await serve_tls(app)
    url = f"https://localhost:{port}/validate"
    failures = tried = 0
    started = time.monotonic()
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx), timeout=timeout) as session:
        while tried < examples:
            for body in generate(min(batch, examples - tried)):
                tried += 1
                try:
                    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                        reply = await resp.read()
                        ok = resp.status < 500
                        if ok and resp.status == 200:
                            ok = json.loads(reply)["response"]["uid"] == json.loads(body)["request"]["uid"]
                except (TimeoutError, aiohttp.ClientError, ValueError, KeyError) as e:
                    ok = False
                    reply = repr(e).encode()
                if not ok:
                    failures += 1
                    print(f"FAILURE: {reply[:200]!r} for {body[:200]!r}", file=sys.stderr)
            print(f"tried {tried} inputs, {failures} failures, {time.monotonic() - started:.0f} s", flush=True)
    await runner.cleanup()
    await client.close()
    await cluster.stop()
    return failures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=100_000, help="inputs to try (default 100000)")
    p.add_argument("--batch", type=int, default=5_000, help="inputs generated per hypothesis run")
    args = p.parse_args()
    failures = asyncio.run(run(args.examples, args.batch))
    print(f"RESULT: {args.examples} inputs tried, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
