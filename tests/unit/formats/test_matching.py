"""matchConstraints ∩ matchResources as a Tollgate match: the resources algebra, rule checks, generated conditions."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.helpers import pod
from tests.unit.policy.helpers import request as bare_request
from webhook.formats.imported import ConversionError
from webhook.formats.matching import (
    GENERATED_CONDITION,
    NamedRule,
    _meet_resource,
    intersect,
    parse_match,
    parse_rule,
    rule_condition,
)
from webhook.policy import InMemoryLookups, compile_policy, evaluate_validating
from webhook.policy.cel.env import compile_expression, environment, evaluate


def request(obj: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
    """An AdmissionRequest with ``name``, as the API server sends it (the object's, or the old object's)."""
    req = bare_request(obj, **kw)
    named = obj if obj is not None else kw.get("old")
    if named is not None and "name" in named.get("metadata", {}):
        req["name"] = named["metadata"]["name"]
    return req


def rule(resources: list[str], *, groups: list[str] | None = None, versions: list[str] | None = None,
         operations: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"apiGroups": groups or [""], "apiVersions": versions or ["v1"], "resources": resources,
            "operations": operations or ["CREATE", "UPDATE"], **extra}


# Each resources entry names a set of (resource, subresource); the meet names their intersection.
@pytest.mark.parametrize(("a", "b", "both"), [
    ("pods", "pods", ["pods"]),
    ("pods", "*", ["pods"]),
    ("pods", "*/*", ["pods"]),
    ("pods", "deployments", []),
    ("pods", "pods/status", []),          # the resource itself is no subresource
    ("*", "pods/status", []),             # '*' is every resource, no subresource
    ("*", "*/scale", []),
    ("pods/*", "*/status", ["pods/status"]),
    ("pods/*", "pods/*", ["pods/*"]),
    ("pods/*", "pods", []),               # every subresource of pods, not pods
    ("*/*", "pods", ["pods"]),
    ("*/*", "*", ["*"]),
    ("*/*", "pods/*", ["pods/*"]),
    ("*/*", "*/*", ["*/*"]),
    ("deployments/scale", "*/scale", ["deployments/scale"]),
    ("deployments/scale", "*/status", []),
])
def test_resources_meet_as_the_api_server_matches_them(a: str, b: str, both: list[str]) -> None:
    assert _meet_resource(a, b) == both
    assert _meet_resource(b, a) == both


@pytest.mark.parametrize(("raw", "path", "message"), [
    ({"apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}, "r.apiGroups", "required"),
    (rule(["pods"], groups=["*", "apps"]), "r.apiGroups", "'*' is present, it must be the only entry"),
    (rule(["pods"], operations=["CREATE", "PATCH"]), "r.operations", "unsupported value(s) ['PATCH']"),
    (rule(["pods"], scope="Everywhere"), "r.scope", "must be one of"),
    (rule(["pods/a/b"]), "r.resources[0]", "is not a resource or resource/subresource"),
    (rule(["pods"], resourceNames=[""]), "r.resourceNames", "non-empty strings"),
    (rule([""]), "r.resources", "non-empty strings"),
    ("pods", "r", "must be an object"),
])
def test_a_malformed_rule_is_refused_with_its_path(raw: Any, path: str, message: str) -> None:
    with pytest.raises(ConversionError) as e:
        parse_rule(raw, "r")
    assert e.value.path == path and message in e.value.message


def test_the_core_group_is_an_empty_string() -> None:
    assert parse_rule(rule(["pods"]), "r").api_groups == ("",)


def test_a_policy_needs_resource_rules_a_binding_does_not() -> None:
    with pytest.raises(ConversionError, match=r"spec.matchConstraints.resourceRules: required"):
        parse_match({}, "spec.matchConstraints", rules_required=True)
    assert parse_match({}, "spec.matchResources", rules_required=False).rules[0].resources == ("*/*",)
    with pytest.raises(ConversionError, match=r"matchPolicy: must be one of"):
        parse_match({"resourceRules": [rule(["pods"])], "matchPolicy": "Loose"}, "m", rules_required=True)
    with pytest.raises(ConversionError, match=r"m.namespaceSelector.matchExpressions\[0\].operator"):
        parse_match({"resourceRules": [rule(["pods"])],
                     "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}, "m",
                    rules_required=True)


def test_rules_intersect_field_by_field_and_pairwise() -> None:
    policy = parse_match({"resourceRules": [rule(["pods"]), rule(["deployments"], groups=["apps"])]}, "p",
                         rules_required=True)
    binding = parse_match({"resourceRules": [rule(["*"], groups=["*"], versions=["*"], operations=["CREATE"],
                                                  scope="Namespaced")]}, "b", rules_required=False)
    both = intersect(policy, binding)
    assert both is not None and both.condition is None
    assert both.match["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"],
         "scope": "Namespaced"},
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"], "operations": ["CREATE"],
         "scope": "Namespaced"}]


def test_a_binding_without_match_resources_keeps_the_policy_rules() -> None:
    policy = parse_match({"resourceRules": [rule(["pods"], scope="Namespaced")]}, "p", rules_required=True)
    assert intersect(policy).match["resourceRules"] == intersect(policy, parse_match(  # type: ignore[union-attr]
        None, "b", rules_required=False)).match["resourceRules"]  # type: ignore[union-attr]


def test_no_overlap_is_none() -> None:
    policy = parse_match({"resourceRules": [rule(["pods"])]}, "p", rules_required=True)
    assert intersect(policy, parse_match({"resourceRules": [rule(["deployments"], groups=["apps"])]}, "b",
                                         rules_required=False)) is None
    assert intersect(policy, parse_match({"resourceRules": [rule(["pods"], operations=["DELETE"])]}, "b",
                                         rules_required=False)) is None
    assert intersect(parse_match({"resourceRules": [rule(["pods"], scope="Cluster")]}, "p", rules_required=True),
                     parse_match({"resourceRules": [rule(["pods"], scope="Namespaced")]}, "b",
                                 rules_required=False)) is None


def test_selectors_and_excludes_of_both_apply() -> None:
    policy = parse_match({"resourceRules": [rule(["pods"])], "namespaceSelector": {"matchLabels": {"env": "prod"}},
                          "excludeResourceRules": [rule(["pods"], operations=["UPDATE"])]}, "p", rules_required=True)
    binding = parse_match({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
                           "objectSelector": {"matchLabels": {"app": "web"}}}, "b", rules_required=False)
    both = intersect(policy, binding)
    assert both is not None
    assert both.match["namespaceSelector"] == {"matchExpressions": [
        {"key": "env", "operator": "In", "values": ["prod"]}, {"key": "team", "operator": "Exists"}]}
    assert both.match["objectSelector"] == {"matchLabels": {"app": "web"}}
    assert both.match["excludeResourceRules"][0]["operations"] == ["UPDATE"]


def _holds(condition: str, req: dict[str, Any]) -> bool:
    value = evaluate(compile_expression(condition).program, environment().Activation({"request": req}))
    assert isinstance(value, bool)
    return value


@pytest.mark.parametrize(("raw", "req", "selected"), [
    (rule(["pods"], resourceNames=["web"]), request(pod("web")), True),
    (rule(["pods"], resourceNames=["web"]), request(pod("db")), False),
    (rule(["pods"], operations=["DELETE"]), request(pod()), False),
    (rule(["pods"], versions=["v2"]), request(pod()), False),
    (rule(["pods/status"]), request(pod(), sub_resource="status"), True),
    (rule(["pods/*"]), request(pod()), False),
    (rule(["pods"]), request(pod(), sub_resource="status"), False),
    (rule(["pods"], scope="Cluster"), request(pod()), False),
    (rule(["namespaces"], scope="Cluster"),  # a Namespace is cluster-scoped though its UPDATE names it
     request({"metadata": {"name": "a"}}, resource="namespaces", kind="Namespace", namespace="a", operation="UPDATE"),
     True),
    (rule(["namespaces"], scope="Namespaced"),
     request({"metadata": {"name": "a"}}, resource="namespaces", kind="Namespace", namespace="a", operation="UPDATE"),
     False),
])
def test_rule_condition_is_the_rule(raw: dict[str, Any], req: dict[str, Any], selected: bool) -> None:
    assert _holds(rule_condition(parse_rule(raw, "r")), req) is selected


def test_a_request_without_a_name_is_not_among_resource_names() -> None:
    req = request(pod())
    del req["name"]  # a CREATE with generateName
    assert not _holds(rule_condition(NamedRule(("",), ("v1",), ("pods",), ("*",), resource_names=("web",))), req)


def _selected(policy_match: dict[str, Any], binding_match: dict[str, Any] | None, req: dict[str, Any]) -> str:
    both = intersect(parse_match(policy_match, "p", rules_required=True),
                     parse_match(binding_match, "b", rules_required=False) if binding_match is not None else None)
    assert both is not None
    spec: dict[str, Any] = {"match": both.match, "validations": [{"expression": "false", "message": "selected"}]}
    if both.condition is not None:
        spec["matchConditions"] = [both.condition]
    compiled = compile_policy({"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
                               "metadata": {"name": "p"}, "spec": spec}).policy
    assert compiled is not None
    results = evaluate_validating(req, [compiled], InMemoryLookups()).results
    return str(results[0].result) if results else "none"


def test_resource_names_of_the_policy_and_of_the_binding_both_narrow() -> None:
    names = {"resourceRules": [rule(["pods"], resourceNames=["web", "api"])]}
    assert _selected(names, None, request(pod("web"))) == "fail"
    assert _selected(names, None, request(pod("db"))) == "skip"
    binding = {"resourceRules": [rule(["pods"], resourceNames=["api"])]}
    assert _selected(names, binding, request(pod("web"))) == "skip"
    assert _selected(names, binding, request(pod("api"))) == "fail"


def test_a_rule_without_names_still_selects_what_a_named_one_does_not() -> None:
    rules = {"resourceRules": [rule(["pods"], resourceNames=["web"]), rule(["pods"], operations=["DELETE"])]}
    assert _selected(rules, None, request(pod("db"))) == "skip"
    assert _selected(rules, None, request(None, old=pod("db"), operation="DELETE")) == "fail"


def test_an_exclude_with_names_excludes_only_them() -> None:
    match = {"resourceRules": [rule(["pods"])], "excludeResourceRules": [rule(["pods"], resourceNames=["web"])]}
    assert _selected(match, None, request(pod("web"))) == "skip"
    assert _selected(match, None, request(pod("db"))) == "fail"


def test_exact_match_policy_skips_a_request_the_api_server_converted() -> None:
    match = {"resourceRules": [rule(["deployments"], groups=["apps"])], "matchPolicy": "Exact"}
    converted = request({"metadata": {"name": "d"}}, resource="deployments", group="apps", kind="Deployment")
    converted["requestResource"] = {"group": "apps", "version": "v1beta2", "resource": "deployments"}
    as_sent = dict(converted, requestResource=dict(converted["resource"]))
    assert _selected(match, None, converted) == "skip"
    assert _selected(match, None, as_sent) == "fail"
    assert _selected(dict(match, matchPolicy="Equivalent"), None, converted) == "fail"


def test_the_generated_condition_has_its_name() -> None:
    both = intersect(parse_match({"resourceRules": [rule(["pods"], resourceNames=["a"])]}, "p", rules_required=True))
    assert both is not None and both.condition is not None and both.condition["name"] == GENERATED_CONDITION
