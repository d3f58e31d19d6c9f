"""Policy engine semantics, table-driven where the point is a table (no sockets)."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import (
    InMemoryLookups,
    PolicyIndex,
    compile_policy,
    evaluate_mutating,
    evaluate_validating,
)
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.request import RequestCoordinates

NS = [{"metadata": {"name": "default", "labels": {"env": "prod", "team": "a"}}},
      {"metadata": {"name": "dev", "labels": {"env": "dev"}}}]
PARAMS = {"metadata": {"name": "registries", "namespace": "tollgate-system", "labels": {"tollgate.dev/params": "true"}},
          "data": {"prefixes": "registry.example.com/"}}


def coords(group: str, resource: str, operation: str) -> RequestCoordinates:
    return RequestCoordinates.of({"resource": {"group": group, "version": "v1", "resource": resource},
                                  "operation": operation})


def compiled(obj: dict[str, Any]) -> CompiledPolicy:
    result = compile_policy(obj)
    assert result.policy is not None, result.condition
    return result.policy


def validate(policies: list[dict[str, Any]], req: dict[str, Any], **lookups: Any):
    index = PolicyIndex()
    for p in policies:
        index.upsert(p)
    cands = index.candidates(RequestCoordinates.of(req))
    return evaluate_validating(req, cands, InMemoryLookups(namespaces=NS, configmaps=[PARAMS], **lookups))


DENY_PRIVILEGED = {"validations": [{"expression": "object.spec.containers.all(c, "
                                                  "!c.?securityContext.?privileged.orValue(false))",
                                    "message": "no privileged containers", "reason": "Forbidden"}]}


# -- compile errors --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "reason", "fragment"), [
    ({"validations": [{"expression": "objekt.spec == 1"}]}, "CompileError",
     "spec.validations[0].expression: ERROR: <input>:1:"),
    ({"validations": [{"expression": "object.spec.containers.size() +"}]}, "CompileError",
     "spec.validations[0].expression: ERROR: <input>:1:"),
    ({"validations": [{"expression": "'a string'"}]}, "CompileError", "must evaluate to bool"),
    ({"validations": [{"expression": "true", "messageExpression": "1 + 1"}]}, "CompileError",
     "spec.validations[0].messageExpression: must evaluate to string"),
    ({"validations": [{"expression": "variables.nope"}]}, "CompileError", "undeclared variable(s): variables.nope"),
    ({"validations": [{"expression": "true", "reason": "Teapot"}]}, "InvalidSpec", "spec.validations[0].reason"),
    ({"validationActions": ["Deny", "Warn"]}, "InvalidSpec", "Deny and Warn may not be combined"),
    ({"failurePolicy": "Maybe"}, "InvalidSpec", "spec.failurePolicy"),
    ({"validations": [{"expression": "true || " * 700 + "true"}]}, "CompileError", "the limit is 5000"),
])
def test_compile_errors_become_ready_false_with_path_and_position(spec: dict[str, Any], reason: str,
                                                                   fragment: str) -> None:
    result = compile_policy(policy(**spec))
    assert result.policy is None
    assert result.condition["status"] == "False"
    assert result.condition["reason"] == reason
    assert fragment in result.condition["message"], result.condition["message"]
    assert result.condition["observedGeneration"] == 1


def test_ready_condition_for_a_good_policy() -> None:
    result = compile_policy(policy(**DENY_PRIVILEGED))
    assert result.policy is not None
    assert (result.condition["status"], result.condition["reason"]) == ("True", "Compiled")


def test_broken_policy_never_changes_another_policys_result() -> None:
    broken = policy("a-broken", failurePolicy="Ignore", validations=[{"expression": "objekt == 1"}])
    good = policy("b-good", **DENY_PRIVILEGED)
    out = validate([broken, good], request(pod(privileged=True)))
    assert not out.allowed
    assert out.message == "b-good: no privileged containers"
    assert [(r.policy, r.result) for r in out.results] == [("a-broken", "error"), ("b-good", "fail")]


# -- matching ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("resources", "operations", "req_kw", "matches"), [
    (("pods",), ("CREATE",), {}, True),
    (("pods",), ("UPDATE",), {}, False),
    (("pods",), ("*",), {"operation": "DELETE"}, True),
    (("*",), ("CREATE",), {}, True),
    (("pods",), ("CONNECT",), {"operation": "CONNECT", "sub_resource": "exec"}, False),
    (("pods/exec",), ("CONNECT",), {"operation": "CONNECT", "sub_resource": "exec"}, True),
    (("pods/*",), ("CONNECT",), {"operation": "CONNECT", "sub_resource": "exec"}, True),
    (("*/*",), ("CONNECT",), {"operation": "CONNECT", "sub_resource": "exec"}, True),
    (("*",), ("CONNECT",), {"operation": "CONNECT", "sub_resource": "exec"}, False),
    (("configmaps",), ("CREATE",), {}, False),
])
def test_resource_rules(resources: tuple[str, ...], operations: tuple[str, ...], req_kw: dict[str, Any],
                        matches: bool) -> None:
    p = policy(resources=resources, operations=operations, validations=[{"expression": "false", "message": "hit"}])
    obj = None if req_kw.get("operation") in ("DELETE", "CONNECT") else pod()
    out = validate([p], request(obj, old=pod() if req_kw.get("operation") == "DELETE" else None, **req_kw))
    assert (not out.allowed) is matches


def test_exclude_rules_and_scope() -> None:
    p = policy(resources=("*",), validations=[{"expression": "false", "message": "hit"}],
               excludeResourceRules=[{"apiGroups": [""], "apiVersions": ["*"], "resources": ["configmaps"],
                                      "operations": ["*"]}])
    assert not validate([p], request(pod())).allowed
    cm = {"metadata": {"name": "x", "namespace": "default"}}
    assert validate([p], request(cm, resource="configmaps", kind="ConfigMap")).allowed
    scoped = policy(resources=("*",), validations=[{"expression": "false"}])
    scoped["spec"]["match"]["resourceRules"][0]["scope"] = "Cluster"
    assert validate([scoped], request(pod())).allowed
    ns_obj = {"metadata": {"name": "new"}}
    assert not validate([scoped], request(ns_obj, resource="namespaces", kind="Namespace", namespace=None)).allowed


@pytest.mark.parametrize(("selector", "namespace", "matches"), [
    ({"matchLabels": {"env": "prod"}}, "default", True),
    ({"matchLabels": {"env": "prod"}}, "dev", False),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "qa"]}]}, "dev", True),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}, "default", True),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}, "dev", False),
    ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, "default", True),
    ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, "dev", False),
    ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, "dev", True),
    ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, "missing-ns", True),
    ({}, "dev", True),
])
def test_namespace_selector_on_the_namespace_cache(selector: dict[str, Any], namespace: str, matches: bool) -> None:
    p = policy(namespaceSelector=selector, validations=[{"expression": "false"}])
    out = validate([p], request(pod(namespace=namespace), namespace=namespace))
    assert (not out.allowed) is matches


def test_object_selector_uses_old_object_on_delete() -> None:
    p = policy(operations=("DELETE",), objectSelector={"matchLabels": {"protected": "true"}},
               validations=[{"expression": "false", "message": "protected"}])
    protected = pod(labels={"protected": "true"})
    assert not validate([p], request(None, operation="DELETE", old=protected)).allowed
    assert validate([p], request(None, operation="DELETE", old=pod(labels={}))).allowed


def test_match_conditions_all_must_hold() -> None:
    p = policy(matchConditions=[{"name": "not-system",
                                 "expression": "!request.userInfo.username.startsWith('system:')"}],
               validations=[{"expression": "false", "message": "hit"}])
    assert not validate([p], request(pod())).allowed
    out = validate([p], request(pod(), username="system:admin"))
    assert out.allowed and out.results[0].result == "skip"


# -- validations and actions --------------------------------------------------------------------------------
def test_messages_join_in_policy_name_order_with_reason_code() -> None:
    a = policy("b-second", validations=[{"expression": "false", "message": "two", "reason": "Invalid"}])
    b = policy("a-first", validations=[{"expression": "false", "messageExpression": "'one: ' + object.metadata.name",
                                        "reason": "Unauthorized"}])
    out = validate([a, b], request(pod()))
    assert out.message == "a-first: one: web; b-second: two"
    assert (out.code, out.reason) == (401, "Unauthorized")


def test_warn_and_audit_actions_do_not_deny() -> None:
    warn = policy("w", validationActions=["Warn"], validations=[{"expression": "false", "message": "careful"}])
    audit = policy("a", validationActions=["Audit"], validations=[{"expression": "false", "message": "noted"}],
                   auditAnnotations=[{"key": "image", "valueExpression": "object.spec.containers[0].image"}])
    out = validate([warn, audit], request(pod()))
    assert out.allowed
    assert out.warnings == ["w: careful"]
    assert json.loads(out.audit_annotations["validation_failure"]) == [
        {"message": "noted", "policy": "a", "result": "fail", "validationActions": ["Audit"]}]
    assert out.audit_annotations["a.image"] == "registry.example.com/app:1"


@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
def test_runtime_error_follows_failure_policy(failure_policy: str, allowed: bool) -> None:
    p = policy(failurePolicy=failure_policy, validations=[{"expression": "object.spec.nodeName == 'x'"}])
    out = validate([p], request(pod()))
    assert out.allowed is allowed
    assert out.results[0].result == "error"
    assert "nodeName" in out.results[0].message
    if allowed:
        assert out.warnings and "nodeName" in out.warnings[0]


@pytest.mark.parametrize(("failure_policy", "allowed"), [("Fail", False), ("Ignore", True)])
def test_runaway_expression_hits_the_iteration_budget(failure_policy: str, allowed: bool) -> None:
    runaway = "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, " \
              "[1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, a + b + c + d + e > 0)))))"
    p = policy(failurePolicy=failure_policy, validations=[{"expression": runaway}])
    out = validate([p], request(pod()))
    assert out.allowed is allowed
    assert out.results[0].result == "error"


def test_variables_are_lazy_ordered_and_may_use_earlier_ones() -> None:
    p = policy(variables=[{"name": "images", "expression": "object.spec.containers.map(c, c.image)"},
                          {"name": "count", "expression": "size(variables.images)"},
                          {"name": "boom", "expression": "object.spec.nodeName"}],
               validations=[{"expression": "variables.count == 2", "messageExpression":
                             "'want 2 images, got ' + string(variables.count)"}])
    out = validate([p], request(pod(images=("a", "b"))))
    assert out.allowed  # the erroring variable is never evaluated
    out = validate([p], request(pod(images=("a",))))
    assert out.message == "p: want 2 images, got 1"


# -- params and caches ---------------------------------------------------------------------------------------
REGISTRY_RULE = {"validations": [{"expression": "object.spec.containers.all(c, "
                                                "c.image.startsWith(params.data.prefixes))", "message": "registry"}]}


@pytest.mark.parametrize(("param_ref", "images", "allowed"), [
    ({"name": "registries", "namespace": "tollgate-system"}, ("registry.example.com/a",), True),
    ({"name": "registries", "namespace": "tollgate-system"}, ("docker.io/a",), False),
    ({"name": "missing", "namespace": "tollgate-system", "parameterNotFoundAction": "Deny"}, ("x",), False),
    ({"name": "missing", "namespace": "tollgate-system", "parameterNotFoundAction": "Allow"}, ("x",), True),
])
def test_param_ref_by_name(param_ref: dict[str, Any], images: tuple[str, ...], allowed: bool) -> None:
    p = policy(paramRef=param_ref, **REGISTRY_RULE)
    assert validate([p], request(pod(images=images))).allowed is allowed


def test_param_ref_by_selector_gives_a_list() -> None:
    p = policy(paramRef={"selector": {"matchLabels": {"tollgate.dev/params": "true"}}},
               validations=[{"expression": "size(params) == 1 && params[0].data.prefixes != ''"}])
    assert validate([p], request(pod())).allowed


@pytest.mark.parametrize(("on_unsynced", "allowed", "warned"), [("Deny", False, False), ("Allow", True, False),
                                                                 ("Warn", True, True)])
def test_on_unsynced(on_unsynced: str, allowed: bool, warned: bool) -> None:
    p = policy(onUnsynced=on_unsynced, paramRef={"name": "registries", "namespace": "tollgate-system"},
               **REGISTRY_RULE)
    out = validate([p], request(pod(images=("registry.example.com/a",))), unsynced=("configmaps",))
    assert out.allowed is allowed
    assert bool(out.warnings) is warned


def test_namespace_object_is_bound() -> None:
    p = policy(validations=[{"expression": "object.metadata.?labels.?team.orValue('') == "
                                           "namespaceObject.metadata.labels.team", "message": "team label"}])
    assert validate([p], request(pod(labels={"team": "a"}))).allowed
    assert not validate([p], request(pod(labels={"team": "b"}))).allowed


# -- tenant isolation ---------------------------------------------------------------------------------------
def test_namespaced_policy_matches_only_its_namespace() -> None:
    p = policy(kind="AdmissionPolicy", namespace="team-a", validations=[{"expression": "false", "message": "a"}])
    assert not validate([p], request(pod(namespace="team-a"), namespace="team-a")).allowed
    assert validate([p], request(pod(namespace="default"))).allowed


def test_namespaced_policy_cannot_read_other_namespaces_params() -> None:
    p = policy(kind="AdmissionPolicy", namespace="team-a",
               paramRef={"name": "registries", "namespace": "tollgate-system"}, **REGISTRY_RULE)
    result = compile_policy(p)
    assert result.policy is None and result.condition["reason"] == "InvalidSpec"
    assert "own namespace" in result.condition["message"]
    # Without a namespace, it reads its own namespace only: the tollgate-system ConfigMap is invisible.
    p2 = policy(kind="AdmissionPolicy", namespace="team-a", paramRef={"name": "registries"}, **REGISTRY_RULE)
    out = validate([p2], request(pod(namespace="team-a"), namespace="team-a"))
    assert not out.allowed and "no params found: ConfigMap registries" in out.message


def test_namespaced_policy_cannot_weaken_a_cluster_policy() -> None:
    cluster = policy("deny-privileged", **DENY_PRIVILEGED)
    lenient = policy("allow-everything", kind="AdmissionPolicy", namespace="default",
                     validations=[{"expression": "true"}])
    out = validate([cluster, lenient], request(pod(privileged=True)))
    assert not out.allowed and "deny-privileged" in out.message


# -- autogen ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("resource", "group", "kind", "path"), [
    ("deployments", "apps", "Deployment", ("spec", "template")),
    ("cronjobs", "batch", "CronJob", ("spec", "jobTemplate", "spec", "template")),
])
def test_autogen_evaluates_the_pod_template(resource: str, group: str, kind: str, path: tuple[str, ...]) -> None:
    template = {"metadata": {"labels": {"app": "x"}}, "spec": pod(privileged=True)["spec"]}
    obj: dict[str, Any] = {"apiVersion": f"{group}/v1", "kind": kind, "metadata": {"name": "w", "namespace": "default"}}
    node = obj
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = template
    p = policy(autogen={"podControllers": True}, **DENY_PRIVILEGED)
    out = validate([p], request(obj, resource=resource, group=group, kind=kind))
    assert not out.allowed
    assert out.message == f"p: {'.'.join(path)}: no privileged containers"
    off = policy(autogen={"podControllers": False}, **DENY_PRIVILEGED)
    assert validate([off], request(obj, resource=resource, group=group, kind=kind)).allowed


# -- mutations ------------------------------------------------------------------------------------------------
def test_mutations_apply_in_name_order_and_yield_one_diff() -> None:
    first = policy("a", mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": "{'metadata': {'labels': {'step': 'a'}}}"}}])
    second = policy("b", mutations=[{"patchType": "JSONPatch", "jsonPatch": {
        "expression": "[{'op': 'add', 'path': '/metadata/labels/after', 'value': object.metadata.labels.step}]"}}])
    original = pod(labels={"app": "web"})
    req = request(original)
    index = PolicyIndex()
    for p in (second, first):
        index.upsert(p)
    out = evaluate_mutating(req, index.candidates(coords("", "pods", "CREATE")), InMemoryLookups())
    assert out.allowed
    result = jsonpatch.apply_patch(copy.deepcopy(original), out.patch)
    assert result["metadata"]["labels"] == {"app": "web", "step": "a", "after": "a"}
    assert req["object"] == original  # the request is never mutated


def test_apply_configuration_null_unsets_a_map_entry() -> None:
    p = policy(mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": "{'metadata': {'labels': {'app': null}}}"}}])
    out = evaluate_mutating(request(pod(labels={"app": "web", "keep": "1"})), [compiled(p)], InMemoryLookups())
    assert out.patch == [{"op": "remove", "path": "/metadata/labels/app"}]


def test_failing_mutation_follows_failure_policy() -> None:
    bad = {"patchType": "JSONPatch", "jsonPatch": {"expression": "[{'op': 'replace', 'path': '/nope/x', 'value': 1}]"}}
    fail = policy(failurePolicy="Fail", mutations=[bad])
    out = evaluate_mutating(request(pod()), [compiled(fail)], InMemoryLookups())
    assert not out.allowed
    assert out.message == "p: spec.mutations[0].jsonPatch.expression: the patch does not apply: member 'nope' not found"
    ignore = policy(failurePolicy="Ignore", mutations=[bad])
    out = evaluate_mutating(request(pod()), [compiled(ignore)], InMemoryLookups())
    assert out.allowed and out.patch == [] and out.warnings


# -- index ---------------------------------------------------------------------------------------------------
def test_index_lookup_only_touches_matching_buckets() -> None:
    index = PolicyIndex()
    index.upsert(policy("pods-only"))
    index.upsert(policy("cm-only", resources=("configmaps",)))
    index.upsert(policy("everything", resources=("*",), operations=("*",), groups=("*",)))
    index.upsert(policy("autogen", autogen={"podControllers": True}))

    def names(cands: list[CompiledPolicy]) -> list[str]:
        return [p.name for p in cands]

    assert names(index.candidates(coords("", "pods", "CREATE"))) == ["autogen", "everything", "pods-only"]
    assert names(index.candidates(coords("apps", "deployments", "CREATE"))) == ["autogen", "everything"]
    assert names(index.candidates(coords("", "configmaps", "DELETE"))) == ["everything"]
    index.remove("everything")
    assert names(index.candidates(coords("", "configmaps", "DELETE"))) == []
    # A broken update stays filed, carrying its error, so its failurePolicy answers what it selects.
    index.upsert(policy("pods-only", validations=[{"expression": "objekt"}]))
    assert names(index.candidates(coords("", "pods", "CREATE"))) == ["autogen", "pods-only"]
    assert index.state("pods-only").result.condition["status"] == "False"
    assert index.unmatchable() == []
    # One whose match rules are unreadable selects nothing and is reported as unmatchable.
    unreadable = policy("pods-only")
    unreadable["spec"]["match"] = {"resourceRules": "pods"}
    index.upsert(unreadable)
    assert names(index.candidates(coords("", "pods", "CREATE"))) == ["autogen"]
    assert index.unmatchable() == ["pods-only"]


def test_each_mutation_in_a_policy_sees_the_previous_one() -> None:
    p = policy(mutations=[
        {"patchType": "ApplyConfiguration",
         "applyConfiguration": {"expression": "{'metadata': {'labels': {'a': '1'}}}"}},
        {"patchType": "JSONPatch", "jsonPatch": {
            "expression": "[{'op': 'add', 'path': '/metadata/labels/b', 'value': object.metadata.labels.a + '2'}]"}},
    ])
    out = evaluate_mutating(request(pod(labels={})), [compiled(p)], InMemoryLookups())
    assert out.allowed, out.message
    assert jsonpatch.apply_patch(pod(labels={}), out.patch)["metadata"]["labels"] == {"a": "1", "b": "12"}
