"""AdmissionReviews as the API server sends them, over a real TLS connection to ``create_app``.

Policies, Namespaces and ConfigMaps arrive through the real Reflector and
SharedInformer (fed by the fake API server over HTTP); the captured kubewarden
requests are real kube-apiserver input.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import shutil
import ssl
from typing import Any

import aiohttp
import pytest

from tests.component.server.conftest import Served
from tests.fixtures import fixture_dir
from webhook.policy.resources import CLUSTER_POLICIES
from webhook.server.app import CERTS, COMPONENTS
from webhook.tls import generate as certs

PRIVILEGED_POLICY: dict[str, Any] = {
    "apiVersion": "tollgate.dev/v1alpha1",
    "kind": "ClusterAdmissionPolicy",
    "metadata": {"name": "no-privileged"},
    "spec": {
        "autogen": {"podControllers": True},
        "match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                     "operations": ["CREATE", "UPDATE"]}]},
        "variables": [{"name": "all", "expression": "object.spec.containers + object.spec.?initContainers.orValue([])"
                                                    " + object.spec.?ephemeralContainers.orValue([])"}],
        "validations": [{"expression": "variables.all.all(c, !c.?securityContext.?privileged.orValue(false))",
                         "messageExpression": "'privileged: ' + variables.all.filter(c, "
                                              "c.?securityContext.?privileged.orValue(false))"
                                              ".map(c, c.name).join(',')"}],
    },
}
LABEL_POLICY = {
    "apiVersion": "tollgate.dev/v1alpha1",
    "kind": "ClusterAdmissionPolicy",
    "metadata": {"name": "add-team"},
    "spec": {
        "match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                     "operations": ["CREATE"]}]},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": "{'metadata': {'labels': {'team': namespaceObject.metadata.labels.team}}}"}}],
    },
}


def review(request: dict[str, Any], api_version: str = "admission.k8s.io/v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def pod_create(name: str = "web", privileged: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "registry.example.com/app:1"}
    if privileged:
        container["securityContext"] = {"privileged": True}
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"containers": [container]}}
    return {
        "uid": f"uid-{name}",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": name, "namespace": "default", "operation": "CREATE",
        "userInfo": {"username": "alice", "uid": "u-1", "groups": ["dev", "system:authenticated"],
                     "extra": {"scopes": ["x"]}},
        "object": obj, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions",
                    "fieldManager": "kubectl-client-side-apply"},
    }


async def start(served: Served, *policies: dict[str, Any]) -> None:
    for p in policies:
        await served.cluster.apply("clusteradmissionpolicies.tollgate.dev", p)
    await served.wait_ready()
    for _ in range(100):  # the index is filled by the policy handler task, right after the store
        if len(served.app[COMPONENTS].index) == len(policies):
            return
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("name", ["no_privileged_containers", "privileged_container", "privileged_init_container",
                                  "privileged_ephemeral_container", "deployment_with_privileged_containers",
                                  "statefulset_with_privileged_container"])
async def test_captured_kube_apiserver_requests(served: Served, name: str) -> None:
    request = json.loads((fixture_dir("kubewarden-admission-requests") / f"{name}.json").read_text())
    await start(served, PRIVILEGED_POLICY)
    status, body = await served.post("/validate?timeout=10s", review(request))
    assert status == 200
    response = body["response"]
    assert response["uid"] == request["uid"]
    # kubewarden's README: only no_privileged_containers is allowed under baseline.
    assert response["allowed"] is (name == "no_privileged_containers")
    if not response["allowed"]:
        assert response["status"]["code"] == 422  # no reason given: Invalid, as in VAP
        assert "no-privileged: " in response["status"]["message"]
        assert "privileged: " in response["status"]["message"]


async def test_every_request_shape(served: Served) -> None:
    await start(served, PRIVILEGED_POLICY)
    # Pod CREATE with every request field, answered in v1 and in v1beta1.
    for version in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1"):
        status, body = await served.post("/validate", review(pod_create("bad", True), version))
        assert status == 200 and body["apiVersion"] == version and body["response"]["allowed"] is False
    # Deployment UPDATE with oldObject (autogen on the template).
    template = pod_create("t", True)["object"]
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
              "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": template["spec"]}}}
    update = dict(pod_create("d"), kind={"group": "apps", "version": "v1", "kind": "Deployment"},
                  resource={"group": "apps", "version": "v1", "resource": "deployments"}, operation="UPDATE",
                  object=deploy, oldObject=copy.deepcopy(deploy), uid="uid-update")
    status, body = await served.post("/validate", review(update))
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["message"].startswith("no-privileged: spec.template: ")
    # DELETE with object null: not matched by a CREATE/UPDATE policy.
    delete = dict(pod_create("x"), operation="DELETE", object=None, oldObject=pod_create("x", True)["object"],
                  uid="uid-delete")
    status, body = await served.post("/validate", review(delete))
    assert body["response"] == {"uid": "uid-delete", "allowed": True}
    # dryRun decides the same.
    status, body = await served.post("/validate", review(dict(pod_create("dry", True), dryRun=True)))
    assert body["response"]["allowed"] is False
    # pods/exec CONNECT.
    connect = dict(pod_create("e"), operation="CONNECT", subResource="exec", object={
        "kind": "PodExecOptions", "apiVersion": "v1", "stdin": True, "command": ["sh"]}, uid="uid-exec")
    status, body = await served.post("/validate", review(connect))
    assert body["response"] == {"uid": "uid-exec", "allowed": True}


INVALID_POLICY: dict[str, Any] = {
    "apiVersion": "tollgate.dev/v1alpha1",
    "kind": "ClusterAdmissionPolicy",
    "metadata": {"name": "needs-team"},
    "spec": {
        "match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                     "operations": ["CREATE"]}]},
        "validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                         "message": "a team label is required", "reason": "Invalid"}],
    },
}


async def test_an_invalid_denial_is_422_with_the_details_kubectl_prints(served: Served) -> None:
    await start(served, INVALID_POLICY, PRIVILEGED_POLICY)
    status, body = await served.post("/validate", review(pod_create("web", privileged=True)))
    assert status == 200
    response = body["response"]
    assert response["allowed"] is False
    assert (response["status"]["code"], response["status"]["reason"]) == (422, "Invalid")
    assert response["status"]["details"] == {
        "name": "web", "group": "", "kind": "pods",
        "causes": [{"message": "needs-team: a team label is required"},
                   {"message": "no-privileged: privileged: app"}]}


async def test_mutating_endpoint_returns_a_jsonpatch(served: Served) -> None:
    await start(served, LABEL_POLICY)
    status, body = await served.post("/mutate", review(pod_create("m")))
    response = body["response"]
    assert status == 200 and response["allowed"] and response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/metadata/labels", "value": {"team": "a"}}]


async def applied(served: Served) -> None:
    """Wait (polling the informer, not the webhook) until the policy informer delivered the cluster's latest RV."""
    inf = served.app[COMPONENTS].informer(CLUSTER_POLICIES)
    for _ in range(500):
        if inf.last_sync_resource_version == str(served.cluster.rv) and inf.handlers_idle():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("the policy informer never caught up")


async def test_policy_edit_changes_the_very_next_decision(served: Served) -> None:
    await start(served, PRIVILEGED_POLICY)
    _, body = await served.post("/validate", review(pod_create("p", True)))
    assert body["response"]["allowed"] is False
    relaxed: dict[str, Any] = copy.deepcopy(PRIVILEGED_POLICY)
    relaxed["spec"]["validations"][0]["expression"] = "true"
    await served.cluster.apply("clusteradmissionpolicies.tollgate.dev", relaxed)
    # Once the edit has reached the informer's handlers, the very next review is decided by it: no retry.
    await applied(served)
    _, body = await served.post("/validate", review(pod_create("p", True)))
    assert body["response"]["allowed"] is True
    await served.cluster.apply("clusteradmissionpolicies.tollgate.dev", PRIVILEGED_POLICY)
    await applied(served)
    _, body = await served.post("/validate", review(pod_create("p", True)))
    assert body["response"]["allowed"] is False
    await served.cluster.delete("clusteradmissionpolicies.tollgate.dev", "no-privileged")
    await applied(served)
    _, body = await served.post("/validate", review(pod_create("p", True)))
    assert body["response"]["allowed"] is True


@pytest.mark.parametrize(("body", "headers", "status", "reason"), [
    (b"", {"Content-Type": "application/json"}, 400, "empty body"),
    (b"{not json", {"Content-Type": "application/json"}, 400, "malformed JSON"),
    (b"[]", {"Content-Type": "application/json"}, 400, "must be a JSON object"),
    (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}', {"Content-Type": "application/json"}, 400,
     "request is missing"),
    (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"operation":"CREATE"}}',
     {"Content-Type": "application/json"}, 400, "uid is missing"),
    (b'{"kind":"Pod","apiVersion":"v1"}', {"Content-Type": "application/json"}, 400, "kind must be AdmissionReview"),
    (b'{"kind":"AdmissionReview","apiVersion":"v2"}', {"Content-Type": "application/json"}, 400, "apiVersion"),
    (b"{}", {"Content-Type": "text/plain"}, 415, "Content-Type"),
    (b"x" * (1024 * 1024 + 10), {"Content-Type": "application/json"}, 413, "exceeds"),
])
async def test_malformed_calls_get_4xx_with_a_reason(served: Served, body: bytes, headers: dict[str, str],
                                                     status: int, reason: str) -> None:
    await start(served)
    got_status, got = await served.post("/validate", body, headers=headers)
    assert got_status == status
    assert reason in got["message"]


async def test_readyz_metrics_and_healthz(served: Served) -> None:
    await start(served, PRIVILEGED_POLICY)
    async with served.session.get(served.url + "/readyz") as resp:
        detail = await resp.json()
    assert detail["ready"] and detail["policies"] == {"no-privileged": {"ready": True, "reason": "Compiled"}}
    assert detail["caches"]["namespaces"]["objects"] == 1
    await served.post("/validate", review(pod_create("bad", True)))
    async with served.session.get(served.url + "/metrics") as resp:
        text = await resp.text()
    assert 'tollgate_admission_requests_total{decision="denied",endpoint="validate"} 1.0' in text
    assert 'tollgate_policy_evaluations_total{policy="no-privileged",result="fail"} 1.0' in text
    assert 'tollgate_informer_synced{resource="namespaces"} 1.0' in text
    assert 'tollgate_event_loop_lag_seconds_count' in text
    # The fixture's certificate is valid for one day.
    expiry = float(next(line.split()[1] for line in text.splitlines()
                        if line.startswith("tollgate_certificate_expiry_seconds ")))
    assert 86400 - 600 < expiry <= 86400
    assert 'tollgate_informer_cache_age_seconds{resource="namespaces"}' in text
    assert 'tollgate_informer_staleness_seconds{resource="namespaces"}' in text
    assert ('tollgate_informer_handler_queue_depth{handler="policy-index",'
            'resource="clusteradmissionpolicies.tollgate.dev"} 0.0') in text
    async with served.session.get(served.url + "/healthz") as resp:
        assert resp.status == 200


async def test_certificate_rotation_keeps_serving_and_rejects_a_bad_pair(served: Served) -> None:
    await start(served)
    reloader = served.app[CERTS]
    old_expiry = reloader.expiry
    # A half-written pair: the new certificate with the old key. Rejected, old pair kept.
    fresh = served.cert_dir / "fresh"
    certs.write_certs(fresh, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=2)
    shutil.copy(fresh / "tls.crt", served.cert_dir / "tls.crt")
    assert reloader.reload_if_changed() is False
    status, _ = await served.post("/validate", review(pod_create()))
    assert status == 200
    # Now the full new pair (its CA is a different one, so trust both for the check).
    shutil.copy(fresh / "tls.key", served.cert_dir / "tls.key")
    assert reloader.reload_if_changed() is True
    assert reloader.expiry > old_expiry
    ctx = ssl.create_default_context(cafile=str(fresh / "ca.crt"))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as fresh_session, \
            fresh_session.post(served.url + "/validate", json=review(pod_create())) as resp:
        assert resp.status == 200
    async with served.session.get(served.url + "/metrics") as resp:
        text = await resp.text()
    assert 'tollgate_certificate_reloads_total{result="rejected"} 1.0' in text
    assert 'tollgate_certificate_reloads_total{result="success"} 1.0' in text
