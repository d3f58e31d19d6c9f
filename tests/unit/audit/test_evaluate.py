"""Background audit's evaluation: which policies are audited, synthesized requests, one row per validation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy
from webhook.audit.evaluate import (
    SEVERITY_ANNOTATION,
    AuditedPolicy,
    AuditResult,
    NotAudited,
    ReportMeta,
    ResourceRef,
    Skipped,
    StoredObject,
    audit_policy,
    audit_request,
    audit_rules,
    evaluate_object,
    evaluate_policy,
    policy_note,
    report_meta,
)
from webhook.informer.gvr import GVR
from webhook.policy import InMemoryLookups
from webhook.policy.model import PolicySpecError, parse_policy

NO_PRIV = {"expression": "object.spec.containers.all(c, !(c.?securityContext.?privileged.orValue(false)))",
           "message": "privileged containers are not allowed"}
REGISTRY = {"expression": "object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))",
            "messageExpression": "'bad image: ' + object.spec.containers[0].image"}
PODS = GVR("", "v1", "pods")


def audited(obj: dict[str, Any]) -> AuditedPolicy:
    decision = audit_policy(obj, every_policy=True)
    assert isinstance(decision, AuditedPolicy), decision
    return decision


def evaluate(p: AuditedPolicy, obj: dict[str, Any], **kw: Any) -> tuple[AuditResult, ...]:
    return evaluate_object(p, StoredObject(PODS, "Pod", obj), InMemoryLookups(), **kw)


def test_background_defaults_to_false_and_must_be_boolean() -> None:
    assert parse_policy(policy()).background is False
    assert parse_policy(policy(background=True)).background is True
    with pytest.raises(PolicySpecError, match=r"spec.background: must be a boolean"):
        parse_policy(policy(background="yes"))


def test_synthesized_request_is_a_create_without_user_or_old_object() -> None:
    obj = {"metadata": {"name": "web", "namespace": "team-a", "uid": "u1"}, "spec": {}}
    req = audit_request(obj, group="apps", version="v1", resource="deployments", kind="Deployment")
    assert req["operation"] == "CREATE" and req["userInfo"] == {} and req["oldObject"] is None
    assert req["kind"] == {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert req["resource"] == {"group": "apps", "version": "v1", "resource": "deployments"}
    assert (req["namespace"], req["name"], req["uid"]) == ("team-a", "web", "audit-u1")
    assert req["object"] is obj
    cluster = audit_request({"metadata": {"name": "ns1"}}, group="", version="v1", resource="namespaces",
                            kind="Namespace")
    assert "namespace" not in cluster


def test_one_result_per_validation_with_the_engine_messages() -> None:
    p = audited(policy(validations=[NO_PRIV, REGISTRY]))
    bad = pod("bad", privileged=True, images=("docker.io/nginx",))
    bad["metadata"]["uid"] = "u-bad"
    got = evaluate(p, bad, now=7)
    ref = ResourceRef("v1", "Pod", "bad", "default", "u-bad")
    assert got == (
        AuditResult("p", "validations[0]", "fail", "privileged containers are not allowed", ref, timestamp=7),
        AuditResult("p", "validations[1]", "fail", "bad image: docker.io/nginx", ref, timestamp=7),
    )
    good = evaluate(p, pod("good"))
    assert [(r.rule, r.result, r.message) for r in good] == [("validations[0]", "pass", ""),
                                                             ("validations[1]", "pass", "")]
    mixed = evaluate(p, pod("mixed", privileged=True))
    assert [r.result for r in mixed] == ["fail", "pass"]


def test_evaluate_policy_yields_every_object_in_order_with_its_rows() -> None:
    p = audited(policy(validations=[NO_PRIV], namespaceSelector={"matchLabels": {"team": "a"}}))
    objects = [StoredObject(PODS, "Pod", pod(f"p{i}", privileged=i == 1)) for i in range(3)]
    lookups = InMemoryLookups(namespaces=[{"metadata": {"name": "default", "labels": {"team": "a"}}}])
    got = list(evaluate_policy(p, objects, lookups, now=3))
    assert [o for o, _ in got] == objects
    assert [[r.result for r in rows] for _, rows in got] == [["pass"], ["fail"], ["pass"]]
    # Unselected objects are yielded with no rows, so a caller keeping rows per object can drop stale ones.
    assert [rows for _, rows in evaluate_policy(p, objects, InMemoryLookups())] == [(), (), ()]


def test_non_matching_objects_have_no_results_and_match_conditions_skip() -> None:
    p = audited(policy(validations=[NO_PRIV], resources=("deployments",), groups=("apps",)))
    assert evaluate(p, pod()) == ()
    cond = audited(policy(validations=[NO_PRIV], matchConditions=[
        {"name": "labelled", "expression": "has(object.metadata.labels) && 'audit' in object.metadata.labels"}]))
    assert [(r.result, r.message) for r in evaluate(cond, pod())] == [("skip", "matchCondition labelled is false")]
    ns_selected = audited(policy(validations=[NO_PRIV], namespaceSelector={"matchLabels": {"team": "a"}}))
    assert evaluate(ns_selected, pod()) == ()


def test_runtime_errors_are_error_results() -> None:
    p = audited(policy(validations=[{"expression": "object.spec.nodeName == 'x'"}]))
    (r,) = evaluate(p, pod())
    assert r.result == "error" and "nodeName" in r.message


def test_audit_policy_decides_ready_background_and_auditable_in_that_order() -> None:
    assert isinstance(audit_policy(policy(validations=[NO_PRIV], background=True)), AuditedPolicy)
    quiet = audit_policy(policy(validations=[NO_PRIV]))
    assert isinstance(quiet, NotAudited) and quiet.why is Skipped.NOT_BACKGROUND and not quiet.reported
    assert isinstance(audit_policy(policy(validations=[NO_PRIV]), every_policy=True), AuditedPolicy)
    broken = audit_policy(policy(validations=[{"expression": "objekt.x"}]))
    assert isinstance(broken, NotAudited) and broken.why is Skipped.NOT_READY
    assert "spec.validations[0].expression" in broken.reason and not broken.reported  # not background: no note
    broken_background = audit_policy(policy(validations=[{"expression": "objekt.x"}], background=True))
    assert isinstance(broken_background, NotAudited) and broken_background.reported
    who = audit_policy(policy("who", namespace="team-a", kind="AdmissionPolicy", background=True,
                              validations=[{"expression": "request.userInfo.username != ''"}]))
    assert isinstance(who, NotAudited) and who.why is Skipped.NOT_AUDITABLE and who.reported
    assert (who.key, who.namespace) == ("team-a/who", "team-a")
    note = who.note(now=9)
    assert (note.policy, note.result, note.resource.kind, note.resource.namespace, note.timestamp) == \
        ("team-a/who", "skip", "AdmissionPolicy", "team-a", 9)
    assert note.message.startswith("not auditable: it reads request.userInfo (spec.validations[0].expression)")


def test_audit_rules_skip_non_create_rules_and_add_pod_controllers() -> None:
    spec = parse_policy(policy(autogen={"podControllers": True}, operations=("CREATE",)))
    spec_update_only = parse_policy(policy(operations=("UPDATE",)))
    assert sorted(r for rule in audit_rules(spec) for r in rule.resources) == [
        "cronjobs", "daemonsets", "deployments", "jobs", "pods", "replicasets", "replicationcontrollers",
        "statefulsets"]
    assert audit_rules(spec_update_only) == []


def test_severity_and_category_come_from_annotations() -> None:
    obj = policy()
    obj["metadata"]["annotations"] = {SEVERITY_ANNOTATION: "High", "policies.tollgate.dev/category": "Pod Security"}
    assert report_meta(obj) == ReportMeta("high", "Pod Security")
    obj["metadata"]["annotations"] = {SEVERITY_ANNOTATION: "urgent"}
    assert report_meta(obj) == ReportMeta(None, None)  # not a v1alpha2 severity


def test_policy_note_names_the_policy() -> None:
    obj = policy("who", validations=[{"expression": "request.userInfo.username != ''"}])
    r = policy_note(obj, "not auditable: x")
    assert (r.policy, r.result, r.resource.kind, r.resource.name) == ("who", "skip", "ClusterAdmissionPolicy", "who")


def test_an_exempted_object_is_skip_with_the_exception_in_properties_until_it_expires() -> None:
    from webhook.policy.exceptions import ExceptionSet, compile_exception

    exc = compile_exception({"apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
                             "metadata": {"name": "debug", "namespace": "team-a"},
                             "spec": {"policies": [{"name": "p"}], "reason": "OPS-1",
                                      "expiresAt": "2026-11-28T06:00:00Z"}}).exception
    assert exc is not None
    p = audited(policy("p", validations=[NO_PRIV]))
    bad = pod(namespace="team-a", privileged=True)
    expires = 1795845600  # 2026-11-28T06:00:00Z
    [row] = evaluate(p, bad, now=expires - 1, exceptions=ExceptionSet.of([exc]))
    assert (row.result, row.exception) == ("skip", "PolicyException team-a/debug")
    assert row.as_dict()["properties"] == {"exception": "PolicyException team-a/debug"}
    [row] = evaluate(p, bad, now=expires, exceptions=ExceptionSet.of([exc]))
    assert row.result == "fail" and "properties" not in row.as_dict()
    [row] = evaluate(p, pod(namespace="team-b", privileged=True), now=expires - 1, exceptions=ExceptionSet.of([exc]))
    assert row.result == "fail"


def test_an_audit_mode_exception_keeps_the_row_failing() -> None:
    from webhook.policy.exceptions import ExceptionSet, compile_exception

    exc = compile_exception({"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterPolicyException",
                             "metadata": {"name": "legacy"},
                             "spec": {"policies": [{"name": "p"}], "reason": "OPS-2", "mode": "Audit"}}).exception
    assert exc is not None
    [row] = evaluate(audited(policy("p", validations=[NO_PRIV])), pod(privileged=True),
                     exceptions=ExceptionSet.of([exc]))
    assert (row.result, row.exception) == ("fail", "ClusterPolicyException legacy")
