"""The shipped Pod Security policies cover the Pod subresources Pod Security Admission covers.

Pod Security Admission (k8s.io/pod-security-admission, ``admission.go``) evaluates a request for
``pods`` with no subresource or with any subresource but the ignored ones (``exec``, ``attach``,
``binding``, ``eviction``, ``log``, ``portforward``, ``proxy``, ``status``), and never a pod
controller's subresource. The one Pod subresource whose object is the whole Pod and that adds
containers is ``ephemeralcontainers``: ``kubectl debug`` PATCHes it, and admission sees an UPDATE
of ``pods/ephemeralcontainers`` with the Pod (new ephemeral container included) as ``object``.

The requests here go through :class:`AdmissionHandler` (index, plan, engine), as the server
answers them; the suite of TestSuite expectations in ``policies/pod-security/test.yaml`` runs
through ``tollgate test``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.admission.handler import AdmissionHandler
from webhook.cli.main import main
from webhook.policy import PolicyIndex
from webhook.policy.lookups import InMemoryLookups
from webhook.policy.matching import POD_CONTROLLERS, rules_view
from webhook.policy.model import parse_policy
from webhook.policy.request import RequestCoordinates

ROOT = Path(__file__).resolve().parents[3]
POD_SECURITY = ROOT / "policies" / "pod-security"
FILES = sorted(p for p in POD_SECURITY.glob("*/*.yaml") if p.name != "kustomization.yaml")
#: Pod Security Admission's ignoredPodSubresources.
IGNORED = ("exec", "attach", "binding", "eviction", "log", "portforward", "proxy", "status")

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
    "spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
             "containers": [{"name": "app", "image": "registry.example.com/app:1.0",
                             "securityContext": {"allowPrivilegeEscalation": False,
                                                 "capabilities": {"drop": ["ALL"]}}}]},
}
#: What `kubectl debug -it web --image=busybox --profile=sysadmin` adds: privileged, root, SYS_ADMIN.
SYSADMIN_DEBUGGER = {"name": "debugger", "image": "registry.example.com/debug:1.0", "targetContainerName": "app",
                     "securityContext": {"privileged": True, "runAsUser": 0, "runAsNonRoot": False,
                                         "capabilities": {"add": ["SYS_ADMIN"]}}}
RESTRICTED_DEBUGGER = {"name": "debugger", "image": "registry.example.com/debug:1.0", "targetContainerName": "app",
                       "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}


def _policies() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in FILES]


def _handler() -> AdmissionHandler:
    index = PolicyIndex()
    for doc in _policies():
        assert index.upsert(doc).result.policy is not None, doc["metadata"]["name"]
    return AdmissionHandler(index, InMemoryLookups(namespaces=[{"metadata": {"name": "default"}}]))


def _debug_request(container: dict[str, Any], *, sub_resource: str = "ephemeralcontainers") -> dict[str, Any]:
    """The AdmissionRequest the API server sends for ``kubectl debug`` (subresource UPDATE; object the Pod)."""
    new = copy.deepcopy(POD)
    new["spec"]["ephemeralContainers"] = [container]
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    return {"uid": "debug-1", "kind": gvk, "resource": gvr, "subResource": sub_resource,
            "requestKind": gvk, "requestResource": gvr, "requestSubResource": sub_resource,
            "name": "web", "namespace": "default", "operation": "UPDATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": new, "oldObject": copy.deepcopy(POD), "dryRun": False, "options": None}


def test_there_is_a_policy_file_per_control() -> None:
    assert len(FILES) == 17


def test_kubectl_debug_with_a_privileged_root_sysadmin_container_is_denied() -> None:
    decision = _handler().validate(_debug_request(SYSADMIN_DEBUGGER))  # type: ignore[arg-type]
    assert decision.response["allowed"] is False
    failed = {r.policy for r in decision.results if r.result == "fail"}
    assert failed >= {"disallow-privileged-containers", "disallow-capabilities", "disallow-capabilities-strict",
                      "require-run-as-non-root-user", "require-run-as-nonroot", "disallow-privilege-escalation"}
    message = decision.response["status"]["message"]
    assert "privileged containers are not allowed: debugger (securityContext.privileged=true)" in message
    assert "debugger adds SYS_ADMIN" in message


def test_kubectl_debug_with_a_restricted_container_is_admitted_after_every_policy_ran() -> None:
    decision = _handler().validate(_debug_request(RESTRICTED_DEBUGGER))  # type: ignore[arg-type]
    assert decision.response["allowed"] is True, decision.response
    # Every shipped policy evaluated the subresource request (none skipped it).
    assert {r.policy for r in decision.results} == {d["metadata"]["name"] for d in _policies()}
    assert {r.result for r in decision.results} == {"pass"}


@pytest.mark.parametrize("sub_resource", IGNORED)
def test_subresources_pod_security_admission_ignores_are_not_matched(sub_resource: str) -> None:
    decision = _handler().validate(_debug_request(SYSADMIN_DEBUGGER, sub_resource=sub_resource))  # type: ignore[arg-type]
    assert decision.response["allowed"] is True
    assert not decision.results


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_policy_selects_exactly_pods_and_the_ephemeralcontainers_subresource(path: Path) -> None:
    spec = parse_policy(yaml.safe_load(path.read_text()))

    def selects(resource: str, sub_resource: str, operation: str, group: str = "") -> bool:
        coords = RequestCoordinates.of({"resource": {"group": group, "version": "v1", "resource": resource},
                                        "subResource": sub_resource, "operation": operation,
                                        "namespace": "default"})
        return rules_view(spec, coords) is not None

    assert selects("pods", "", "CREATE") and selects("pods", "", "UPDATE")
    assert selects("pods", "ephemeralcontainers", "UPDATE")
    assert not selects("pods", "", "DELETE")
    for sub_resource in IGNORED:
        for operation in ("CREATE", "UPDATE", "CONNECT"):
            assert not selects("pods", sub_resource, operation), (sub_resource, operation)
    # autogen: the controllers' own objects, never their subresources (scale, status).
    for group, resource in POD_CONTROLLERS:
        assert selects(resource, "", "CREATE", group) and selects(resource, "", "UPDATE", group)
        assert not selects(resource, "scale", "UPDATE", group) and not selects(resource, "status", "UPDATE", group)


def test_the_pod_security_test_suite_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(POD_SECURITY), "--output", "json"]) == 0, capsys.readouterr().err
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["ok"] for r in rows)
    assert {r["operation"] for r in rows} == {"UPDATE", "CREATE"}
