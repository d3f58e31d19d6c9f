"""Objects and kubectl conventions shared by the realapi tests.

The Pod, Deployment and message helpers are the kind suite's too (tests/cluster_objects.py): they read the
shipped policies' own wording.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

from tests.cluster_objects import (
    allowed_registry,
    compliant_pod,
    configmap,
    deployment_of,
    image_in,
    ingress,
    messages,
    privileged,
    shipped,
)
from tests.realapi.tollgate import Deployment, Tollgate

__all__ = [
    "DENIED",
    "allowed_registry",
    "assert_admitted",
    "assert_denied",
    "compliant_pod",
    "configmap",
    "deployment_of",
    "image_in",
    "ingress",
    "messages",
    "new_namespace",
    "privileged",
    "shipped",
    "unique",
]

DENIED = 'admission webhook "validate.tollgate.dev" denied the request'
#: gatekeeper-required-labels (a shipped example) wants every Namespace to carry such an owner.
OWNER = "realapi.agilebank.demo"


def unique(prefix: str) -> str:
    """A DNS-1123 name unique to this run."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def new_namespace(deployment: Deployment, prefix: str, labels: dict[str, str] | None = None) -> str:
    """A fresh namespace, labelled as 1.21+ servers label every namespace (``kubernetes.io/metadata.name``)."""
    name = unique(prefix)
    meta = {"name": name, "labels": {"kubernetes.io/metadata.name": name, "team": "e2e", "owner": OWNER,
                                     **(labels or {})}}
    deployment.kubectl("create", "-f", "-", obj={"apiVersion": "v1", "kind": "Namespace", "metadata": meta},
                       check=True)
    return name


def assert_admitted(result: subprocess.CompletedProcess[str]) -> None:
    """kubectl succeeded."""
    assert result.returncode == 0, result.stderr


def assert_denied(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """kubectl failed with Tollgate's validating webhook's denial carrying every fragment."""
    assert result.returncode != 0, f"expected a denial, got: {result.stdout}"
    assert DENIED in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in {result.stderr!r}"


def pod_review(pod: dict[str, Any], *, operation: str = "CREATE", user: str = "admin") -> dict[str, Any]:
    """An AdmissionReview of ``pod`` as the API server would send it to /validate (for direct POSTs)."""
    meta = pod["metadata"]
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": meta["name"], "namespace": meta["namespace"], "operation": operation,
        "userInfo": {"username": user, "groups": ["system:masters", "system:authenticated"]},
        "object": json.loads(json.dumps(pod)), "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def answer(tollgate: Tollgate, pod: dict[str, Any]) -> dict[str, Any]:
    """Tollgate's AdmissionReview response for creating ``pod``, posted to its /validate."""
    status, body = tollgate.review(pod_review(pod))
    assert status == 200, body
    return dict(body["response"])


def denial(response: dict[str, Any]) -> str:
    """``status.message`` of a response (every denying policy's message; empty when admitted)."""
    return str((response.get("status") or {}).get("message", ""))
