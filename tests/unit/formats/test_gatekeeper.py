"""Gatekeeper ConstraintTemplate + Constraint → a Tollgate policy: the driver's variables, match, actions, refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.policy.helpers import pod, request
from webhook.formats.catalog import NO_CONSTRAINT, Catalog, import_policies
from webhook.formats.gatekeeper.convert import IGNORE_LABEL, MATCH_CONDITION, cel_literal
from webhook.formats.imported import Imported, SourceRef
from webhook.formats.kinds import import_kind_of
from webhook.policy import InMemoryLookups, compile_policy, evaluate_validating

CEL_SOURCE = {
    "variables": [{"name": "labels", "expression": "has(variables.anyObject.metadata.labels) ? "
                                                   "variables.anyObject.metadata.labels : {}"}],
    "validations": [
        {"expression": "!has(variables.params.labels) || variables.params.labels.all(l, l in variables.labels)",
         "messageExpression": "'missing: ' + variables.params.labels.join(', ')"},
        {"expression": "!('forbidden' in variables.labels)", "message": "forbidden label"},
    ],
}


def template(source: dict[str, Any] | None = None, *, rego: bool = False, kind: str = "K8sLabels",
             api_version: str = "templates.gatekeeper.sh/v1") -> dict[str, Any]:
    code = []
    if source is not None:
        code.append({"engine": "K8sNativeValidation", "source": copy.deepcopy(source)})
    if rego:
        code.append({"engine": "Rego", "source": {"rego": "package x\nviolation[{\"msg\": \"m\"}] { true }"}})
    return {"apiVersion": api_version, "kind": "ConstraintTemplate", "metadata": {"name": kind.lower()},
            "spec": {"crd": {"spec": {"names": {"kind": kind}}},
                     "targets": [{"target": "admission.k8s.gatekeeper.sh", "code": code}]}}


def constraint(name: str = "must-have-owner", kind: str = "K8sLabels", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": kind, "metadata": {"name": name},
            "spec": spec}


def one(*objects: dict[str, Any]) -> Imported:
    (imported,) = import_policies(objects).policies
    return imported


def messages(imported: Imported) -> list[str]:
    return [p.message for p in imported.problems]


def verdict(imported: Imported, req: dict[str, Any]) -> str:
    compiled = compile_policy(imported.obj).policy
    assert compiled is not None, compile_policy(imported.obj).condition
    results = evaluate_validating(req, [compiled], InMemoryLookups(namespaces=[
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in ("default", "prod", "kube-system",
                                                                                     "team-a-dev")])).results
    return str(results[0].result) if results else "skip"


def test_a_constraint_with_its_template_becomes_one_policy_with_the_drivers_variables() -> None:
    imported = one(template(CEL_SOURCE), constraint(parameters={"labels": ["owner"]},
                                                    match={"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}]}))
    spec = imported.obj["spec"]
    assert imported.key == "K8sLabels/must-have-owner" and not imported.problems
    assert imported.policy == SourceRef("ConstraintTemplate", "k8slabels")
    assert imported.binding == SourceRef("K8sLabels", "must-have-owner")
    assert [v["name"] for v in spec["variables"]] == ["anyObject", "params", "labels"]
    assert spec["variables"][1]["expression"] == '{"labels": ["owner"]}'
    assert spec["validations"] == CEL_SOURCE["validations"]
    assert spec["failurePolicy"] == "Fail" and spec["validationActions"] == ["Deny"] and spec["background"] is True
    assert spec["match"]["resourceRules"] == [{"apiGroups": [""], "apiVersions": ["*"], "resources": ["pods"],
                                               "operations": ["CREATE", "UPDATE"], "scope": "*"}]
    assert spec["match"]["namespaceSelector"] == {"matchExpressions": [{"key": IGNORE_LABEL,
                                                                        "operator": "DoesNotExist"}]}
    assert spec["matchConditions"][0]["name"] == MATCH_CONDITION


def test_variables_params_and_anyobject_decide_as_gatekeepers_driver() -> None:
    imported = one(template(CEL_SOURCE), constraint(parameters={"labels": ["owner"]}))
    assert verdict(imported, request(pod(labels={"owner": "me"}))) == "pass"
    assert verdict(imported, request(pod(labels={}))) == "fail"
    # DELETE is not among the operations of Gatekeeper's webhook (its chart's default).
    assert verdict(imported, request(None, operation="DELETE", old=pod(labels={}))) == "skip"
    # No parameters: variables.params is null, and has() on it is false (not an error).
    assert verdict(one(template(CEL_SOURCE), constraint()), request(pod(labels={}))) == "pass"


@pytest.mark.parametrize(("action", "actions", "background"), [
    (None, ["Deny"], True), ("deny", ["Deny"], True), ("warn", ["Warn"], True), ("dryrun", ["Audit"], True),
    ("Warn", ["Warn"], True)])
def test_enforcement_actions_map_to_validation_actions(action: str | None, actions: list[str],
                                                       background: bool) -> None:
    spec = {} if action is None else {"enforcementAction": action}
    imported = one(template(CEL_SOURCE), constraint(**spec))
    assert (imported.obj["spec"]["validationActions"], imported.obj["spec"]["background"]) == (actions, background)
    assert not imported.problems


@pytest.mark.parametrize(("scoped", "actions", "background"), [
    ([{"action": "warn", "enforcementPoints": [{"name": "validation.gatekeeper.sh"}]}], ["Warn"], False),
    ([{"action": "deny", "enforcementPoints": [{"name": "*"}]}], ["Deny"], True),
    ([{"action": "deny", "enforcementPoints": [{"name": "audit.gatekeeper.sh"}]}], ["Audit"], True),
    ([{"action": "warn", "enforcementPoints": [{"name": "validation.gatekeeper.sh"}]},
      {"action": "deny", "enforcementPoints": [{"name": "validation.gatekeeper.sh"}]}], ["Deny"], False),
])
def test_scoped_enforcement_actions_take_the_webhooks_and_the_audits_points(
        scoped: list[dict[str, Any]], actions: list[str], background: bool) -> None:
    imported = one(template(CEL_SOURCE), constraint(enforcementAction="scoped", scopedEnforcementActions=scoped))
    assert (imported.obj["spec"]["validationActions"], imported.obj["spec"]["background"]) == (actions, background)


def test_an_unknown_enforcement_action_is_refused_never_opened() -> None:
    imported = one(template(CEL_SOURCE), constraint(enforcementAction="block"))
    assert any("unrecognized enforcementAction 'block'" in m for m in messages(imported))
    assert imported.obj["spec"]["validationActions"] == ["Deny"]


def test_a_rego_only_template_is_refused_with_a_line_that_says_so() -> None:
    imported = one(template(None, rego=True), constraint())
    (problem,) = imported.problems
    assert problem.source == SourceRef("ConstraintTemplate", "k8slabels") and problem.path == "spec.targets[0]"
    assert "a Rego-only template: Tollgate runs only K8sNativeValidation (CEL) code" in problem.message
    # A template with both engines runs its CEL, as gator does.
    assert not one(template(CEL_SOURCE, rego=True), constraint()).problems


@pytest.mark.parametrize(("name", "expected"), [
    ("params", "'params' is a reserved keyword"), ("anyObject", "'anyObject' is a reserved keyword"),
    ("gatekeeper_internal_x", "cannot have 'gatekeeper_internal_' as a prefix")])
def test_the_drivers_reserved_variable_names_are_refused(name: str, expected: str) -> None:
    source = {**CEL_SOURCE, "variables": [{"name": name, "expression": "1"}]}
    imported = one(template(source), constraint())
    assert any(expected in m for m in messages(imported)), messages(imported)


def test_a_constraint_without_its_template_is_not_ready_and_names_the_template() -> None:
    imported = one(constraint())
    assert imported.missing_policy
    assert messages(imported) == ["no ConstraintTemplate k8slabels defines kind K8sLabels"]


def test_a_template_without_constraints_selects_nothing_with_a_note() -> None:
    result = import_policies([template(CEL_SOURCE)])
    assert result.policies == [] and result.notes == [f"ConstraintTemplate k8slabels: {NO_CONSTRAINT}"]


def test_any_kind_of_the_constraints_group_is_imported_and_bound_to_its_template() -> None:
    kind = import_kind_of(constraint(kind="AnyThing"))
    assert kind is not None and kind.plural == "anything" and kind.binds == "ConstraintTemplate"
    catalog = Catalog()
    template_ref = catalog.put(template(CEL_SOURCE))
    a, b = catalog.put(constraint("a")), catalog.put(constraint("b"))
    other = catalog.put(constraint("c", kind="Other"))
    assert template_ref is not None and other is not None
    assert catalog.affected(template_ref) == {template_ref, a, b}


def test_the_source_failure_policy_and_match_conditions_are_kept() -> None:
    source = {**CEL_SOURCE, "failurePolicy": "Ignore",
              "matchCondition": [{"name": "only-web", "expression": "object.metadata.name == 'web'"}]}
    imported = one(template(source), constraint())
    spec = imported.obj["spec"]
    assert spec["failurePolicy"] == "Ignore" and imported.authored_conditions == 1
    assert spec["matchConditions"][0] == {"name": "only-web", "expression": "object.metadata.name == 'web'"}
    assert verdict(imported, request(pod("db", labels={"forbidden": "x"}))) == "skip"
    assert verdict(imported, request(pod("web", labels={"forbidden": "x"}))) == "fail"


def namespace_request(name: str) -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"forbidden": "x"}}}
    req = request(obj, resource="namespaces", kind="Namespace", namespace=name)
    req["name"] = name
    return req


def cluster_request() -> dict[str, Any]:
    obj = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": "r", "labels": {"forbidden": "x"}}}
    return request(obj, resource="clusterroles", group="rbac.authorization.k8s.io", kind="ClusterRole",
                   namespace=None)


def bad_pod(namespace: str) -> dict[str, Any]:
    return request(pod(namespace=namespace, labels={"forbidden": "x"}), namespace=namespace)


@pytest.mark.parametrize(("match", "req", "expected"), [
    ({"namespaces": ["prod"]}, bad_pod("prod"), "fail"),
    ({"namespaces": ["prod"]}, bad_pod("default"), "skip"),
    ({"namespaces": ["team-*"]}, bad_pod("team-a-dev"), "fail"),
    ({"namespaces": ["*-dev"]}, bad_pod("team-a-dev"), "fail"),
    ({"namespaces": ["*-a-*"]}, bad_pod("team-a-dev"), "fail"),
    ({"namespaces": ["prod"]}, cluster_request(), "fail"),  # a cluster-scoped object: neither list applies
    ({"excludedNamespaces": ["kube-*"]}, bad_pod("kube-system"), "skip"),
    ({"excludedNamespaces": ["kube-*"]}, bad_pod("default"), "fail"),
    ({"excludedNamespaces": ["kube-*"]}, cluster_request(), "fail"),
    ({"excludedNamespaces": ["prod"]}, namespace_request("prod"), "skip"),  # a Namespace by its own name
    ({"namespaces": ["prod"]}, namespace_request("prod"), "fail"),
    ({"scope": "Cluster"}, bad_pod("default"), "skip"),
    ({"scope": "Cluster"}, namespace_request("prod"), "fail"),
    ({"scope": "Namespaced"}, cluster_request(), "skip"),
    ({"scope": "Namespaced"}, bad_pod("default"), "fail"),
    ({"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}]}, cluster_request(), "skip"),
    ({"kinds": [{"apiGroups": ["*"], "kinds": ["ClusterRole"]}]}, cluster_request(), "fail"),
    ({"labelSelector": {"matchLabels": {"forbidden": "y"}}}, bad_pod("default"), "skip"),
    ({"source": "Generated"}, bad_pod("default"), "skip"),
])
def test_the_constraints_match_selects_as_gatekeepers_matcher(match: dict[str, Any], req: dict[str, Any],
                                                              expected: str) -> None:
    imported = one(template(CEL_SOURCE), constraint(match=match))
    assert not imported.problems, messages(imported)
    assert verdict(imported, req) == expected


def test_the_name_glob_matches_the_name_or_the_generate_name() -> None:
    imported = one(template(CEL_SOURCE), constraint(match={"name": "web-*"}))
    named = bad_pod("default")
    named["name"] = "web-1"
    generated = request(pod("", labels={"forbidden": "x"}) | {"metadata": {"generateName": "web-",
                                                                           "labels": {"forbidden": "x"}}})
    other = bad_pod("default")
    other["name"] = "db"
    assert [verdict(imported, r) for r in (named, generated, other)] == ["fail", "fail", "skip"]


def test_a_namespace_labelled_ignore_is_exempt_as_from_gatekeepers_webhook() -> None:
    imported = one(template(CEL_SOURCE), constraint(match={"namespaceSelector": {"matchLabels": {"env": "prod"}}}))
    compiled = compile_policy(imported.obj).policy
    assert compiled is not None
    lookups = InMemoryLookups(namespaces=[
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"env": "prod"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b", "labels": {"env": "prod",
                                                                                       IGNORE_LABEL: ""}}}])
    got = [[str(r.result) for r in evaluate_validating(bad_pod(ns), [compiled], lookups).results] for ns in "ab"]
    assert got == [["fail"], []]


@pytest.mark.parametrize(("value", "literal"), [
    (None, "null"), (True, "true"), (3, "3"), (1.5, "1.5"), (2.0, "2.0"), (1e20, "1e+20"),
    ("a\"b\n", '"a\\"b\\n"'), ([1, 2], "[1, 2]"), ([1, "x"], '[dyn(1), dyn("x")]'),
    ({"k": {"n": []}}, '{"k": {"n": []}}'), ({"a": 1, "b": [2]}, '{"a": dyn(1), "b": dyn([2])}')])
def test_params_become_a_cel_literal_of_the_same_types(value: Any, literal: str) -> None:
    assert cel_literal(value) == literal


def test_params_literals_evaluate_to_the_parameters() -> None:
    parameters = {"s": "ü\"\\", "i": 7, "d": 0.5, "b": False, "n": None, "l": [1, "two", {"three": 3}]}
    source = {"validations": [{"expression": "variables.params == " + cel_literal(parameters)},
                              {"expression": "variables.params.i + 1 == 8 && variables.params.d * 2.0 == 1.0"}]}
    assert verdict(one(template(source), constraint(parameters=parameters)), request(pod())) == "pass"


def test_an_unsupported_template_version_is_refused() -> None:
    imported = one(template(CEL_SOURCE, api_version="templates.gatekeeper.sh/v1alpha1"), constraint())
    assert any("is not imported" in m for m in messages(imported))
