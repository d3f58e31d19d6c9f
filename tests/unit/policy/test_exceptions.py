"""PolicyException / ClusterPolicyException semantics (webhook.policy.exceptions), no sockets.

Matching, namespace confinement, expiry against an injected clock, mode Audit, compile errors with spec
paths, and the engine's use of them (a ``skip`` naming the exception, for the named policy only).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, PolicyIndex, RequestCoordinates, evaluate_validating
from webhook.policy.exceptions import (
    EXCEPTIONS_ANNOTATION_KEY,
    ExceptionSet,
    compile_exception,
    exception_condition,
    exceptions_annotation,
)
from webhook.policy.vocabulary import Action, Result

T0 = datetime.datetime(2026, 11, 28, 6, 0, tzinfo=datetime.UTC)
NO_PRIVILEGED = {"expression": "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))",
                 "message": "no privileged containers"}


def exception(name: str = "debug", *, namespace: str | None = "team-a", policies: tuple[str, ...] = ("no-priv",),
              **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "generation": 1}
    if namespace is not None:
        meta["namespace"] = namespace
    body: dict[str, Any] = {"policies": [{"name": p} for p in policies], "reason": "TICKET-1 debugging"}
    body.update(spec)
    return {"apiVersion": "tollgate.dev/v1alpha1",
            "kind": "PolicyException" if namespace is not None else "ClusterPolicyException",
            "metadata": meta, "spec": body}


def exceptions(*objs: dict[str, Any]) -> ExceptionSet:
    compiled = [compile_exception(o) for o in objs]
    assert all(c.exception is not None for c in compiled), [c.condition for c in compiled]
    return ExceptionSet.of(c.exception for c in compiled if c.exception is not None)


def decide(req: dict[str, Any], exc: ExceptionSet, *policies: dict[str, Any], now: datetime.datetime = T0,
           namespaces: tuple[dict[str, Any], ...] = ()) -> Any:
    index = PolicyIndex()
    for p in policies or (policy("no-priv", validations=[NO_PRIVILEGED]),):
        index.upsert(p)
    return evaluate_validating(req, index.candidates(RequestCoordinates.of(req)),
                               InMemoryLookups(namespaces=namespaces), exceptions=exc, now=lambda: now)


def privileged(namespace: str = "team-a", **kw: Any) -> dict[str, Any]:
    return request(pod(namespace=namespace, privileged=True, **kw), namespace=namespace)


def test_exempted_request_is_admitted_with_skip_naming_the_exception() -> None:
    out = decide(privileged(), exceptions(exception()))
    assert out.allowed
    [r] = out.results
    assert r.result is Result.SKIP and r.exception == "PolicyException team-a/debug"
    assert "TICKET-1 debugging" in r.message


def test_without_exception_the_same_request_is_denied() -> None:
    out = decide(privileged(), ExceptionSet())
    assert not out.allowed and out.results[0].result is Result.FAIL and not out.results[0].exception


def test_exempts_from_the_named_policy_only() -> None:
    other = policy("no-latest", validations=[{"expression": "false", "message": "nope"}])
    out = decide(privileged(), exceptions(exception()), policy("no-priv", validations=[NO_PRIVILEGED]), other)
    assert not out.allowed
    by_policy = {r.policy: r for r in out.results}
    assert by_policy["no-priv"].result is Result.SKIP
    assert by_policy["no-latest"].result is Result.FAIL and out.message == "no-latest: nope"


def test_a_policy_exception_never_reaches_another_namespace() -> None:
    # A hostile tenant's PolicyException in team-a names a cluster policy: team-b's Pod is still denied.
    out = decide(privileged("team-b"), exceptions(exception(namespace="team-a")))
    assert not out.allowed and out.results[0].result is Result.FAIL


def test_a_policy_exception_never_reaches_a_cluster_scoped_object() -> None:
    node_policy = policy("no-nodes", resources=("nodes",), validations=[{"expression": "false"}])
    req = request({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}, resource="nodes",
                  kind="Node", namespace=None)
    out = decide(req, exceptions(exception(policies=("no-nodes",))), node_policy)
    assert not out.allowed
    # A Namespace's UPDATE carries its own name in request.namespace; it is still cluster-scoped.
    ns_policy = policy("no-ns", resources=("namespaces",), validations=[{"expression": "false"}])
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    req = request(ns, old=ns, operation="UPDATE", resource="namespaces", kind="Namespace", namespace="team-a")
    assert not decide(req, exceptions(exception(policies=("no-ns",))), ns_policy).allowed


def test_a_cluster_exception_selects_namespaces_by_label() -> None:
    exc = exceptions(exception(namespace=None, match={"namespaceSelector": {"matchLabels": {"legacy": "true"}}}))
    legacy = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old", "labels": {"legacy": "true"}}}
    fresh = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "new"}}
    assert decide(privileged("old"), exc, namespaces=(legacy, fresh)).allowed
    assert not decide(privileged("new"), exc, namespaces=(legacy, fresh)).allowed


def test_match_resource_rules_and_object_selector() -> None:
    exc = exceptions(exception(namespace=None, match={
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}],
        "objectSelector": {"matchLabels": {"debug": "true"}}}))
    assert decide(privileged("x", labels={"debug": "true"}), exc).allowed
    assert not decide(privileged("x", labels={"debug": "false"}), exc).allowed
    update = request(pod(namespace="x", privileged=True, labels={"debug": "true"}), operation="UPDATE",
                     old=pod(namespace="x", labels={"debug": "true"}), namespace="x")
    assert not decide(update, exc).allowed


def test_match_conditions_see_the_whole_request() -> None:
    exc = exceptions(exception(matchConditions=[
        {"name": "debug-user", "expression": "request.userInfo.username == 'alice'"},
        {"name": "debug-name", "expression": "object.metadata.name.startsWith('web')"}]))
    assert decide(privileged(), exc).allowed
    bob = request(pod(namespace="team-a", privileged=True), namespace="team-a", username="bob")
    assert not decide(bob, exc).allowed


def test_a_match_condition_error_exempts_nothing() -> None:
    exc = exceptions(exception(matchConditions=[{"name": "e", "expression": "object.metadata.labels['x'] == 'y'"}]))
    assert not decide(privileged(), exc).allowed


def test_expiry_is_compared_with_the_clock_at_decision_time() -> None:
    exc = exceptions(exception(expiresAt="2026-11-28T06:00:00Z"))
    before = T0 - datetime.timedelta(microseconds=1)
    assert decide(privileged(), exc, now=before).allowed
    assert not decide(privileged(), exc, now=T0).allowed  # at the instant it expires
    assert not decide(privileged(), exc, now=T0 + datetime.timedelta(days=1)).allowed


def test_mode_audit_admits_but_keeps_reporting_fail() -> None:
    out = decide(privileged(), exceptions(exception(mode="Audit")))
    assert out.allowed
    [r] = out.results
    assert r.result is Result.FAIL and r.actions == frozenset({Action.AUDIT})
    assert r.exception == "PolicyException team-a/debug"
    assert json.loads(out.audit_annotations["validation_failure"])[0]["policy"] == "no-priv"


def test_an_error_result_is_exempted_too() -> None:
    broken = policy("no-priv", validations=[{"expression": "object.spec.nope.size() > 0"}])
    out = decide(privileged(), exceptions(exception()), broken)
    assert out.allowed and out.results[0].result is Result.SKIP


def test_tenant_policy_is_named_namespace_slash_name() -> None:
    tenant = policy("own", kind="AdmissionPolicy", namespace="team-a", validations=[{"expression": "false"}])
    assert decide(privileged(), exceptions(exception(policies=("team-a/own",))), tenant).allowed
    assert not decide(privileged(), exceptions(exception(policies=("own",))), tenant).allowed


@pytest.mark.parametrize(("spec", "reason", "path"), [
    ({"reason": ""}, "InvalidSpec", "spec.reason"),
    ({"policies": []}, "InvalidSpec", "spec.policies"),
    ({"policies": [{"nom": "x"}]}, "InvalidSpec", "spec.policies[0].name"),
    ({"expiresAt": "tomorrow"}, "InvalidSpec", "spec.expiresAt"),
    ({"expiresAt": "2026-11-28T06:00:00"}, "InvalidSpec", "spec.expiresAt"),
    ({"mode": "Off"}, "InvalidSpec", "spec.mode"),
    ({"mode": ["Audit"]}, "InvalidSpec", "spec.mode"),
    ({"matchConditions": {"name": "c"}}, "InvalidSpec", "spec.matchConditions: must be a list"),
    ({"match": {"objectSelector": {"matchLabels": {"a": 1}}}}, "InvalidSpec", "spec.match.objectSelector"),
    ({"matchConditions": [{"name": "c", "expression": "objekt.x"}]}, "CompileError",
     "spec.matchConditions[0].expression: ERROR: <input>:1:7: undeclared reference"),
    ({"matchConditions": [{"name": "c", "expression": "'x'"}]}, "CompileError",
     "spec.matchConditions[0].expression: must evaluate to bool"),
])
def test_a_broken_exception_is_not_ready_with_its_spec_path(spec: dict[str, Any], reason: str, path: str) -> None:
    result = compile_exception(exception(**spec))
    assert result.exception is None
    assert result.condition["status"] == "False" and result.condition["reason"] == reason
    assert result.condition["message"].startswith(path), result.condition["message"]


def test_condition_unknown_policy_and_expired() -> None:
    result = compile_exception(exception(policies=("no-priv", "gone"), expiresAt="2026-11-28T06:00:00+01:00"))
    early = T0.replace(hour=4)
    assert exception_condition(result, early, lambda p: True)["status"] == "True"
    unknown = exception_condition(result, early, lambda p: p == "no-priv")
    assert (unknown["reason"], unknown["message"]) == ("UnknownPolicy", "spec.policies: no policy named gone")
    expired = exception_condition(result, T0.replace(hour=5), lambda p: True)  # 06:00+01:00 is 05:00Z
    assert expired["status"] == "False" and expired["reason"] == "Expired"
    assert "2026-11-28T05:00:00Z" in expired["message"]


def test_annotation_lists_the_exceptions_used() -> None:
    out = decide(privileged(), exceptions(exception()))
    assert json.loads(exceptions_annotation(out.results) or "") == [
        {"exception": "PolicyException team-a/debug", "policy": "no-priv", "result": "skip"}]
    assert EXCEPTIONS_ANNOTATION_KEY == "exceptions"
    assert exceptions_annotation([]) is None


def test_no_exception_for_the_policy_never_reads_the_clock() -> None:
    def clock() -> datetime.datetime:
        raise AssertionError("read the clock with no exception")

    index = PolicyIndex()
    index.upsert(policy("no-priv", validations=[NO_PRIVILEGED]))
    req = privileged()
    out = evaluate_validating(req, index.candidates(RequestCoordinates.of(req)), InMemoryLookups(),
                              exceptions=ExceptionSet(), now=clock)
    assert not ExceptionSet() and not out.allowed
    # Exceptions for other policies only: still no clock read, no exemption.
    out = evaluate_validating(req, index.candidates(RequestCoordinates.of(req)), InMemoryLookups(),
                              exceptions=exceptions(exception(policies=("other",))), now=clock)
    assert not out.allowed


def test_cache_compiles_on_events_reports_status_and_tells_listeners() -> None:
    from webhook.policy.exceptions import ExceptionCache

    clock = [T0.replace(hour=5)]
    written: list[tuple[str, str, str]] = []
    told: list[frozenset[str]] = []
    cache = ExceptionCache(policy_exists=lambda p: p == "no-priv", now=lambda: clock[0],
                           status_sink=lambda obj, c: written.append((obj["metadata"]["name"], c["status"],
                                                                      c["reason"])))
    cache.listeners.append(told.append)
    good = exception("good", expiresAt="2026-11-28T06:00:00Z")
    cache.on_add(good, True)
    cache.on_add(exception("unknown", policies=("gone",)))
    cache.on_add(exception("broken", reason=""))
    assert written == [("good", "True", "Compiled"), ("unknown", "False", "UnknownPolicy"),
                       ("broken", "False", "InvalidSpec")]
    assert told == [frozenset({"no-priv"}), frozenset({"gone"}), frozenset({"no-priv"})]
    assert set(cache.current.by_policy) == {"no-priv", "gone"}  # unknown still compiles; it exempts nothing
    assert cache.next_expiry(clock[0]) == T0 and cache.next_expiry(T0) is None
    # A status-only update is neither recompiled nor announced.
    cache.on_update(good, {**good, "status": {"conditions": []}})
    assert len(told) == 3
    clock[0] = T0
    written.clear()
    cache.recheck()
    assert ("good", "False", "Expired") in written and told[-1] == frozenset({"no-priv"})
    cache.on_delete(good)
    assert "no-priv" not in cache.current.by_policy and told[-1] == frozenset({"no-priv"})


@pytest.mark.parametrize("obj", [
    {"kind": ["PolicyException"], "metadata": {"name": "x"}, "spec": {}},
    {"kind": "PolicyException", "metadata": ["x"], "spec": {}},
    {"kind": "PolicyException", "metadata": {"name": "x"}, "spec": {}},  # no namespace
    {"kind": "ClusterPolicyException", "metadata": {"name": "x"}, "spec": "everything"},
    {"kind": "ClusterPolicyException", "metadata": {"name": "x"}, "spec": {"policies": "p", "reason": "r"}},
    {},
])
def test_hostile_shapes_are_not_ready_never_an_exception(obj: dict[str, Any]) -> None:
    result = compile_exception(obj)
    assert result.exception is None and result.condition["reason"] == "InvalidSpec"
