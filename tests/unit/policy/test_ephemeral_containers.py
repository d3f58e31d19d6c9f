"""``pods/ephemeralcontainers`` as API servers send it: the Pod (1.22+) or an EphemeralContainers object (before)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.policy.helpers import request
from webhook.files.yamlio import load_file
from webhook.policy import InMemoryLookups, compile_policy, evaluate_mutating, evaluate_validating

POLICY = Path(__file__).resolve().parents[3] / "policies" / "pod-security" / "baseline" \
    / "disallow-privileged-containers.yaml"

DEBUGGER = {"name": "debugger", "image": "busybox", "securityContext": {"privileged": True}}


def _policy() -> Any:
    [doc] = load_file(POLICY)
    compiled = compile_policy(doc.obj).policy
    assert compiled is not None
    return compiled


def _pod(ephemeral: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "nginx"}], "ephemeralContainers": ephemeral}}


def _legacy(ephemeral: list[dict[str, Any]]) -> dict[str, Any]:
    """What a 1.20 API server sends for kubectl debug: kind EphemeralContainers, no spec."""
    return {"apiVersion": "v1", "kind": "EphemeralContainers", "metadata": {"name": "web", "namespace": "default"},
            "ephemeralContainers": ephemeral}


@pytest.mark.parametrize("shape", [_pod, _legacy], ids=["pod", "ephemeralcontainers-object"])
def test_a_privileged_debug_container_is_denied_by_the_rule(shape: Any) -> None:
    req = request(shape([DEBUGGER]), old=shape([]), operation="UPDATE", sub_resource="ephemeralcontainers",
                  kind=shape([])["kind"])
    out = evaluate_validating(req, [_policy()], InMemoryLookups())
    assert not out.allowed
    assert "privileged containers are not allowed: debugger" in out.message, out.message  # the rule, not an error


@pytest.mark.parametrize("shape", [_pod, _legacy], ids=["pod", "ephemeralcontainers-object"])
def test_a_plain_debug_container_is_admitted(shape: Any) -> None:
    plain = {"name": "debugger", "image": "busybox"}
    req = request(shape([plain]), old=shape([]), operation="UPDATE", sub_resource="ephemeralcontainers",
                  kind=shape([])["kind"])
    out = evaluate_validating(req, [_policy()], InMemoryLookups())
    assert out.allowed, out.message


def test_mutations_leave_the_legacy_object_alone() -> None:
    mutating = compile_policy({
        "apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy", "metadata": {"name": "m"},
        "spec": {"match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                              "resources": ["pods/ephemeralcontainers"], "operations": ["UPDATE"]}]},
                 "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                     "expression": "[{'op': 'add', 'path': '/metadata/labels', 'value': {'x': 'y'}}]"}}]}}).policy
    assert mutating is not None
    req = request(_legacy([DEBUGGER]), old=_legacy([]), operation="UPDATE", sub_resource="ephemeralcontainers",
                  kind="EphemeralContainers")
    out = evaluate_mutating(req, [mutating], InMemoryLookups())
    assert out.allowed and out.patch == []
