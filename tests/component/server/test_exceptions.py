"""PolicyExceptions served: the fake API server's exception reaches the TLS webhook through its informer.

An exempted Pod is admitted with ``skip`` and the ``exceptions`` audit annotation; a Pod of another
namespace is still denied; once ``expiresAt`` passes (the handler's clock, injected) the same Pod is
denied with no watch event in between.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from tests.component.server.conftest import Served, serve_tls, until
from tests.component.server.test_admission_tls import PRIVILEGED_POLICY, pod_create, review, start
from tests.fakeapi.server import STATUS_RESOURCES, FakeApiServer
from webhook.admission.isolation.evaluators import IsolatedEvaluator
from webhook.kube.client import api_client_for_url
from webhook.server.app import COMPONENTS, create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

EXPIRES = datetime.datetime(2026, 11, 28, 6, 0, tzinfo=datetime.UTC)
EXCEPTION: dict[str, Any] = {
    "apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
    "metadata": {"name": "debug-pods", "namespace": "default"},
    "spec": {"policies": [{"name": "no-privileged"}], "reason": "OPS-42: debugging node networking",
             "expiresAt": "2026-11-28T06:00:00Z",
             "matchConditions": [{"name": "debug-pods", "expression": "object.metadata.name.startsWith('debug')"}]},
}


def in_namespace(name: str, namespace: str) -> dict[str, Any]:
    request = pod_create(name, privileged=True)
    request["namespace"] = request["object"]["metadata"]["namespace"] = namespace
    return request


async def exception_loaded(served: Served) -> None:
    await served.cluster.apply("policyexceptions.tollgate.dev", EXCEPTION)

    async def loaded() -> bool:
        return bool(served.app[COMPONENTS].exceptions.current)

    await until(loaded)


async def test_exempted_pod_is_admitted_with_skip_until_expiry(served: Served) -> None:
    now = [EXPIRES - datetime.timedelta(minutes=1)]
    served.app[COMPONENTS].server.handler.clock = lambda: now[0]
    served.cluster.fake.apply("namespaces", {"metadata": {"name": "team-b"}})
    await start(served, PRIVILEGED_POLICY)
    await exception_loaded(served)

    status, body = await served.post("/validate", review(pod_create("debug-1", privileged=True)))
    response = body["response"]
    assert status == 200 and response["allowed"] is True
    assert json.loads(response["auditAnnotations"]["exceptions"]) == [
        {"policy": "no-privileged", "exception": "PolicyException default/debug-pods", "result": "skip"}]

    # Not every Pod: the exception's matchCondition selects the debug Pods only.
    _, body = await served.post("/validate", review(pod_create("web", privileged=True)))
    assert body["response"]["allowed"] is False
    # A tenant's exception never reaches another namespace.
    _, body = await served.post("/validate", review(in_namespace("debug-1", "team-b")))
    assert body["response"]["allowed"] is False

    async with served.session.get(served.url + "/metrics") as resp:
        text = await resp.text()
    assert ('tollgate_policy_exceptions_applied_total{exception="PolicyException default/debug-pods",'
            'policy="no-privileged",result="skip"} 1.0') in text

    # expiresAt passes: the very next review is denied, with no watch event in between.
    rv = served.cluster.rv
    now[0] = EXPIRES
    _, body = await served.post("/validate", review(pod_create("debug-1", privileged=True)))
    assert body["response"]["allowed"] is False
    assert "exceptions" not in (body["response"].get("auditAnnotations") or {})
    assert served.cluster.rv == rv


async def test_a_deleted_exception_exempts_nothing(served: Served) -> None:
    served.app[COMPONENTS].server.handler.clock = lambda: EXPIRES - datetime.timedelta(days=1)
    await start(served, PRIVILEGED_POLICY)
    await exception_loaded(served)
    _, body = await served.post("/validate", review(pod_create("debug-1", privileged=True)))
    assert body["response"]["allowed"] is True
    await served.cluster.delete("policyexceptions.tollgate.dev", "default/debug-pods")

    async def gone() -> bool:
        return not served.app[COMPONENTS].exceptions.current

    await until(gone)
    _, body = await served.post("/validate", review(pod_create("debug-1", privileged=True)))
    assert body["response"]["allowed"] is False


async def test_the_leader_reports_unknown_policy_until_the_policy_comes(tmp_path: Path) -> None:
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    fake = FakeApiServer(status_resources=STATUS_RESOURCES | {"policyexceptions", "clusterpolicyexceptions"})
    await fake.start()
    client = api_client_for_url(fake.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=True, pod_name="r1",
                              manage_webhooks=False, eval_workers=0), api_client=client)
    runner, _port = await serve_tls(app)
    try:
        fake.apply("policyexceptions", EXCEPTION)

        def reason() -> Any:
            stored = fake.get("policyexceptions", "default/debug-pods") or {}
            return [c["reason"] for c in (stored.get("status") or {}).get("conditions") or []]

        async def unknown() -> bool:
            return reason() == ["UnknownPolicy"]

        await until(unknown)
        fake.apply("clusteradmissionpolicies", PRIVILEGED_POLICY)

        async def compiled_or_expired() -> bool:
            return reason() in (["Compiled"], ["Expired"])  # Expired once the wall clock passes EXPIRES

        await until(compiled_or_expired)
    finally:
        await runner.cleanup()
        await client.close()
        await fake.stop()


async def test_a_review_decided_in_an_evaluation_worker_is_exempted_alike(served_in_workers: Served) -> None:
    # Large reviews go to worker processes (here every review): the exception, its expiry against the
    # server's clock, the annotation and the metric must be those of a review decided inline.
    served = served_in_workers
    now = [EXPIRES - datetime.timedelta(minutes=1)]
    served.app[COMPONENTS].server.handler.clock = lambda: now[0]
    await start(served, PRIVILEGED_POLICY)
    await exception_loaded(served)
    assert isinstance(served.app[COMPONENTS].server.evaluator, IsolatedEvaluator)  # every review in a worker
    status, body = await served.post("/validate", review(pod_create("debug-1", privileged=True)))
    assert status == 200 and body["response"]["allowed"] is True, body
    assert json.loads(body["response"]["auditAnnotations"]["exceptions"]) == [
        {"policy": "no-privileged", "exception": "PolicyException default/debug-pods", "result": "skip"}]
    _, body = await served.post("/validate", review(pod_create("web", privileged=True)))
    assert body["response"]["allowed"] is False
    async with served.session.get(served.url + "/metrics") as resp:
        text = await resp.text()
    assert ('tollgate_policy_exceptions_applied_total{exception="PolicyException default/debug-pods",'
            'policy="no-privileged",result="skip"} 1.0') in text
    now[0] = EXPIRES  # the worker compares with the server's time, not its own
    _, body = await served.post("/validate", review(pod_create("debug-1", privileged=True)))
    assert body["response"]["allowed"] is False
