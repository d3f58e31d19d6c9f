"""ValidatingAdmissionPolicy failure semantics, rule by rule (no sockets).

Each test names the Kubernetes rule it checks: the VAP API reference for
``failurePolicy``, ``matchConditions`` and ``parameterNotFoundAction``, and the
API server's ``validating/validator.go`` for messages and audit annotations.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import (
    InMemoryLookups,
    PolicyIndex,
    RequestCoordinates,
    evaluate_mutating,
    evaluate_validating,
)

PRIVILEGED = {"expression": "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))",
              "message": "no privileged containers"}


def decide(*policies: dict[str, Any], req: dict[str, Any] | None = None, **kw: Any) -> Any:
    index = PolicyIndex()
    for p in policies:
        index.upsert(p)
    req = req or request(pod())
    return evaluate_validating(req, index.candidates(RequestCoordinates.of(req)), InMemoryLookups(**kw))


def mutate(*policies: dict[str, Any], req: dict[str, Any] | None = None) -> Any:
    index = PolicyIndex()
    for p in policies:
        index.upsert(p)
    req = req or request(pod())
    return evaluate_mutating(req, index.candidates(RequestCoordinates.of(req)), InMemoryLookups())


# -- "Failures can occur from CEL expression parse errors, type check errors, runtime errors and invalid or
#    mis-configured policy definitions" (VAP failurePolicy) ------------------------------------------------------
@pytest.mark.parametrize(("spec", "error"), [
    ({"validations": [{"expression": "objekt == 1"}]},
     "spec.validations[0].expression: ERROR: <input>:1:1: undeclared reference to 'objekt'"),
    ({"validations": [{"expression": "true", "reason": "Teapot"}]}, "spec.validations[0].reason: must be one of"),
    ({"validations": [{"expression": "true"}], "paramRef": {"name": "x", "selector": {}}},
     "spec.paramRef: exactly one of name or selector is required"),
])
def test_a_broken_policy_under_fail_denies_what_it_selects(spec: dict[str, Any], error: str) -> None:
    out = decide(policy("broken", **spec))
    assert not out.allowed
    assert out.message.startswith(f"broken: policy is not ready: {error}")
    assert [r.result for r in out.results] == ["error"]


def test_a_broken_policy_under_ignore_admits_with_a_warning() -> None:
    out = decide(policy("broken", failurePolicy="Ignore", validations=[{"expression": "objekt == 1"}]))
    assert out.allowed
    assert out.warnings[0].startswith("broken: policy is not ready: spec.validations[0].expression:")
    assert out.warnings[0].endswith("(failurePolicy: Ignore)")


def test_a_broken_policy_selects_only_what_its_rules_select() -> None:
    broken = policy("broken", resources=("configmaps",), validations=[{"expression": "objekt == 1"}])
    assert decide(broken).allowed  # a Pod is not selected
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}}
    assert not decide(broken, req=request(cm, resource="configmaps", kind="ConfigMap")).allowed


def test_an_unreadable_failure_policy_fails_closed() -> None:
    out = decide(policy("broken", failurePolicy="Maybe", validations=[{"expression": "true"}]))
    assert not out.allowed and "spec.failurePolicy: must be one of" in out.message


def test_a_broken_warn_policy_only_warns() -> None:
    out = decide(policy("broken", validationActions=["Warn"], validations=[{"expression": "objekt == 1"}]))
    assert out.allowed and out.warnings[0].startswith("broken: policy is not ready:")


def test_a_broken_mutating_policy_under_fail_denies_on_mutate_only() -> None:
    broken = policy("broken", mutations=[{"patchType": "JSONPatch", "jsonPatch": {"expression": "objekt"}}])
    assert not mutate(broken).allowed
    assert decide(broken).allowed  # it has no validations: /validate does not evaluate it


# -- non-bool and non-string results ---------------------------------------------------------------------------
@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
def test_a_non_bool_validation_result_is_an_evaluation_error(failure_policy: str, allowed: bool) -> None:
    out = decide(policy("p", failurePolicy=failure_policy, validations=[{"expression": "object.metadata.name"}]))
    assert out.allowed is allowed
    assert out.results[0].result == "error"
    text = out.message if not allowed else out.warnings[0]
    assert "spec.validations[0].expression: a validation expression must evaluate to bool, but evaluated to " \
           "string" in text


@pytest.mark.parametrize(("message_expression", "problem"), [
    ("dyn(object.spec.containers.size())", "must evaluate to string, but evaluated to int"),
    ("'line one\\nline two'", "the message contains a line break"),
    ("object.metadata.name", "longer than 5120 bytes"),
    ("object.nope", "spec.validations[0].messageExpression: "),
])
def test_a_bad_message_expression_falls_back_to_message_and_warns(message_expression: str, problem: str) -> None:
    # validator.go: a messageExpression that errors, is not a string, has a line break or is too long falls back.
    # (The third case's message is the Pod's 6000-character name.)
    out = decide(policy("p", validations=[{"expression": "false", "message": "fallback",
                                            "messageExpression": message_expression}]),
                 req=request(pod(name="n" * 6000)))
    assert not out.allowed and out.message == "p: fallback"
    assert any(problem in w and "spec.validations[0].messageExpression" in w for w in out.warnings)


def test_without_message_the_expression_is_the_message() -> None:
    out = decide(policy("p", validations=[{"expression": "1 == 2"}]))
    assert out.message == "p: failed expression: 1 == 2"


def test_an_audit_annotation_must_be_a_string_or_null() -> None:
    out = decide(policy("p", auditAnnotations=[{"key": "k", "valueExpression": "object.metadata.name"},
                                               {"key": "none", "valueExpression": "null"},
                                               {"key": "blank", "valueExpression": "'  '"}]))
    assert out.allowed and out.audit_annotations == {"p.k": "web"}
    out = decide(policy("p", auditAnnotations=[{"key": "k", "valueExpression": "dyn(1)"}]))
    assert not out.allowed and "must evaluate to string or null, but evaluated to int" in out.message


# -- matchConditions: "1. If ANY matchCondition evaluates to FALSE, the policy is skipped. 2. If ALL evaluate to
#    TRUE, the policy is evaluated. 3. If any matchCondition evaluates to an error (but none are FALSE): the error
#    is handled per failurePolicy" -----------------------------------------------------------------------------
def test_a_false_match_condition_skips_even_when_another_errors() -> None:
    out = decide(policy("p", matchConditions=[{"name": "errs", "expression": "object.nope == 1"},
                                              {"name": "no", "expression": "false"}],
                        validations=[{"expression": "false"}]))
    assert out.allowed and [(r.result, r.message) for r in out.results] == [("skip", "matchCondition no is false")]


def test_a_match_condition_error_without_false_follows_failure_policy() -> None:
    spec = {"matchConditions": [{"name": "errs", "expression": "object.nope == 1"}],
            "validations": [{"expression": "true"}]}
    assert not decide(policy("p", **spec)).allowed
    assert decide(policy("p", failurePolicy="Ignore", **spec)).allowed


def test_a_non_bool_match_condition_is_an_error_not_a_skip() -> None:
    out = decide(policy("p", matchConditions=[{"name": "odd", "expression": "dyn(object.metadata.name)"}],
                        validations=[{"expression": "true"}]))
    assert not out.allowed
    assert "spec.matchConditions[0].expression: a matchCondition must evaluate to bool, but evaluated to string" \
        in out.message


# -- "When failurePolicy is set to Fail, validationActions define how failures are enforced" -------------------
def test_an_erroring_warn_policy_warns_and_does_not_deny() -> None:
    out = decide(policy("p", validationActions=["Warn"], validations=[{"expression": "object.nope == 1"}]))
    assert out.allowed and out.warnings and out.warnings[0].startswith("p: spec.validations[0].expression:")


def test_an_erroring_audit_policy_annotates_and_does_not_deny() -> None:
    out = decide(policy("p", validationActions=["Audit"], validations=[{"expression": "object.nope == 1"}]))
    [failure] = json.loads(out.audit_annotations["validation_failure"])
    assert out.allowed and failure["policy"] == "p" and failure["result"] == "error"


# -- parameterNotFoundAction: "If set to Deny, then no matched parameters will be subject to the failurePolicy" --
@pytest.mark.parametrize(("failure_policy", "action", "allowed", "result"), [
    ("Fail", "Deny", False, "error"), ("Ignore", "Deny", True, "error"),
    ("Fail", "Allow", True, "skip"), ("Ignore", "Allow", True, "skip")])
def test_missing_params_follow_parameter_not_found_action_then_failure_policy(
        failure_policy: str, action: str, allowed: bool, result: str) -> None:
    out = decide(policy("p", failurePolicy=failure_policy, validations=[{"expression": "false"}],
                        paramRef={"name": "absent", "namespace": "default", "parameterNotFoundAction": action}))
    assert out.allowed is allowed
    assert [r.result for r in out.results] == [result]


# -- deadline ----------------------------------------------------------------------------------------------------
def test_policies_past_the_request_deadline_are_errors_per_failure_policy() -> None:
    index = PolicyIndex()
    index.upsert(policy("fail", validations=[{"expression": "true"}]))
    index.upsert(policy("ignore", failurePolicy="Ignore", validations=[{"expression": "true"}]))
    req = request(pod())
    out = evaluate_validating(req, index.candidates(RequestCoordinates.of(req)), InMemoryLookups(),
                              deadline=time.monotonic() - 1)
    assert not out.allowed and out.message == "fail: request deadline exceeded before the policy was evaluated"
    assert [(r.policy, r.result) for r in out.results] == [("fail", "error"), ("ignore", "error")]


# -- mutations ---------------------------------------------------------------------------------------------------
def _patch(expression: str) -> list[dict[str, Any]]:
    return [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]


@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
def test_a_mutation_value_that_is_not_json_is_an_error(failure_policy: str, allowed: bool) -> None:
    out = mutate(policy("p", failurePolicy=failure_policy, mutations=_patch(
        "[{'op': 'add', 'path': '/metadata/annotations', 'value': {'d': duration('1s')}}]")))
    assert out.allowed is allowed and out.patch == []
    text = out.message if not allowed else out.warnings[0]
    assert "a google.protobuf.Duration value cannot be written into an object" in text


@pytest.mark.parametrize("expression", [
    "[{'op': 'replace', 'path': '/metadata/name', 'value': 'other'}]",
    "[{'op': 'replace', 'path': '/kind', 'value': 'Secret'}]",
    "[{'op': 'remove', 'path': '/metadata'}]",
])
def test_a_mutation_may_not_change_the_objects_identity(expression: str) -> None:
    out = mutate(policy("p", mutations=_patch(expression)))
    assert not out.allowed and "a mutation may not change apiVersion, kind, metadata.name" in out.message


def test_a_mutation_may_not_replace_the_object_with_a_non_object() -> None:
    out = mutate(policy("p", mutations=_patch("[{'op': 'replace', 'path': '', 'value': 'x'}]")))
    assert not out.allowed and "the mutated object must be a JSON object" in out.message


# -- tenancy: cluster policies have the last word ------------------------------------------------------------------
def test_tenant_mutations_run_before_cluster_mutations() -> None:
    cluster = policy("z-platform", mutations=_patch(
        "[{'op': 'add', 'path': '/metadata/labels', 'value': {'owner': 'platform'}}]"))
    tenant = policy("a-team", kind="AdmissionPolicy", namespace="default", mutations=_patch(
        "[{'op': 'add', 'path': '/metadata/labels', 'value': {'owner': 'team'}}]"))
    out = mutate(cluster, tenant)
    assert out.allowed
    assert [r.policy for r in out.results] == ["default/a-team", "z-platform"]
    assert out.patch == [{"op": "add", "path": "/metadata/labels", "value": {"owner": "platform"}}]


def test_a_tenant_mutation_may_not_touch_owner_references() -> None:
    tenant = policy("t", kind="AdmissionPolicy", namespace="default", mutations=_patch(
        "[{'op': 'add', 'path': '/metadata/ownerReferences', 'value': []}]"))
    out = mutate(tenant)
    assert not out.allowed and "metadata.ownerReferences" in out.message


def test_tenant_results_are_keyed_by_namespace_so_they_never_collide_with_a_cluster_policy() -> None:
    cluster = policy("same", validations=[{"expression": "false", "message": "cluster says no"}],
                     validationActions=["Warn"])
    tenant = policy("same", kind="AdmissionPolicy", namespace="default", validationActions=["Warn"],
                    validations=[{"expression": "false", "message": "tenant says no"}],
                    auditAnnotations=[{"key": "k", "valueExpression": "'tenant'"}])
    out = decide(cluster, tenant)
    assert out.warnings == ["same: cluster says no", "default/same: tenant says no"]
    assert out.audit_annotations == {"default_same.k": "tenant"}


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_an_admission_policy_never_matches_cluster_scoped_objects_not_even_its_namespace(operation: str) -> None:
    tenant = policy("t", kind="AdmissionPolicy", namespace="team-a", resources=("namespaces",),
                    operations=("*",), validations=[{"expression": "false"}])
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    req = request(ns, operation=operation, resource="namespaces", kind="Namespace", namespace=None,
                  old=ns if operation != "CREATE" else None)
    req["name"] = "team-a"
    out = decide(tenant, req=req)
    assert out.allowed and out.results == []


def test_the_request_variable_carries_no_object_as_in_vap() -> None:
    # The API server's CreateAdmissionRequest leaves object and oldObject out of `request`: they are the
    # `object` and `oldObject` variables.
    out = decide(policy("p", validations=[{"expression": "!has(request.object) && !has(request.oldObject) && "
                                                         "request.operation == 'CREATE' && object.kind == 'Pod'"}]))
    assert out.allowed and [r.result for r in out.results] == ["pass"]
