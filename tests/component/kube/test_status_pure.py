"""Pure parts of webhook.kube.status and webhook.kube.leader: no sockets."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from webhook.kube.leader import (
    LeaderElectionConfig,
    LeaderElectionRecord,
    lease_is_held_by_other,
)
from webhook.kube.status import (
    Condition,
    condition_is_current,
    set_condition,
    status_patch,
    status_path,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 12, 5, 0, tzinfo=UTC)


def _policy(
    *, generation: int = 3, status: dict[str, Any] | None = None, namespace: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "generation": generation, "resourceVersion": "7"}
    kind = "ClusterAdmissionPolicy"
    if namespace:
        meta["namespace"] = namespace
        kind = "AdmissionPolicy"
    obj = {"apiVersion": "tollgate.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": {}}
    if status is not None:
        obj["status"] = status
    return obj


READY = Condition(type="Ready", status="True", reason="Compiled", message="")


def test_status_path_cluster_and_namespaced() -> None:
    assert status_path(_policy()) == "/apis/tollgate.dev/v1alpha1/clusteradmissionpolicies/p/status"
    assert status_path(_policy(namespace="team-a")) == (
        "/apis/tollgate.dev/v1alpha1/namespaces/team-a/admissionpolicies/p/status"
    )
    with pytest.raises(ValueError, match="not a policy object"):
        status_path({"kind": "ConfigMap", "metadata": {"name": "x"}})


def test_condition_is_current_requires_generation_match() -> None:
    current = {
        "observedGeneration": 3,
        "conditions": [dict(READY, observedGeneration=3, lastTransitionTime="2026-01-01T00:00:00Z")],
    }
    assert condition_is_current(_policy(status=current), READY)
    # spec changed (generation 4): the old condition is stale even if equal otherwise
    assert not condition_is_current(_policy(generation=4, status=current), READY)
    # different message
    assert not condition_is_current(_policy(status=current), Condition({**READY, "message": "x"}))
    # no status at all
    assert not condition_is_current(_policy(), READY)


def test_set_condition_keeps_transition_time_when_status_unchanged() -> None:
    first = set_condition({}, Condition(**READY, observedGeneration=1), now=T0)
    assert first["observedGeneration"] == 1
    assert first["conditions"][0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    same = set_condition(first, Condition(**READY, observedGeneration=2), now=T1)
    assert same["conditions"][0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert same["observedGeneration"] == 2
    flipped = set_condition(
        same,
        Condition(type="Ready", status="False", reason="CompileError", message="boom", observedGeneration=3),
        now=T1,
    )
    assert flipped["conditions"][0]["lastTransitionTime"] == "2026-01-01T12:05:00Z"
    assert flipped["conditions"][0]["reason"] == "CompileError"
    assert first["conditions"][0]["observedGeneration"] == 1, "input must not be mutated"


def test_set_condition_keeps_other_types() -> None:
    status = {"conditions": [{"type": "Other", "status": "True", "reason": "R", "message": ""}]}
    out = set_condition(status, READY, now=T0)
    assert [c["type"] for c in out["conditions"]] == ["Other", "Ready"]


def test_status_patch_sets_generation_and_keeps_other_conditions() -> None:
    other = {"type": "Other", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "x"}
    patch = status_patch(_policy(generation=5, status={"conditions": [other]}), READY, now=T0)
    assert patch == {"status": {
        "observedGeneration": 5,
        "conditions": [other, {**READY, "observedGeneration": 5, "lastTransitionTime": "2026-01-01T12:00:00Z"}],
    }}
    # Only status: a merge patch of the /status subresource never carries spec or metadata.
    assert set(patch) == {"status"}


def test_lease_held_by_other_until_expired_on_own_clock() -> None:
    other = LeaderElectionRecord(holder_identity="pod-b", lease_duration_seconds=15)
    kw = {"observed_time": 100.0, "lease_duration": 15.0}
    assert lease_is_held_by_other(other, "pod-a", now=110.0, **kw)
    assert not lease_is_held_by_other(other, "pod-a", now=115.0, **kw)
    # our own lease is never "held by other"; a released lease is free at once
    assert not lease_is_held_by_other(other, "pod-b", now=101.0, **kw)
    assert not lease_is_held_by_other(LeaderElectionRecord(), "pod-a", now=101.0, **kw)


def test_record_round_trips_through_lease_spec() -> None:
    rec = LeaderElectionRecord("pod-a", 15, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:01.000000Z", 2)
    assert LeaderElectionRecord.from_lease({"spec": rec.to_spec()}) == rec


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [(10.0, 10.0, 2.0), (15.0, 2.0, 2.0), (15.0, 10.0, 0.0)],
)
def test_config_rejects_client_go_invalid_durations(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        LeaderElectionConfig("l", "ns", "me", lease_duration=lease, renew_deadline=renew, retry_period=retry)


def test_condition_is_current_when_schema_pruned_top_level_generation() -> None:
    # A CRD schema without status.observedGeneration prunes it; the condition alone decides.
    pruned = {"conditions": [dict(READY, observedGeneration=3)]}
    assert condition_is_current(_policy(status=pruned), READY)
    assert not condition_is_current(_policy(generation=4, status=pruned), READY)


def test_status_path_of_exceptions() -> None:
    assert status_path({"kind": "PolicyException", "metadata": {"name": "e", "namespace": "team-a"}}) == (
        "/apis/tollgate.dev/v1alpha1/namespaces/team-a/policyexceptions/e/status")
    assert status_path({"kind": "ClusterPolicyException", "metadata": {"name": "e"}}) == (
        "/apis/tollgate.dev/v1alpha1/clusterpolicyexceptions/e/status")
