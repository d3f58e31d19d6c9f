"""Events through the whole app: a denied review over TLS becomes a core/v1 Event on the fake API server,
written off the request path; a repeat is a PATCH of its count; dryRun and ``events=False`` write none."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.component.server.conftest import serve_tls, until
from tests.component.server.test_admission_tls import PRIVILEGED_POLICY, pod_create, review
from tests.fakeapi.server import FakeApiServer
from webhook.kube.client import api_client_for_url
from webhook.server.app import COMPONENTS, create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

Decide = Callable[[dict[str, Any]], Any]


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[tuple[FakeApiServer, Decide, Any]]:
    """The app on the fake API server; ``indirect`` parametrization sets ``Settings.events``."""
    fake = FakeApiServer()
    await fake.start()
    fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    fake.apply("clusteradmissionpolicies", PRIVILEGED_POLICY)
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], days=1)
    client = api_client_for_url(fake.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=False, pod_name="tollgate-abc",
                              manage_webhooks=False, eval_workers=0, events=getattr(request, "param", True)),
                     api_client=client)
    runner, port = await serve_tls(app)
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        url = f"https://localhost:{port}"

        async def decide(req: dict[str, Any]) -> dict[str, Any]:
            async with session.post(url + "/validate", json=review(req)) as resp:
                assert resp.status == 200
                return (await resp.json())["response"]  # type: ignore[no-any-return]

        async def ready() -> bool:
            async with session.get(url + "/readyz") as resp:
                return resp.status == 200

        await until(ready)
        yield fake, decide, app
    await runner.cleanup()
    await client.close()
    await fake.stop()


def events(fake: FakeApiServer) -> dict[str, dict[str, Any]]:
    return fake.state("events")


async def test_a_denial_is_an_event_on_the_object_and_a_repeat_patches_its_count(
        cluster: tuple[FakeApiServer, Decide, Any]) -> None:
    fake, decide, _app = cluster
    assert (await decide(pod_create("web", True)))["allowed"] is False

    async def written() -> Any:
        return events(fake)

    (key, event), = (await until(written)).items()
    assert key.startswith("default/web.")
    assert event["involvedObject"] == {"kind": "Pod", "apiVersion": "v1", "name": "web", "namespace": "default"}
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "PolicyViolation", 1)
    assert event["message"] == "no-privileged: privileged: app"
    assert (event["reportingComponent"], event["reportingInstance"]) == ("tollgate", "tollgate-abc")

    await decide(pod_create("web", True))

    async def counted() -> bool:
        return bool(events(fake)[key]["count"] == 2)

    await until(counted)
    assert len(events(fake)) == 1 and fake.count("PATCH", "/events/" + key.split("/")[1]) == 1


async def test_no_event_for_a_dry_run_or_an_allowed_request(cluster: tuple[FakeApiServer, Decide, Any]) -> None:
    fake, decide, _app = cluster
    assert (await decide({**pod_create("dry", True), "dryRun": True}))["allowed"] is False
    assert (await decide(pod_create("fine", False)))["allowed"] is True
    await decide(pod_create("last", True))  # queued after the two above: once it is written, they were seen

    async def written() -> Any:
        return events(fake)

    assert [e["involvedObject"]["name"] for e in (await until(written)).values()] == ["last"]


@pytest.mark.parametrize("cluster", [False], indirect=True)
async def test_no_events_writes_none(cluster: tuple[FakeApiServer, Decide, Any]) -> None:
    fake, decide, app = cluster
    assert app[COMPONENTS].events is None and app[COMPONENTS].server.events is None  # nothing to queue to
    assert (await decide(pod_create("web", True)))["allowed"] is False
    assert fake.count("POST", "/events") == 0
