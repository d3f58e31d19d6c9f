"""ValidatingAdmissionPolicy / MutatingAdmissionPolicy + binding → a Tollgate policy: every field mapped or refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.policy.helpers import pod, request
from tests.unit.policy.imports_helpers import kyverno_vpol, map_binding, map_policy, vap, vap_binding
from webhook.formats.catalog import import_policies
from webhook.formats.imported import Imported, SourceRef
from webhook.formats.kubernetes.export import export_policy
from webhook.policy import InMemoryLookups, compile_policy, evaluate_mutating, evaluate_validating
from webhook.policy.index import PolicyIndex
from webhook.policy.model import parse_policy
from webhook.policy.provenance import IMPORT_ERROR_ANNOTATION, IMPORTED_FROM_ANNOTATION
from webhook.policy.vocabulary import policy_key

PARAMS = {"apiVersion": "v1", "kind": "ConfigMap"}
REF = {"name": "teams", "namespace": "tollgate-system", "parameterNotFoundAction": "Deny"}


def one(*objs: dict[str, Any]) -> Imported:
    result = import_policies(objs)
    assert len(result.policies) == 1, result.policies
    return result.policies[0]


def problems(imported: Imported) -> list[tuple[str, str]]:
    return [(f"{p.source}", p.path) for p in imported.problems]


def test_a_policy_and_its_binding_are_one_cluster_policy_named_after_both() -> None:
    imported = one(vap(failurePolicy="Ignore"), vap_binding())
    obj = imported.obj
    assert (obj["apiVersion"], obj["kind"]) == ("tollgate.dev/v1alpha1", "ClusterAdmissionPolicy")
    assert imported.key == "ValidatingAdmissionPolicy/need-team/need-team-all"
    assert obj["metadata"]["generation"] == 3
    assert obj["metadata"]["annotations"] == {
        IMPORTED_FROM_ANNOTATION: "ValidatingAdmissionPolicy need-team, ValidatingAdmissionPolicyBinding need-team-all"}
    spec = obj["spec"]
    assert spec["failurePolicy"] == "Ignore" and spec["validationActions"] == ["Deny"] and spec["background"] is False
    assert spec["validations"] == vap()["spec"]["validations"]
    assert not imported.problems and compile_policy(obj).condition["reason"] == "Compiled"


def test_the_key_never_equals_a_tollgate_key() -> None:
    # A tenant in namespace "need-team" naming its AdmissionPolicy "need-team-all" gets key need-team/need-team-all;
    # namespaces are lowercase DNS labels, so the kind in front keeps the imported policy apart.
    key = one(vap(), vap_binding()).key
    assert key != policy_key("need-team", "need-team-all") and key.split("/")[0] != key.split("/")[0].lower()


def test_each_binding_is_its_own_policy_with_its_own_actions() -> None:
    result = import_policies([vap(), vap_binding("deny", validationActions=["Deny"]),
                              vap_binding("warn", validationActions=["Warn", "Audit"])])
    actions = {p.binding.name: p.obj["spec"]["validationActions"] for p in result.policies if p.binding}
    assert actions == {"deny": ["Deny"], "warn": ["Warn", "Audit"]}


@pytest.mark.parametrize(("actions", "message"), [
    (None, "required"), ([], "required"), (["Deny", "Warn"], "may not be used together"),
    (["Block"], "unsupported value(s) ['Block']"), (["Deny", "Deny"], "twice"),
])
def test_validation_actions_are_checked_on_the_binding(actions: Any, message: str) -> None:
    binding = vap_binding()
    binding["spec"]["validationActions"] = actions
    imported = one(vap(), binding)
    assert problems(imported) == [("ValidatingAdmissionPolicyBinding need-team-all", "spec.validationActions")]
    assert message in imported.problems[0].message
    assert imported.obj["spec"]["validationActions"] == ["Deny"]  # an unreadable action never opens the policy


def test_params_come_from_a_configmap_named_by_the_binding() -> None:
    imported = one(vap(paramKind=PARAMS), vap_binding(paramRef=dict(REF)))
    assert imported.obj["spec"]["paramRef"] == REF and not imported.problems


@pytest.mark.parametrize(("kind", "ref", "expected"), [
    ({"apiVersion": "apps/v1", "kind": "Deployment"}, REF, [("ValidatingAdmissionPolicy need-team", "spec.paramKind")]),
    ({"apiVersion": "v1", "kind": "Secret"}, REF, [("ValidatingAdmissionPolicy need-team", "spec.paramKind")]),
    (PARAMS, None, [("ValidatingAdmissionPolicyBinding need-team-all", "spec.paramRef")]),
    (PARAMS, {"selector": {"matchLabels": {"a": "b"}}, "parameterNotFoundAction": "Deny"},
     [("ValidatingAdmissionPolicyBinding need-team-all", "spec.paramRef.selector")]),
    (PARAMS, {"name": "teams"}, [("ValidatingAdmissionPolicyBinding need-team-all",
                                  "spec.paramRef.parameterNotFoundAction")]),
    (PARAMS, {"parameterNotFoundAction": "Allow"}, [("ValidatingAdmissionPolicyBinding need-team-all",
                                                     "spec.paramRef.name")]),
])
def test_params_tollgate_cannot_read_are_refused_naming_the_field(kind: Any, ref: Any,
                                                                  expected: list[tuple[str, str]]) -> None:
    binding = vap_binding() if ref is None else vap_binding(paramRef=ref)
    imported = one(vap(paramKind=kind), binding)
    assert problems(imported) == expected
    assert "paramRef" not in imported.obj["spec"]
    condition = compile_policy(imported.obj).condition
    assert (condition["status"], condition["reason"]) == ("False", "ImportError")
    assert expected[0][1] in condition["message"]


def test_a_param_ref_without_param_kind_is_ignored_as_the_api_server_does() -> None:
    imported = one(vap(), vap_binding(paramRef=dict(REF)))
    assert not imported.problems and "paramRef" not in imported.obj["spec"]
    assert imported.notes and "spec.paramRef: ignored" in str(imported.notes[0])


def test_a_binding_narrows_the_policy_rules_and_selectors() -> None:
    imported = one(vap(), vap_binding(matchResources={"namespaceSelector": {"matchLabels": {"env": "prod"}}}))
    assert imported.obj["spec"]["match"]["namespaceSelector"] == {"matchLabels": {"env": "prod"}}
    compiled = compile_policy(imported.obj).policy
    assert compiled is not None
    prod = InMemoryLookups(namespaces=[{"metadata": {"name": "default", "labels": {"env": "prod"}}}])
    dev = InMemoryLookups(namespaces=[{"metadata": {"name": "default", "labels": {"env": "dev"}}}])
    assert [str(r.result) for r in evaluate_validating(request(pod()), [compiled], prod).results] == ["fail"]
    assert evaluate_validating(request(pod()), [compiled], dev).results == []


def test_a_binding_that_selects_nothing_of_its_policy_is_refused() -> None:
    rule = {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"], "operations": ["*"]}
    imported = one(vap(), vap_binding(matchResources={"resourceRules": [rule]}))
    assert problems(imported) == [("ValidatingAdmissionPolicyBinding need-team-all", "spec.matchResources")]
    assert compile_policy(imported.obj).matchable is None  # it selects nothing, as on the API server


def test_match_conditions_keep_their_paths_and_the_generated_one_comes_last() -> None:
    rules = {"resourceRules": [dict(vap()["spec"]["matchConstraints"]["resourceRules"][0], resourceNames=["web"])]}
    conditions = [{"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:')"}]
    imported = one(vap(matchConstraints=rules, matchConditions=conditions), vap_binding())
    spec = imported.obj["spec"]
    assert spec["matchConditions"][0] == conditions[0]
    assert spec["matchConditions"][1]["name"].startswith("tollgate.dev/")
    assert imported.authored_conditions == 1
    assert imported.origin(("spec", "matchConditions", 0, "expression")) == (
        SourceRef("ValidatingAdmissionPolicy", "need-team"), ("spec", "matchConditions", 0, "expression"))
    assert imported.origin(("spec", "matchConditions", 1, "expression"))[1] == ("spec", "matchConstraints")


def test_origin_names_the_binding_for_what_the_binding_gives() -> None:
    imported = one(vap(paramKind=PARAMS), vap_binding(paramRef=dict(REF)))
    binding = SourceRef("ValidatingAdmissionPolicyBinding", "need-team-all")
    assert imported.origin(("spec", "paramRef", "name")) == (binding, ("spec", "paramRef", "name"))
    assert imported.origin(("spec", "validationActions")) == (binding, ("spec", "validationActions"))
    assert imported.origin(("spec", "validations", 0, "expression"))[0].kind == "ValidatingAdmissionPolicy"
    assert imported.origin(("spec", "match", "resourceRules", 0))[1] == ("spec", "matchConstraints")


def test_a_binding_without_its_policy_selects_nothing_and_says_so() -> None:
    result = import_policies([vap_binding(policy="gone")])
    (imported,) = result.policies
    assert imported.missing_policy and imported.sources == (SourceRef("ValidatingAdmissionPolicyBinding",
                                                                      "need-team-all"),)
    assert problems(imported) == [("ValidatingAdmissionPolicyBinding need-team-all", "spec.policyName")]
    compiled = compile_policy(imported.obj)
    assert compiled.condition["reason"] == "ImportError" and compiled.matchable is None
    index = PolicyIndex()
    index.upsert(imported.obj)
    assert index.unmatchable() == [imported.key]


def test_a_policy_without_a_binding_selects_nothing_and_is_noted() -> None:
    result = import_policies([vap()])
    assert result.policies == [] and result.notes == [
        "ValidatingAdmissionPolicy need-team: no binding names it, so it selects nothing (as on the API server)"]


@pytest.mark.parametrize(("objs", "expected"), [
    ([vap(validation=[]), vap_binding()], [("ValidatingAdmissionPolicy need-team", "spec.validation")]),
    ([vap(), vap_binding(validationActionz=["Deny"])],
     [("ValidatingAdmissionPolicyBinding need-team-all", "spec.validationActionz")]),
    ([dict(vap(), apiVersion="admissionregistration.k8s.io/v1alpha1"), vap_binding()],
     [("ValidatingAdmissionPolicy need-team", "apiVersion")]),
    ([vap(), dict(vap_binding(), apiVersion="admissionregistration.k8s.io/v2")],
     [("ValidatingAdmissionPolicyBinding need-team-all", "apiVersion")]),
    ([vap(matchConstraints={"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}),
      vap_binding()], [("ValidatingAdmissionPolicy need-team", "spec.matchConstraints.resourceRules[0].operations")]),
])
def test_what_cannot_be_honoured_is_a_problem_naming_the_field(objs: list[dict[str, Any]],
                                                               expected: list[tuple[str, str]]) -> None:
    imported = one(*objs)
    assert problems(imported) == expected
    error = imported.obj["metadata"]["annotations"][IMPORT_ERROR_ANNOTATION]
    assert all(f"{source}: {path}:" in error for source, path in expected)


def test_a_policy_that_cannot_be_honoured_answers_per_its_failure_policy() -> None:
    for failure_policy, result, actions in (("Fail", "error", {"Deny"}), ("Ignore", "error", {"Warn", "Ignored"})):
        imported = one(vap(paramKind={"apiVersion": "v1", "kind": "Secret"}, failurePolicy=failure_policy),
                       vap_binding(paramRef=dict(REF)))
        broken = compile_policy(imported.obj).matchable
        assert broken is not None and broken.error is not None
        (r,) = evaluate_validating(request(pod()), [broken], InMemoryLookups()).results
        assert (str(r.result), set(r.actions)) == (result, actions)
        assert "policy is not ready: ValidatingAdmissionPolicy need-team: spec.paramKind: v1 Secret" in r.message


def test_background_scans_are_asked_for_by_annotation_the_binding_winning() -> None:
    policy, binding = vap(), vap_binding()
    policy["metadata"]["annotations"] = {"policies.tollgate.dev/background": "true"}
    assert one(policy, binding).obj["spec"]["background"] is True
    binding["metadata"]["annotations"] = {"policies.tollgate.dev/background": "false"}
    assert one(policy, binding).obj["spec"]["background"] is False
    binding["metadata"]["annotations"] = {"policies.tollgate.dev/background": "yes"}
    assert problems(one(policy, binding)) == [("ValidatingAdmissionPolicyBinding need-team-all",
                                               "metadata.annotations[policies.tollgate.dev/background]")]


def test_report_annotations_are_carried_the_binding_winning() -> None:
    policy, binding = vap(), vap_binding()
    policy["metadata"]["annotations"] = {"policies.tollgate.dev/severity": "low", "other": "x"}
    binding["metadata"]["annotations"] = {"policies.tollgate.dev/severity": "high"}
    annotations = one(policy, binding).obj["metadata"]["annotations"]
    assert annotations["policies.tollgate.dev/severity"] == "high" and "other" not in annotations


def test_a_mutating_policy_and_its_binding_mutate() -> None:
    imported = one(map_policy(), map_binding())
    assert imported.key == "MutatingAdmissionPolicy/add-team/add-team-all"
    spec = imported.obj["spec"]
    assert spec["mutations"] == map_policy()["spec"]["mutations"] and spec["validationActions"] == ["Deny"]
    assert "background" not in spec
    compiled = compile_policy(imported.obj).policy
    assert compiled is not None and compiled.mutating and not compiled.validating
    out = evaluate_mutating(request(pod()), [compiled], InMemoryLookups())
    assert out.patch == [{"op": "add", "path": "/metadata/labels", "value": {"team": "none"}}]


def test_reinvocation_if_needed_is_a_note_a_bad_value_a_problem() -> None:
    (note,) = one(map_policy(reinvocationPolicy="IfNeeded"), map_binding()).notes
    assert (note.path, str(note.source)) == ("spec.reinvocationPolicy", "MutatingAdmissionPolicy add-team")
    assert "invokes the mutations once" in note.message
    bad = one(map_policy(reinvocationPolicy="Always"), map_binding())
    assert problems(bad) == [("MutatingAdmissionPolicy add-team", "spec.reinvocationPolicy")]


def test_a_mutating_binding_has_no_validation_actions() -> None:
    imported = one(map_policy(), map_binding(validationActions=["Deny"]))
    assert problems(imported) == [("MutatingAdmissionPolicyBinding add-team-all", "spec.validationActions")]


ROOT_EXAMPLES = Path(__file__).resolve().parents[3] / "policies" / "examples"


def _exportable() -> list[dict[str, Any]]:
    docs = [yaml.safe_load((ROOT_EXAMPLES / name / "policy.yaml").read_text())
            for name in ("always-pull-images", "gatekeeper-gpu-shared-memory", "gatekeeper-required-labels")]
    every_field = {
        "apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy", "metadata": {"name": "every-field"},
        "spec": {"failurePolicy": "Ignore", "validationActions": ["Warn", "Audit"],
                 "match": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                              "resources": ["deployments", "deployments/scale"],
                                              "scope": "Namespaced"}],
                           "excludeResourceRules": [{"apiGroups": ["apps"], "apiVersions": ["*"],
                                                     "operations": ["*"], "resources": ["deployments/scale"]}],
                           "namespaceSelector": {"matchLabels": {"env": "prod"}},
                           "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}},
                 "paramRef": {"name": "limits", "namespace": "tollgate-system", "parameterNotFoundAction": "Allow"},
                 "matchConditions": [{"name": "not-dry-run", "expression": "request.dryRun != true"}],
                 "variables": [{"name": "replicas", "expression": "object.spec.?replicas.orValue(1)"}],
                 "validations": [{"expression": "variables.replicas <= int(params.data.max)", "reason": "Forbidden",
                                  "messageExpression": "'at most ' + params.data.max + ' replicas'"}],
                 "auditAnnotations": [{"key": "replicas", "valueExpression": "string(variables.replicas)"}]}}
    return [*docs, every_field]


@pytest.mark.parametrize("original", _exportable(), ids=lambda d: d["metadata"]["name"])
def test_the_export_mapping_reversed_gives_the_policy_back(original: dict[str, Any]) -> None:
    exported = export_policy(original)
    assert exported.objects and not exported.blockers
    (imported,) = import_policies(exported.objects).policies
    assert not imported.problems
    before, after = parse_policy(original), parse_policy(imported.obj)
    for field in ("failure_policy", "validation_actions", "resource_rules", "exclude_resource_rules",
                  "namespace_selector", "object_selector", "match_conditions", "param_ref", "variables",
                  "validations", "audit_annotations", "mutations"):
        assert getattr(after, field) == getattr(before, field), field


NOTIN = {"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "Notin", "values": ["dev"]}]}}


@pytest.mark.parametrize(("objs", "path"), [
    ([vap(), vap_binding(matchResources=NOTIN)], "spec.matchResources.namespaceSelector.matchExpressions[0].operator"),
    ([dict(vap(), spec=[]), vap_binding()], "spec.matchConstraints.resourceRules"),
    ([vap(), vap_binding(matchResources="x")], "spec.matchResources"),
])
def test_unreadable_match_rules_answer_per_failure_policy_never_selecting_nothing(objs: list[dict[str, Any]],
                                                                                  path: str) -> None:
    # A typo the API server would refuse: the policy selects what could be read (every request when nothing
    # could), and the Pod it must deny gets its failurePolicy (Fail), not an allow.
    imported = one(*objs)
    assert imported.match_unreadable and path in [p.path for p in imported.problems]
    broken = compile_policy(imported.obj).matchable
    assert broken is not None and broken.error is not None
    (r,) = evaluate_validating(request(pod()), [broken], InMemoryLookups()).results
    assert (str(r.result), set(r.actions)) == ("error", {"Deny"})


def test_an_unreadable_kyverno_match_selects_every_request() -> None:
    imported = one(kyverno_vpol(matchConstraints="x"))
    assert imported.match_unreadable
    broken = compile_policy(imported.obj).matchable
    assert broken is not None
    (r,) = evaluate_validating(request(pod()), [broken], InMemoryLookups()).results
    assert str(r.result) == "error"


def test_a_readable_binding_side_still_narrows_when_the_policy_side_is_unreadable() -> None:
    rule = {"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"], "operations": ["*"]}
    imported = one(dict(vap(), spec=[]), vap_binding(matchResources={"resourceRules": [rule]}))
    assert imported.obj["spec"]["match"]["resourceRules"] == [dict(rule, resources=["deployments"], scope="*")]


def test_the_caps_are_the_crd_s() -> None:
    from webhook.files.schema import policy_openapi_schema
    from webhook.formats.common import CAPS

    spec = policy_openapi_schema()["properties"]["spec"]["properties"]
    assert {field: s["maxItems"] for field, s in spec.items() if s.get("type") == "array" and "maxItems" in s} == CAPS


def test_an_imported_policy_has_a_tollgate_policy_s_caps() -> None:
    def validations(n: int) -> list[dict[str, str]]:
        return [{"expression": f"object.metadata.name != 'x{i}'"} for i in range(n)]

    assert compile_policy(one(vap(validations=validations(64)), vap_binding()).obj).condition["reason"] == "Compiled"
    imported = one(vap(validations=validations(65)), vap_binding())
    assert problems(imported) == [("ValidatingAdmissionPolicy need-team", "spec.validations")]
    assert "65 items: more than the 64" in str(imported.problems[0])
    compiled = compile_policy(imported.obj)
    assert compiled.condition["reason"] == "ImportError" and compiled.matchable is not None  # per failurePolicy
    kyverno = one(kyverno_vpol(validations=validations(65)))
    assert [p.path for p in kyverno.problems] == ["spec.validations"]


def test_a_policy_reading_authorizer_imports_and_reads_the_rbac_caches() -> None:
    expression = "authorizer.requestResource.check('create').allowed()"
    imported = one(vap(validations=[{"expression": expression}]), vap_binding())
    assert problems(imported) == []
    compiled = compile_policy(imported.obj)
    assert compiled.policy is not None and compiled.policy.reads_authorizer
    assert compiled.policy.spec.validations[0].expression == expression
