"""``spec.references`` in cluster mode: the app runs an informer per referenced resource against the fake
API server (kubernetes_asyncio over HTTP), policies read it through ``resource.List``, and nothing is
fetched per admission request.

The policies are the shipped examples ``unique-ingress-host`` and ``service-selector-matches-deployment``.
"""

from __future__ import annotations

import copy
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.component.server.conftest import serve_tls
from tests.component.server.test_in_cluster import until
from tests.fakeapi.server import FakeApiServer
from webhook.kube.client import api_client_for_url
from webhook.policy.model import ReferenceIndex
from webhook.server.app import COMPONENTS, create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

EXAMPLES = Path(__file__).resolve().parents[3] / "policies" / "examples"
POLICIES = "clusteradmissionpolicies"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _by_name(path: Path) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _docs(path)}


INGRESSES = _by_name(EXAMPLES / "unique-ingress-host" / "resources.yaml")
SERVICES = _by_name(EXAMPLES / "service-selector-matches-deployment" / "resources.yaml")


def review(obj: dict[str, Any], group: str, resource: str, operation: str = "CREATE") -> dict[str, Any]:
    """An AdmissionReview of ``obj`` (apiVersion ``group/v1`` or ``v1``)."""
    meta = obj["metadata"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-" + meta["name"], "kind": {"group": group, "version": "v1", "kind": obj["kind"]},
        "resource": {"group": group, "version": "v1", "resource": resource}, "namespace": meta["namespace"],
        "name": meta["name"], "operation": operation, "userInfo": {"username": "alice"}, "object": obj}}


def ingress(name: str, namespace: str, host: str) -> dict[str, Any]:
    obj = copy.deepcopy(INGRESSES["blog"])
    obj["metadata"] = {"name": name, "namespace": namespace}
    obj["spec"]["rules"][0]["host"] = host
    return obj


class Cluster:
    def __init__(self, fake: FakeApiServer, url: str, session: aiohttp.ClientSession, app: Any) -> None:
        self.fake, self.url, self.session, self.app = fake, url, session, app

    async def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(self.url + "/validate", json=body) as resp:
            assert resp.status == 200, await resp.text()
            return (await resp.json())["response"]  # type: ignore[no-any-return]

    async def readyz(self) -> dict[str, Any]:
        async with self.session.get(self.url + "/readyz") as resp:
            return await resp.json()  # type: ignore[no-any-return]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Any]:
    fake = FakeApiServer()
    await fake.start()
    client = api_client_for_url(fake.url)
    runners: list[Any] = []

    async def run(*, forbid_ingresses: int = 0) -> Cluster:
        for ns in ("shop", "marketing", "platform", "search"):
            fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for example in ("unique-ingress-host", "service-selector-matches-deployment"):
            fake.apply(POLICIES, _docs(EXAMPLES / example / "policy.yaml")[0])
        for obj in _docs(EXAMPLES / "unique-ingress-host" / "existing.yaml"):
            fake.apply("ingresses", obj)
        for obj in _docs(EXAMPLES / "service-selector-matches-deployment" / "existing.yaml"):
            fake.apply("deployments", obj)
        if forbid_ingresses:
            fake.fail("GET", "/ingresses", code=403, times=forbid_ingresses)
        paths = certs.write_certs(tmp_path, dns_names=["localhost"], days=1)
        app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=False,
                                  manage_webhooks=False, eval_workers=0), api_client=client)
        runner, port = await serve_tls(app)
        runners.append(runner)
        ctx = ssl.create_default_context(cafile=str(paths.ca))
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))
        runners.append(session)
        return Cluster(fake, f"https://localhost:{port}", session, app)

    yield run
    for r in reversed(runners):
        await (r.close() if isinstance(r, aiohttp.ClientSession) else r.cleanup())
    await client.close()
    await fake.stop()


async def test_policies_read_the_reference_caches_and_follow_their_watch(start: Any) -> None:
    c: Cluster = await start()

    async def synced() -> bool:
        body = await c.readyz()
        return body["ready"] and set((body.get("references") or {}).values()) == {"synced"}

    await until(synced)
    assert set((await c.readyz())["references"]) == {"networking.k8s.io/v1/ingresses", "apps/v1/deployments"}

    denied = await c.decide(review(INGRESSES["shop-copy"], "networking.k8s.io", "ingresses"))
    assert denied["allowed"] is False
    assert denied["status"]["message"] == ("unique-ingress-host: host shop.example.com is already used by "
                                           "another Ingress")
    assert (await c.decide(review(INGRESSES["blog"], "networking.k8s.io", "ingresses")))["allowed"] is True
    # The owner's own update is not a collision with itself.
    assert (await c.decide(review(INGRESSES["shop"], "networking.k8s.io", "ingresses", "UPDATE")))["allowed"]

    good = await c.decide(review(SERVICES["checkout"], "", "services"))
    assert good["allowed"] is True and not good.get("warnings")
    typo = await c.decide(review(SERVICES["checkout-typo"], "", "services"))
    assert typo["allowed"] is True
    assert typo["warnings"] == ["service-selector-matches-deployment: selector app=checkuot matches the pods of "
                                "no Deployment in namespace shop"]

    # The caches follow the API server's watch: a new Ingress claims its host at once...
    c.fake.apply("ingresses", ingress("blog", "marketing", "blog.example.com"))
    rival = ingress("blog", "platform", "blog.example.com")

    async def blog_taken() -> bool:
        return (await c.decide(review(rival, "networking.k8s.io", "ingresses")))["allowed"] is False

    await until(blog_taken)
    # ...and a deleted one frees it.
    c.fake.delete("ingresses", "marketing/blog")

    async def blog_free() -> bool:
        return (await c.decide(review(rival, "networking.k8s.io", "ingresses")))["allowed"] is True

    await until(blog_free)
    # A Deployment with the selected labels makes the typo Service valid.
    fixed = copy.deepcopy(_docs(EXAMPLES / "service-selector-matches-deployment" / "existing.yaml")[0])
    fixed["metadata"]["name"] = "typo"
    fixed["spec"]["template"]["metadata"]["labels"] = {"app": "checkuot"}
    c.fake.apply("deployments", fixed)

    async def typo_fixed() -> bool:
        return not (await c.decide(review(SERVICES["checkout-typo"], "", "services"))).get("warnings")

    await until(typo_fixed)
    # Never an API call per admission request: only LIST and WATCH of the referenced resources.
    for resource in ("ingresses", "deployments"):
        verbs = {r["verb"] for r in c.fake.requests if r["resource"] == resource}
        assert verbs <= {"list", "watch"}, verbs


async def test_an_informer_runs_while_a_policy_names_it(start: Any) -> None:
    c: Cluster = await start()
    references = c.app[COMPONENTS].references

    async def both() -> bool:
        return {r.cache for r in references.wanted()} == {"networking.k8s.io/v1/ingresses", "apps/v1/deployments"}

    await until(both)
    factory = references.factory
    assert len(factory.informers) == 2
    # The declared host index is installed on the Ingress informer's Indexer (client-go AddIndexers)...
    ingresses = next(inf for gvr, inf in factory.informers.items() if gvr.resource == "ingresses")
    declared = next(r for r in references.wanted() if r.resource == "ingresses").indexes[0]
    assert ingresses.indexer.has_index(declared.indexer_name)
    # ...and replaced when the policy's index expression changes (a new content-addressed index).
    edited = copy.deepcopy(c.fake.state(POLICIES)["unique-ingress-host"])
    edited["spec"]["references"][0]["indexes"][0]["expression"] = "object.spec.rules.map(r, r.host)"
    c.fake.apply(POLICIES, edited)
    replaced = ReferenceIndex("host", "object.spec.rules.map(r, r.host)").indexer_name

    async def reindexed() -> bool:
        return ingresses.indexer.has_index(replaced) and not ingresses.indexer.has_index(declared.indexer_name)

    await until(reindexed)

    async def listed() -> bool:
        return ingresses.has_synced()

    await until(listed)
    # The api Ingress has a rule without a host: the stricter expression errors on it, which indexes nothing.
    assert sorted(ingresses.indexer.index_values(replaced)) == ["shop.example.com"]
    # The policy stops naming ingresses: its informer stops; the other keeps running.
    edited = copy.deepcopy(c.fake.state(POLICIES)["unique-ingress-host"])
    del edited["spec"]["references"]
    edited["spec"]["variables"] = []
    edited["spec"]["validations"] = [{"expression": "true"}]
    c.fake.apply(POLICIES, edited)

    async def ingresses_stopped() -> bool:
        return {str(g) for g in factory.informers} == {"apps/v1/deployments"}

    await until(ingresses_stopped)
    # The other policy is deleted: nothing runs any more.
    c.fake.delete(POLICIES, "service-selector-matches-deployment")

    async def none() -> bool:
        return not factory.informers and not references.wanted()

    await until(none)
    assert "references" not in await c.readyz()


async def test_an_unsynced_reference_cache_answers_per_on_unsynced(start: Any) -> None:
    # The API server refuses to list ingresses (e.g. RBAC not granted yet): the cache cannot sync, so the
    # policy cannot know whether a host is taken and answers per onUnsynced (Deny), not open.
    c: Cluster = await start(forbid_ingresses=1000)

    async def ready() -> bool:
        body = await c.readyz()
        return body["ready"] and body["references"].get("apps/v1/deployments") == "synced"

    await until(ready)
    assert (await c.readyz())["references"]["networking.k8s.io/v1/ingresses"] == "syncing"
    response = await c.decide(review(INGRESSES["blog"], "networking.k8s.io", "ingresses"))
    assert response["allowed"] is False
    assert response["status"]["message"] == ("unique-ingress-host: cache networking.k8s.io/v1/ingresses has not "
                                             "synced (onUnsynced: Deny)")
    # The Deployment-reading policy is unaffected.
    assert (await c.decide(review(SERVICES["checkout"], "", "services")))["allowed"] is True
    # Once the API server lets the LIST through, the cache syncs and the policy decides.
    c.fake.failures.clear()

    async def decides() -> bool:
        return (await c.decide(review(INGRESSES["blog"], "networking.k8s.io", "ingresses")))["allowed"] is True

    await until(decides)
