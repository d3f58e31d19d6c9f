"""``serve --explain``: POST /explain over a real TLS listener, guarded (off by default, client certificates,
rate, size and work budget), and agreeing with /validate and /mutate on the same review."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.component.server.conftest import serve_tls
from tests.component.server.test_admission_tls import pod_create, review
from tests.component.server.test_client_certificates import client_context, client_pki, fake_cluster, get
from tests.fakeapi.server import FakeApiServer
from webhook.admission.explain import ExplainEndpoint, TokenBucket
from webhook.kube.client import api_client_for_url
from webhook.server.app import COMPONENTS, create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

RULES = {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                            "operations": ["CREATE", "UPDATE"]}]}
NO_PRIVILEGED = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
                 "metadata": {"name": "no-privileged"},
                 "spec": {"match": RULES, "validations": [{
                     "expression": "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))",
                     "message": "privileged containers are not allowed"}]}}
TEAM_LABEL = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
              "metadata": {"name": "team-label"},
              "spec": {"match": RULES, "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                  "expression": "{'metadata': {'labels': {'team': namespaceObject.metadata.labels.team}}}"}}]}}
#: Quadratic in the containers: cheap on one, far over the budget on the largest Pod that fits the body cap.
PAIRWISE = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
            "metadata": {"name": "unique-names"},
            "spec": {"match": RULES, "validations": [{
                "expression": "object.spec.containers.all(a, object.spec.containers.all(b, a == b || "
                              "a.name != b.name))"}]}}
#: Reads one field of its params ConfigMap, which holds another it must not show.
FORBIDDEN_NAME = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
                  "metadata": {"name": "forbidden-name"},
                  "spec": {"match": RULES, "paramRef": {"name": "shop", "namespace": "default"},
                           "validations": [{"expression": "object.metadata.name != params.data.forbidden"}]}}
SHOP_PARAMS = {"metadata": {"name": "shop", "namespace": "default", "labels": {"tollgate.dev/params": "true"}},
               "data": {"forbidden": "evil", "token": "s3cr3t"}}
POLICIES = (NO_PRIVILEGED, TEAM_LABEL, PAIRWISE, FORBIDDEN_NAME)


class Server:
    def __init__(self, url: str, session: aiohttp.ClientSession, app: web.Application) -> None:
        self.url, self.session, self.app = url, session, app

    async def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any, Any]:
        async with self.session.post(self.url + path, json=body, **kw) as resp:
            text = await resp.text()
            payload = await resp.json(content_type=None) if resp.content_type == "application/json" else text
            return resp.status, payload, resp.headers

    def endpoint(self) -> ExplainEndpoint:
        (route,) = [r for r in self.app.router.routes() if r.resource is not None
                    and r.resource.canonical == "/explain"]
        endpoint = route.handler.__self__  # type: ignore[union-attr]
        assert isinstance(endpoint, ExplainEndpoint)
        return endpoint


@pytest.fixture
async def server(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Server]:
    explain = getattr(request, "param", True)
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    fake = FakeApiServer()
    await fake.start()
    fake.apply("namespaces", {"metadata": {"name": "default", "labels": {"team": "a"}}})
    fake.apply("configmaps", SHOP_PARAMS)
    for policy in POLICIES:
        fake.apply("clusteradmissionpolicies.tollgate.dev", policy)
    settings = Settings(cert_file=paths.cert, key_file=paths.key, write_status=False, max_request_bytes=4 * 1024 * 1024,
                        manage_webhooks=False, eval_workers=0, explain=explain)
    client = api_client_for_url(fake.url)
    app = create_app(settings, api_client=client)
    runner, port = await serve_tls(app)
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        s = Server(f"https://localhost:{port}", session, app)
        for _ in range(500):
            async with session.get(s.url + "/readyz") as resp:
                if resp.status == 200 and len(app[COMPONENTS].index) == len(POLICIES):
                    break
            await asyncio.sleep(0.01)
        yield s
    await runner.cleanup()
    await client.close()
    await fake.stop()


async def test_the_explanation_agrees_with_validate_and_mutate(server: Server) -> None:
    bad = review(pod_create("bad", privileged=True))
    status, answer, _ = await server.post("/validate", bad)
    assert status == 200 and answer["response"]["allowed"] is False
    status, explained, _ = await server.post("/explain", bad)
    assert status == 200, explained
    assert (explained["kind"], explained["allowed"], explained["message"]) == (
        "Explanation", False, answer["response"]["status"]["message"])
    (policy,) = [p for p in explained["policies"] if p["policy"] == "no-privileged"]
    (validation,) = policy["validations"]
    failing = next(o for o in validation["operands"] if o["role"] == "elements failing the predicate")
    assert [c["name"] for c in failing["value"]] == ["app"]

    status, mutated, _ = await server.post("/mutate", bad)
    status, explained, _ = await server.post("/explain?endpoint=mutate", bad)
    assert status == 200 and explained["endpoint"] == "mutate"
    assert explained["patch"]["value"] == [{"op": "add", "path": "/metadata/labels", "value": {"team": "a"}}]
    assert mutated["response"]["patchType"] == "JSONPatch"


async def test_text_format_and_named_policies(server: Server) -> None:
    async with server.session.post(server.url + "/explain?format=text&policy=no-privileged",
                                   json=review(pod_create("bad", privileged=True))) as resp:
        assert resp.status == 200 and resp.content_type == "text/plain"
        text = await resp.text()
    lines = text.splitlines()
    assert lines[0] == "Pod default/bad CREATE by alice on /validate: denied"
    assert lines[1].startswith("  note: only the policies named by ?policy= are explained")
    assert "  no-privileged (validate): fail [Deny]" in lines
    assert all("unique-names" not in line for line in lines)
    status, body, _ = await server.post("/explain?policy=absent", review(pod_create()))
    assert status == 404 and "no policy 'absent'" in body["message"]


async def test_bad_requests_get_one_line_each(server: Server) -> None:
    cases = [("/explain?endpoint=delete", review(pod_create()), 400, "endpoint must be validate or mutate"),
             ("/explain", {"kind": "Nope"}, 400, "kind must be AdmissionReview")]
    for path, body, status, message in cases:
        got, answer, _ = await server.post(path, body)
        assert (got, message in answer["message"]) == (status, True), answer
    async with server.session.post(server.url + "/explain", data=b"{}", headers={"Content-Type": "text/yaml"}) as r:
        assert r.status == 415


async def test_a_body_over_the_explain_limit_is_413(server: Server) -> None:
    big = review(pod_create("big"))
    big["request"]["object"]["metadata"]["annotations"] = {"x": "y" * (1024 * 1024)}
    status, body, _ = await server.post("/explain", big)
    assert status == 413 and "the /explain limit" in body["message"]
    status, _, _ = await server.post("/validate", big)  # the review limit is the server's own (4 MiB here)
    assert status == 200


async def test_an_explanation_over_the_work_budget_is_refused_before_evaluating(server: Server) -> None:
    wide = review(pod_create("wide"))
    wide["request"]["object"]["spec"]["containers"] = [{"name": f"c{i}", "image": "i"} for i in range(3000)]
    status, body, _ = await server.post("/explain", wide)
    assert status == 413, body
    assert "over the budget of 50,000,000" in body["message"] and "?policy=" in body["message"]
    status, body, _ = await server.post("/explain?policy=no-privileged", wide)  # the cheap policy alone fits
    assert status == 200 and body["allowed"] is True


async def test_the_rate_limit_answers_429_with_retry_after(server: Server) -> None:
    server.endpoint().limiter = TokenBucket(rate=1e-6, burst=2)  # no refill within the test
    statuses = []
    for _ in range(3):
        status, _, headers = await server.post("/explain", review(pod_create()))
        statuses.append((status, headers.get("Retry-After") is not None))
    assert statuses == [(200, False), (200, False), (429, True)]


@pytest.mark.parametrize("server", [False], indirect=True)
async def test_off_by_default(server: Server) -> None:
    assert Settings().explain is False
    status, _, _ = await server.post("/explain", review(pod_create()))
    assert status == 404


async def test_with_client_ca_explain_needs_a_certificate_and_probes_do_not(tmp_path: Path) -> None:
    serving = certs.write_certs(tmp_path / "serving", dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    client_ca, cert, key = client_pki(tmp_path, "apiserver")
    async with fake_cluster() as api:
        app = create_app(Settings(cert_file=serving.cert, key_file=serving.key, client_ca=client_ca,
                                  write_status=False, manage_webhooks=False, eval_workers=0, explain=True),
                         api_client=api)
        runner, port = await serve_tls(app)
        url = f"https://localhost:{port}"
        try:
            anonymous = client_context(serving.ca)
            assert (await get(url + "/healthz", anonymous))[0] == 200
            status, text = await get(url + "/explain", anonymous, "POST", json=review(pod_create()))
            assert status == 401 and "client certificate" in text
            for _ in range(500):
                status, text = await get(url + "/explain", client_context(serving.ca, cert, key), "POST",
                                         json=review(pod_create()))
                if status != 503:  # until the policy caches have synced
                    break
                await asyncio.sleep(0.01)
            assert status == 200 and '"kind":"Explanation"' in text
        finally:
            await runner.cleanup()


async def test_params_not_read_are_absent_from_the_explanation(server: Server) -> None:
    status, explained, _ = await server.post("/explain?policy=forbidden-name", review(pod_create("evil")))
    assert status == 200 and explained["allowed"] is False, explained
    (policy,) = explained["policies"]
    assert policy.get("params", {}).get("value") == {"data": {"forbidden": "evil"}}, policy
    assert "s3cr3t" not in str(explained) and "token" not in str(explained)


async def test_probes_and_reviews_are_answered_while_an_explanation_is_computed(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The explanation holds its thread until /healthz and /validate have answered: on the loop, it would hold those."""
    import threading

    import webhook.admission.explain as module

    loop = asyncio.get_running_loop()
    started, release = asyncio.Event(), threading.Event()
    order: list[str] = []
    real = module.explain

    def held(*args: Any, **kwargs: Any) -> Any:
        loop.call_soon_threadsafe(started.set)
        release.wait(30)  # a liveness bound only: the test releases it as soon as the probes answered
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "explain", held)

    async def explanation() -> None:
        status, _, _ = await server.post("/explain?policy=forbidden-name", review(pod_create("evil")))
        order.append(f"explain {status}")

    task = asyncio.create_task(explanation())
    await started.wait()
    async with server.session.get(server.url + "/healthz") as resp:
        order.append(f"healthz {resp.status}")
    status, answer, _ = await server.post("/validate", review(pod_create("evil")))
    order.append(f"validate {status} {answer['response']['allowed']}")
    release.set()
    await task
    assert order == ["healthz 200", "validate 200 False", "explain 200"]
