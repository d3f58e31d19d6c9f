"""Events of denials and warnings on kube-apiserver 1.20, under the shipped RBAC: what ``kubectl get events``
shows after kubectl → kube-apiserver → Tollgate denied (or warned about) a Pod."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster_objects import eventually
from tests.realapi.helpers import (
    allowed_registry,
    assert_admitted,
    assert_denied,
    compliant_pod,
    image_in,
    new_namespace,
    privileged,
    unique,
)
from tests.realapi.tollgate import Deployment


@pytest.fixture(scope="module")
def namespace(deployment: Deployment) -> str:
    return new_namespace(deployment, "events")


def events(deployment: Deployment, namespace: str, name: str) -> list[dict[str, Any]]:
    """``kubectl get events`` of the object ``name`` in ``namespace``, as the admin."""
    out = deployment.kubectl("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}",
                             "-o", "json", check=True).stdout
    return list(json.loads(out)["items"])


def test_a_denied_pod_gets_a_policy_violation_event_and_a_repeat_counts(deployment: Deployment,
                                                                        namespace: str) -> None:
    pod = privileged(compliant_pod(namespace, unique("denied")))
    name = pod["metadata"]["name"]
    assert_denied(deployment.kubectl("create", "-f", "-", obj=pod), "disallow-privileged-containers")

    def written() -> dict[str, Any]:
        found = [e for e in events(deployment, namespace, name)
                 if e["message"].startswith("disallow-privileged-containers: ")]
        assert found, f"no event yet: {events(deployment, namespace, name)}"
        return found[0]

    event = eventually(written)
    assert (event["type"], event["reason"], event["count"]) == ("Warning", "PolicyViolation", 1)
    assert event["involvedObject"] == {"kind": "Pod", "apiVersion": "v1", "name": name, "namespace": namespace}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("tollgate", "tollgate-realapi-0")
    assert event["source"] == {"component": "tollgate"}
    # kubectl's own table: what a user reads.
    table = deployment.kubectl("get", "events", "-n", namespace, check=True).stdout
    assert f"pod/{name}" in table and "PolicyViolation" in table, table

    assert_denied(deployment.kubectl("create", "-f", "-", obj=pod))

    def counted() -> None:
        again = [e for e in events(deployment, namespace, name) if e["metadata"]["name"] == event["metadata"]["name"]]
        assert again and again[0]["count"] == 2, again

    eventually(counted)  # the same Event PATCHed (RBAC patch on events), not a second one


def test_a_warned_pod_gets_a_policy_warning_event(deployment: Deployment, namespace: str) -> None:
    pod = compliant_pod(namespace, unique("latest"), image=image_in(allowed_registry(), "pause:latest"))
    assert_admitted(deployment.kubectl("create", "-f", "-", obj=pod))

    def written() -> dict[str, Any]:
        found = [e for e in events(deployment, namespace, pod["metadata"]["name"]) if e["reason"] == "PolicyWarning"]
        assert found
        return found[0]

    event = eventually(written)
    assert event["message"].startswith("disallow-latest-tag: ") and event["type"] == "Warning"


def test_a_server_side_dry_run_writes_no_event(deployment: Deployment, namespace: str) -> None:
    dry = privileged(compliant_pod(namespace, unique("dry")))
    assert_denied(deployment.kubectl("create", "--dry-run=server", "-f", "-", obj=dry))
    real = privileged(compliant_pod(namespace, unique("real")))
    assert_denied(deployment.kubectl("create", "-f", "-", obj=real))
    # One writer, in order: once the later denial's Event exists, the dry run's would have been written before it.
    eventually(lambda: _assert(events(deployment, namespace, real["metadata"]["name"])))
    assert events(deployment, namespace, dry["metadata"]["name"]) == []


def _assert(value: Any) -> Any:
    assert value
    return value
