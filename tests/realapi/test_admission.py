"""Decisions through the real API server: kubectl 1.20 → kube-apiserver → Tollgate (by URL) → etcd."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster_objects import eventually
from tests.realapi.helpers import (
    DENIED,
    allowed_registry,
    assert_admitted,
    assert_denied,
    compliant_pod,
    deployment_of,
    image_in,
    messages,
    new_namespace,
    pod_review,
    privileged,
    shipped,
    unique,
)
from tests.realapi.tollgate import Deployment


def create(deployment: Deployment, obj: dict[str, Any], *extra: str) -> Any:
    return deployment.kubectl("create", "-f", "-", *extra, obj=obj)


def stored(deployment: Deployment, kind: str, name: str, namespace: str) -> dict[str, Any]:
    return dict(json.loads(deployment.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=True).stdout))


@pytest.fixture(scope="module")
def namespace(deployment: Deployment) -> str:
    return new_namespace(deployment, "admission")


def test_privileged_pod_is_denied_with_every_failing_policys_message(deployment: Deployment, namespace: str) -> None:
    pod = compliant_pod(namespace, unique("priv"))
    pod["spec"]["containers"][0]["securityContext"].update({"privileged": True, "allowPrivilegeEscalation": True})
    result = create(deployment, pod)
    priv, escalation = (shipped("ClusterAdmissionPolicy", n)
                        for n in ("disallow-privileged-containers", "disallow-privilege-escalation"))
    assert_denied(result, f"disallow-privileged-containers: {messages(priv)[0]}app (securityContext.privileged=true)",
                  f"disallow-privilege-escalation: {messages(escalation)[0]}")
    assert deployment.kubectl("get", "pod", pod["metadata"]["name"], "-n", namespace).returncode != 0


def test_compliant_pod_is_admitted_and_stored_with_the_mutations(deployment: Deployment, namespace: str) -> None:
    name = unique("good")
    result = create(deployment, compliant_pod(namespace, name))
    assert_admitted(result)
    assert "Warning" not in result.stderr, result.stderr
    meta = stored(deployment, "pod", name, namespace)["metadata"]
    # add-default-labels: a JSONPatch and an ApplyConfiguration reading namespaceObject and request.userInfo.
    assert meta["labels"].get("tollgate.dev/managed") == "true", meta
    assert meta["labels"].get("team") == "e2e", meta
    assert meta.get("annotations", {}).get("tollgate.dev/created-by") == "admin", meta


def test_deployment_is_judged_by_its_pod_template(deployment: Deployment, namespace: str) -> None:
    policy = shipped("ClusterAdmissionPolicy", "disallow-privileged-containers")
    denied = create(deployment, deployment_of(privileged(compliant_pod(namespace, unique("dep")))))
    assert_denied(denied, f"disallow-privileged-containers: spec.template: {messages(policy)[0]}")
    assert_admitted(create(deployment, deployment_of(compliant_pod(namespace, unique("dep")))))


def test_warn_policy_warning_is_shown_by_kubectl(deployment: Deployment, namespace: str) -> None:
    policy = shipped("ClusterAdmissionPolicy", "disallow-latest-tag")
    assert policy["spec"]["validationActions"] == ["Warn"]
    result = create(deployment, compliant_pod(namespace, unique("latest"),
                                              image=image_in(allowed_registry(), "pause:latest")))
    assert_admitted(result)
    assert f"Warning: disallow-latest-tag: {messages(policy)[0]}" in result.stderr, result.stderr


def test_ephemeral_container_is_judged_through_the_subresource(deployment: Deployment, namespace: str) -> None:
    """An ephemeral container may not escalate privileges either (restricted set). A 1.20 server forbids
    securityContext on ephemeral containers itself, so the container here simply leaves it unset, which
    disallow-privilege-escalation denies (allowPrivilegeEscalation must be false)."""
    policy = shipped("ClusterAdmissionPolicy", "disallow-privilege-escalation")
    name = unique("target")
    assert_admitted(create(deployment, compliant_pod(namespace, name)))
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/ephemeralcontainers"
    current = deployment.cluster.request("GET", path)
    assert current.status == 200, current.body
    body = current.json()  # 1.20: kind EphemeralContainers (1.22+: the Pod)
    body["ephemeralContainers"] = [{"name": "debug", "image": image_in(allowed_registry(), "busybox:1.36"),
                                    "targetContainerName": "app", "terminationMessagePolicy": "File"}]
    answer = deployment.cluster.request("PUT", path, body)
    after = deployment.cluster.request("GET", path).json().get("ephemeralContainers") or []
    message = answer.json().get("message", "")
    assert answer.status >= 400 and DENIED in message, (answer.status, message)
    assert f"disallow-privilege-escalation: {messages(policy)[0]}" in message, message
    assert after == [], after


def _audit_event(deployment: Deployment, namespace: str, name: str) -> dict[str, Any]:
    for event in deployment.cluster.audit_events():
        ref = event.get("objectRef") or {}
        if (event.get("stage") == "ResponseComplete" and event.get("verb") == "create"
                and ref.get("resource") == "pods" and not ref.get("subresource")
                and ref.get("namespace") == namespace and ref.get("name") == name):
            return event
    raise AssertionError(f"no audit event for creating pod {namespace}/{name}")


def test_audit_annotations_reach_the_api_servers_audit_log(deployment: Deployment) -> None:
    """In namespace default: allowed-registries' auditAnnotations and kyverno-disallow-default-namespace's
    Audit result. The keys Tollgate means are those of its answer to the same Pod, posted to it directly;
    the API server logs each under ``<webhook name>/<key>``, or drops it (and says so in its log)."""
    assert deployment.tollgate is not None
    pod = compliant_pod("default", unique("audited"))
    _, direct = deployment.tollgate.review(pod_review(pod))
    meant = direct["response"].get("auditAnnotations") or {}
    assert len(meant) >= 2, direct["response"]  # the precondition: Tollgate does annotate this Pod

    assert_admitted(create(deployment, pod))
    event = eventually(lambda: _audit_event(deployment, "default", pod["metadata"]["name"]))
    annotations = event.get("annotations") or {}
    logged = {key.split("/", 1)[1]: value for key, value in annotations.items()
              if key.split("/", 1)[0] in ("validate.tollgate.dev", "validate-ignore.tollgate.dev")}
    assert logged == meant, {"meant": meant, "audit log": annotations}
    assert "annotation key has invalid format" not in deployment.cluster.apiserver_log.read_text(errors="replace")
