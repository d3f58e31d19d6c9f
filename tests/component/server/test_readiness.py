"""``/readyz`` says 200 only once a review would be answered from the loaded policies, never 503.

The policy informers sync (their list is in the cache) before their handlers
have delivered every policy into the index; with many policies that window is
long. Readiness waits for the handlers, as the reviews do.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp

from tests.component.server.conftest import serve_tls
from tests.component.server.test_local_mode import review
from tests.fakeapi.server import FakeApiServer
from tests.unit.policy.helpers import policy
from webhook.kube.client import api_client_for_url
from webhook.server.app import create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

POLICIES = 600


async def test_ready_means_a_review_is_answered_from_the_loaded_policies(tmp_path: Path) -> None:
    fake = FakeApiServer()
    await fake.start()
    fake.apply("namespaces", {"metadata": {"name": "default"}})
    for i in range(POLICIES):
        fake.apply("clusteradmissionpolicies", policy(f"p{i:04}", operations=("CREATE",), validations=[
            {"expression": f"object.metadata.name != 'forbidden-{i}'"}]))
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], days=1)
    client = api_client_for_url(fake.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=False, manage_webhooks=False,
                              eval_workers=0), api_client=client)
    runner, port = await serve_tls(app)
    url = f"https://localhost:{port}"
    try:
        connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=str(paths.ca)))
        async with aiohttp.ClientSession(connector=connector) as session:
            ready = False
            for _ in range(20_000):  # as fast as the loop answers; a hang guard, not a timing
                async with session.get(url + "/readyz") as resp:
                    body = await resp.json()
                if resp.status == 200:
                    ready = True
                    break
                assert body["ready"] is False
            assert ready, "never ready"
            async with session.post(url + "/validate", json=review(privileged=False)) as resp:
                answer = await resp.json()
                assert resp.status == 200, answer
            assert answer["response"]["allowed"] is True
            assert len(body["policies"]) == POLICIES
    finally:
        await runner.cleanup()
        await client.close()
        await fake.stop()
