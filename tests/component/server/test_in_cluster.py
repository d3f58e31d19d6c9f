"""``create_app`` in cluster mode: informers over KubeListerWatcher (kubernetes_asyncio over HTTP) against
the fake API server, leader election on a Lease, and policy status written through ``/status``."""

from __future__ import annotations

import asyncio
import copy
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.component.server.conftest import serve_tls, until
from tests.component.server.test_admission_tls import (
    PRIVILEGED_POLICY,
    pod_create,
    review,
)
from tests.fakeapi.server import FakeApiServer
from webhook.kube.client import api_client_for_url
from webhook.server.app import create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

POLICIES = "clusteradmissionpolicies"


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest
                  ) -> AsyncIterator[tuple[FakeApiServer, str, aiohttp.ClientSession]]:
    """The app on the fake API server; ``indirect`` parametrization sets ``ready_max_staleness``."""
    fake = FakeApiServer()
    await fake.start()
    fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    fake.apply(POLICIES, PRIVILEGED_POLICY)
    broken = copy.deepcopy(PRIVILEGED_POLICY)
    broken["metadata"]["name"] = "broken"
    broken["spec"]["validations"][0]["expression"] = "objekt.spec == 1"
    broken["spec"]["failurePolicy"] = "Ignore"  # a broken policy is answered per its failurePolicy
    fake.apply(POLICIES, broken)
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], days=1)
    client = api_client_for_url(fake.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=True, pod_name="replica-1",
                              manage_webhooks=False, eval_workers=0,
                              ready_max_staleness=getattr(request, "param", 30.0)),
                     api_client=client)
    runner, port = await serve_tls(app)
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        url = f"https://localhost:{port}"

        async def synced() -> bool:  # reviews are answered 503 until the caches and policies are loaded
            async with session.get(url + "/readyz") as resp:
                return resp.status == 200

        await until(synced)
        yield fake, url, session
    await runner.cleanup()
    await client.close()
    await fake.stop()


async def decide(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with session.post(url + "/validate", json=body) as resp:
        assert resp.status == 200
        return (await resp.json())["response"]


async def test_policies_from_the_api_decide_and_get_status(cluster: tuple[FakeApiServer, str, Any]) -> None:
    fake, url, session = cluster

    async def ready() -> bool:
        async with session.get(url + "/readyz") as resp:
            return resp.status == 200

    await until(ready)
    async def denied() -> bool:
        return (await decide(session, url, review(pod_create("p", True))))["allowed"] is False

    await until(denied)
    response = await decide(session, url, review(pod_create("p", True)))
    assert "no-privileged: privileged: app" in response["status"]["message"]
    assert "broken" not in response["status"]["message"]
    assert any(w.startswith("broken: policy is not ready: spec.validations[0].expression: ERROR: <input>:1:")
               and w.endswith("(failurePolicy: Ignore)") for w in response["warnings"])

    # The leader writes each policy's Ready condition through the /status subresource.
    def condition(name: str) -> dict[str, Any] | None:
        conds = (fake.state(POLICIES)[name].get("status") or {}).get("conditions") or []
        return conds[0] if conds else None

    async def written() -> bool:
        return condition("no-privileged") is not None and condition("broken") is not None

    await until(written)
    assert (condition("no-privileged")["status"], condition("no-privileged")["reason"]) == ("True", "Compiled")
    broken = condition("broken")
    assert (broken["status"], broken["reason"]) == ("False", "CompileError")
    assert broken["message"].startswith("spec.validations[0].expression: ERROR: <input>:1:")
    assert any(r["resource"] == "leases" for r in fake.requests)
    # No API call per admission request: only list/watch/status/lease traffic.
    assert not [r for r in fake.requests if r["verb"] == "get" and r["resource"] in ("configmaps", "namespaces")]

    # A policy edited on the API server changes the next decision.
    relaxed = copy.deepcopy(fake.state(POLICIES)["no-privileged"])
    relaxed["spec"]["validations"][0]["expression"] = "true"
    fake.apply(POLICIES, relaxed)

    async def allowed() -> bool:
        return (await decide(session, url, review(pod_create("p", True))))["allowed"] is True

    await until(allowed)


async def test_api_server_unreachable_after_sync_keeps_serving_from_cache(
        cluster: tuple[FakeApiServer, str, Any]) -> None:
    fake, url, session = cluster

    async def denied() -> bool:
        return (await decide(session, url, review(pod_create("p", True))))["allowed"] is False

    await until(denied)
    await fake.refuse_connections()
    await asyncio.sleep(0.3)
    response = await decide(session, url, review(pod_create("p", True)))
    assert response["allowed"] is False and "no-privileged" in response["status"]["message"]
    async with session.get(url + "/readyz") as resp:
        detail = await resp.json()
    assert resp.status == 200  # within ready_max_staleness: keep serving what the cache knows
    assert detail["caches"]["clusteradmissionpolicies.tollgate.dev"]["ageSeconds"] >= 0.3
    assert detail["caches"]["clusteradmissionpolicies.tollgate.dev"]["stalenessSeconds"] >= 0.3
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    assert 'tollgate_informer_cache_age_seconds{resource="namespaces"}' in text
    assert 'tollgate_informer_staleness_seconds{resource="namespaces"}' in text
    await fake.accept_connections()


async def readyz(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with session.get(url + "/readyz") as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize("cluster", [1.0], indirect=True)
async def test_cut_off_longer_than_ready_max_staleness_is_not_ready_but_still_answers(
        cluster: tuple[FakeApiServer, str, Any]) -> None:
    """Past ``ready_max_staleness`` without word from the API server, /readyz says 503 (the Service routes to
    replicas that still hear it) while reviews are still answered from the cache; ready again once every
    cache watches again."""
    fake, url, session = cluster

    async def ready() -> bool:
        return (await readyz(session, url))[0] == 200

    await until(ready)
    await fake.refuse_connections()

    async def not_ready() -> bool:
        return (await readyz(session, url))[0] == 503

    await until(not_ready)
    status, detail = await readyz(session, url)
    assert (status, detail["cachesCurrent"], detail["policiesLoaded"]) == (503, False, True)
    assert max(c["stalenessSeconds"] for c in detail["caches"].values()) > 1.0
    response = await decide(session, url, review(pod_create("p", True)))
    assert response["allowed"] is False and "no-privileged" in response["status"]["message"]
    await fake.accept_connections()
    await until(ready)  # backoff is capped at 8 s
    status, detail = await readyz(session, url)
    assert detail["cachesCurrent"] is True
    assert all(c["stalenessSeconds"] == 0 for c in detail["caches"].values())


async def test_not_ready_until_the_api_server_answers(tmp_path: Path) -> None:
    fake = FakeApiServer()
    await fake.start()
    fake.apply(POLICIES, PRIVILEGED_POLICY)
    await fake.refuse_connections()
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], days=1)
    client = api_client_for_url(fake.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=False, manage_webhooks=False,
                              eval_workers=0), api_client=client)
    runner, port = await serve_tls(app)
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            await asyncio.sleep(0.3)
            async with session.get(f"https://localhost:{port}/readyz") as resp:
                detail = await resp.json()
            assert resp.status == 503 and detail["ready"] is False
            assert not any(c["synced"] for c in detail["caches"].values())
            await fake.accept_connections()

            async def ready() -> bool:
                async with session.get(f"https://localhost:{port}/readyz") as r:
                    return r.status == 200

            await until(ready)
    finally:
        await runner.cleanup()
        await client.close()
        await fake.stop()


async def test_the_app_keeps_the_webhook_configurations_as_the_policies_need(tmp_path: Path) -> None:
    """``serve``'s wiring: the leader's reconciler follows policy adds and deletes, with the CA's bundle."""
    fake = FakeApiServer()
    await fake.start()
    for kind, plural in (("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
                         ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations")):
        fake.apply(plural, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                            "metadata": {"name": "tollgate"}})
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], days=1)
    client = api_client_for_url(fake.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=False, manage_webhooks=True,
                              ca_file=paths.ca, pod_name="replica-1", eval_workers=0), api_client=client)
    runner, _port = await serve_tls(app)

    def webhooks() -> list[dict[str, Any]]:
        return (fake.get("validatingwebhookconfigurations", "tollgate") or {}).get("webhooks") or []

    async def true(check: Any) -> bool:
        return bool(check())

    try:
        fake.apply(POLICIES, PRIVILEGED_POLICY)
        await until(lambda: true(webhooks))
        [hook] = webhooks()
        # pods, and the pod controllers for autogen.podControllers: nothing else reaches the webhook.
        assert {res for r in hook["rules"] for res in r["resources"]} == {
            "pods", "deployments", "statefulsets", "daemonsets", "replicasets", "replicationcontrollers", "jobs",
            "cronjobs"}
        assert hook["failurePolicy"] == "Fail"
        assert hook["clientConfig"]["caBundle"] == certs.ca_bundle(paths.ca.read_bytes())
        fake.delete(POLICIES, "no-privileged")
        await until(lambda: true(lambda: not webhooks()))  # no policy: no rule at all
    finally:
        await runner.cleanup()
        await client.close()
        await fake.stop()


async def test_serve_with_background_audit_reports_existing_objects(tmp_path: Path) -> None:
    """``--background-audit``'s wiring: existing Pods are evaluated and the leader writes their PolicyReport."""
    fake = FakeApiServer()
    await fake.start()
    for name, privileged in (("good", False), ("bad", True)):
        container: dict[str, Any] = {"name": "app", "image": "registry.example.com/app:1"}
        if privileged:
            container["securityContext"] = {"privileged": True}
        fake.apply("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                            "spec": {"containers": [container]}})
    background = copy.deepcopy(PRIVILEGED_POLICY)
    background["spec"]["background"] = True
    fake.apply(POLICIES, background)
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], days=1)
    client = api_client_for_url(fake.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=False, background_audit=True,
                              pod_name="replica-1", manage_webhooks=False, eval_workers=0), api_client=client)
    runner, _port = await serve_tls(app)

    async def reported() -> bool:
        report = fake.get("policyreports", "default/tollgate-polr-ns-default")
        return bool(report) and report["summary"]["pass"] == 1 and report["summary"]["fail"] == 1

    try:
        await until(reported)
        report = fake.get("policyreports", "default/tollgate-polr-ns-default")
        assert report is not None
        failed = [r for r in report["results"] if r["result"] == "fail"]
        assert [(r["policy"], r["resources"][0]["name"]) for r in failed] == [("no-privileged", "bad")]
    finally:
        await runner.cleanup()
        await client.close()
        await fake.stop()
