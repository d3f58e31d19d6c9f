"""Policy changes through the real watch: edits reach decisions, broken policies get a condition, tenants stay home."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster_objects import eventually
from tests.realapi.cluster import Response
from tests.realapi.helpers import DENIED, assert_admitted, configmap, new_namespace, unique
from tests.realapi.tollgate import Deployment

CONFIGMAPS = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
              "operations": ["CREATE", "UPDATE"]}


def forbidden_key(key: str, message: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A policy spec denying ConfigMaps in ``namespace`` that hold ``data[key]``."""
    return {"failurePolicy": "Fail", "validationActions": ["Deny"],
            "match": {"resourceRules": [CONFIGMAPS],
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            "validations": [{"expression": f"!has(object.data) || !('{key}' in object.data)", "message": message}],
            **spec}


def dry_run_configmap(deployment: Deployment, namespace: str, data: dict[str, str]) -> Response:
    """A server-side dry-run create through the API server: admission runs, nothing is stored."""
    return deployment.cluster.request("POST", f"/api/v1/namespaces/{namespace}/configmaps?dryRun=All",
                                      configmap(unique("cm"), namespace, data=data))


def denied_with(response: Response, fragment: str) -> bool:
    """Denied by Tollgate's validating webhook with ``fragment`` in the message."""
    return response.status >= 400 and DENIED in response.json()["message"] and fragment in response.json()["message"]


def assert_denied_with(response: Response, fragment: str) -> None:
    assert denied_with(response, fragment), (response.status, response.body[:600])


def ready_condition(deployment: Deployment, kind: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    policy = json.loads(deployment.kubectl("get", kind, name, "-o", "json", check=True).stdout)
    conditions = (policy.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c["type"] == "Ready"), {})
    return policy, ready


def test_a_policy_edit_reaches_the_next_decisions_through_the_watch(
        deployment: Deployment, report: Callable[[str], None]) -> None:
    """Edit the forbidden key back and forth with kubectl; after each PATCH returns, dry-run creates go through
    the API server until one is decided by the new rule: that delay is reported, not asserted."""
    namespace = new_namespace(deployment, "edit")
    name = unique("edit")
    deployment.add_policy(name, forbidden_key("forbidden", "realapi: forbidden key", namespace))
    eventually(lambda: assert_denied_with(dry_run_configmap(deployment, namespace, {"forbidden": "1"}),
                                          "realapi: forbidden key"))
    assert dry_run_configmap(deployment, namespace, {"banned": "1"}).status == 201

    delays = []
    for key in ("banned", "forbidden", "banned"):
        edit = forbidden_key(key, f"realapi: {key} key", namespace)["validations"]
        assert_admitted(deployment.kubectl("patch", "clusteradmissionpolicy", name, "--type=merge",
                                           "-p", json.dumps({"spec": {"validations": edit}})))
        edited = time.monotonic()
        while not denied_with(dry_run_configmap(deployment, namespace, {key: "1"}), f"realapi: {key} key"):
            assert time.monotonic() - edited < 30, f"the edit to {key!r} never reached a decision"
        delays.append((time.monotonic() - edited) * 1000)
        other = "forbidden" if key == "banned" else "banned"
        assert dry_run_configmap(deployment, namespace, {other: "1"}).status == 201
    report(f"policy edit -> decision through the watch: {', '.join(f'{d:.0f}' for d in delays)} ms after kubectl "
           "patch returned (polled with server-side dry-run creates, ~5 ms each)")


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
def test_a_broken_policy_is_not_ready_and_answered_per_its_failure_policy(
        deployment: Deployment, failure_policy: str) -> None:
    namespace = new_namespace(deployment, f"broken-{failure_policy.lower()}")
    name = unique("broken")
    spec = forbidden_key("x", "never evaluated", namespace, failurePolicy=failure_policy)
    spec["validations"][0]["expression"] = "objekt.data.size() == 0"
    deployment.add_policy(name, spec)

    def not_ready() -> dict[str, Any]:
        policy, ready = ready_condition(deployment, "clusteradmissionpolicy", name)
        assert ready.get("status") == "False", policy.get("status")
        return ready | {"generation": policy["metadata"]["generation"]}

    ready = eventually(not_ready)
    assert ready["reason"] == "CompileError", ready
    assert "objekt" in ready["message"] and "spec.validations[0].expression" in ready["message"], ready
    assert ready["observedGeneration"] == ready["generation"], ready

    answer = dry_run_configmap(deployment, namespace, {"k": "v"})
    if failure_policy == "Fail":
        assert_denied_with(answer, name)
    else:
        assert answer.status == 201, answer.body[:500]
    # Every other policy keeps working beside it.
    assert dry_run_configmap(deployment, new_namespace(deployment, "bystander"), {"k": "v"}).status == 201


# -- tenants ---------------------------------------------------------------------------------------------------------

NAMESPACES = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"],
              "operations": ["UPDATE", "DELETE"]}


def tenant_spec() -> dict[str, Any]:
    """A tenant's policy denying every ConfigMap it sees and every Namespace UPDATE/DELETE it sees."""
    return {"failurePolicy": "Fail", "validationActions": ["Deny"],
            "match": {"resourceRules": [CONFIGMAPS, NAMESPACES]},
            "validations": [{"expression": "false", "message": "realapi: tenant says no"}]}


@pytest.fixture(scope="module")
def tenant(deployment: Deployment) -> str:
    namespace = new_namespace(deployment, "tenant")
    deployment.add_policy("tenant-says-no", tenant_spec(), namespace=namespace)
    return namespace


def test_a_tenant_policy_judges_its_own_namespace_only(deployment: Deployment, tenant: str) -> None:
    eventually(lambda: assert_denied_with(dry_run_configmap(deployment, tenant, {"k": "v"}),
                                          "realapi: tenant says no"))
    neighbour = new_namespace(deployment, "neighbour")
    assert dry_run_configmap(deployment, neighbour, {"k": "v"}).status == 201


def test_a_tenant_policy_does_not_judge_the_namespace_object_itself(deployment: Deployment, tenant: str) -> None:
    eventually(lambda: assert_denied_with(dry_run_configmap(deployment, tenant, {"k": "v"}),
                                          "realapi: tenant says no"))  # the policy is in force
    path = f"/api/v1/namespaces/{tenant}?dryRun=All"
    relabel = deployment.cluster.request("PATCH", path, {"metadata": {"labels": {"realapi/relabelled": "yes"}}},
                                         content_type="application/merge-patch+json")
    delete = deployment.cluster.request("DELETE", path)
    assert relabel.status == 200, relabel.body[:600]
    assert delete.status == 200, delete.body[:600]
