"""Kyverno ValidatingPolicy / MutatingPolicy → a Tollgate policy: every field mapped, noted or refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.policy.helpers import pod, request
from tests.unit.policy.imports_helpers import PODS_RULE, kyverno_mpol, kyverno_vpol
from webhook.formats.catalog import import_policies
from webhook.formats.imported import Imported
from webhook.formats.kyverno.convert import AUTOGEN_CONDITION
from webhook.policy import InMemoryLookups, compile_policy, evaluate_mutating, evaluate_validating
from webhook.policy.model import Reference


def one(obj: dict[str, Any]) -> Imported:
    (imported,) = import_policies([obj]).policies
    return imported


def paths(imported: Imported) -> list[str]:
    return [p.path for p in imported.problems]


def deployment(name: str = "web", labels: dict[str, str] | None = None, kind: str = "Deployment",
               group: str = "apps", resource: str = "deployments") -> dict[str, Any]:
    template: dict[str, Any] = {"metadata": {"labels": labels} if labels else {},
                                "spec": {"containers": [{"name": "c", "image": "a/b:1"}]}}
    obj = {"apiVersion": f"{group}/v1" if group else "v1", "kind": kind,
           "metadata": {"name": name, "namespace": "default"}, "spec": {"template": template}}
    return request(obj, resource=resource, group=group, kind=kind)


def verdicts(imported: Imported, *requests: dict[str, Any]) -> list[str]:
    compiled = compile_policy(imported.obj).policy
    assert compiled is not None, compile_policy(imported.obj).condition
    out = []
    for req in requests:
        results = evaluate_validating(req, [compiled], InMemoryLookups()).results
        out.append(str(results[0].result) if results else "none")
    return out


def test_a_validating_policy_maps_field_for_field() -> None:
    obj = kyverno_vpol(failurePolicy="Ignore", validationActions=["Warn"],
                       variables=[{"name": "x", "expression": "1"}],
                       auditAnnotations=[{"key": "team", "valueExpression": "'platform'"}],
                       matchConditions=[{"name": "c", "expression": "true"}])
    obj["metadata"]["annotations"] = {"policies.kyverno.io/severity": "medium",
                                      "policies.kyverno.io/category": "Best Practices"}
    imported = one(obj)
    spec = imported.obj["spec"]
    assert imported.key == "ValidatingPolicy/check-team" and not imported.problems
    assert spec["failurePolicy"] == "Ignore" and spec["validationActions"] == ["Warn"] and spec["background"] is True
    for field in ("variables", "auditAnnotations", "validations"):
        assert spec[field] == obj["spec"][field]
    assert spec["matchConditions"][0] == {"name": "c", "expression": "true"}
    assert spec["match"]["resourceRules"][0]["resources"] == ["pods"]
    annotations = imported.obj["metadata"]["annotations"]
    assert annotations["policies.tollgate.dev/severity"] == "medium"
    assert annotations["policies.tollgate.dev/category"] == "Best Practices"
    assert compile_policy(imported.obj).condition["status"] == "True"


def test_defaults_are_kyvernos() -> None:
    spec = one(kyverno_vpol()).obj["spec"]
    assert spec["validationActions"] == ["Deny"] and spec["background"] is True and "failurePolicy" not in spec


def test_background_off_and_admission_off() -> None:
    spec = one(kyverno_vpol(evaluation={"background": {"enabled": False}})).obj["spec"]
    assert spec["background"] is False
    audit_only = one(kyverno_vpol(evaluation={"admission": {"enabled": False}}))
    assert audit_only.obj["spec"]["validationActions"] == ["Audit"]
    assert "validationActions [Audit]" in str(audit_only.notes[0])


def test_pod_rules_are_evaluated_on_kyvernos_pod_controllers_only() -> None:
    imported = one(kyverno_vpol())
    assert imported.obj["spec"]["autogen"] == {"podControllers": True}
    assert imported.obj["spec"]["matchConditions"][-1]["name"] == AUTOGEN_CONDITION
    rc = deployment(kind="ReplicationController", group="", resource="replicationcontrollers")
    cronjob = deployment(kind="CronJob", group="batch", resource="cronjobs")
    template = cronjob["object"]["spec"].pop("template")
    cronjob["object"]["spec"]["jobTemplate"] = {"spec": {"template": template}}
    assert verdicts(imported, request(pod()), deployment(), deployment(labels={"team": "a"}), cronjob, rc) == [
        "fail", "fail", "pass", "fail", "skip"]  # ReplicationControllers are Tollgate's autogen, not Kyverno's


def test_autogen_controllers_can_be_chosen() -> None:
    imported = one(kyverno_vpol(autogen={"podControllers": {"controllers": ["statefulsets"]}}))
    sts = deployment(kind="StatefulSet", resource="statefulsets")
    assert verdicts(imported, deployment(), sts) == ["skip", "fail"]
    off = one(kyverno_vpol(autogen={"podControllers": {"enabled": False}}))
    assert "autogen" not in off.obj["spec"] and verdicts(off, deployment()) == ["none"]
    empty = one(kyverno_vpol(autogen={"podControllers": {"controllers": []}}))
    assert "autogen" not in empty.obj["spec"]
    bad = one(kyverno_vpol(autogen={"podControllers": {"controllers": ["Deployment"]}}))
    assert paths(bad) == ["spec.autogen.podControllers.controllers[0]"]


@pytest.mark.parametrize("match", [
    {"resourceRules": [PODS_RULE, dict(PODS_RULE, resources=["services"])]},
    {"resourceRules": [dict(PODS_RULE, resourceNames=["web"])]},
    {"resourceRules": [PODS_RULE], "objectSelector": {"matchLabels": {"a": "b"}}},
    {"resourceRules": [PODS_RULE], "excludeResourceRules": [dict(PODS_RULE, operations=["UPDATE"])]},
    {"resourceRules": [dict(PODS_RULE, apiVersions=["*"])]},
])
def test_no_autogen_where_kyverno_generates_none(match: dict[str, Any]) -> None:
    assert "autogen" not in one(kyverno_vpol(matchConstraints=copy.deepcopy(match))).obj["spec"]


def test_resource_reads_become_references() -> None:
    imported = one(kyverno_vpol(variables=[
        {"name": "cm", "expression": "resource.Get('v1', 'configmaps', 'kube-system', 'registries')"},
        {"name": "ings", "expression": "resource.List('networking.k8s.io/v1', 'ingresses', '').items"},
        {"name": "again", "expression": "resource.Get('v1', 'configmaps', 'kube-system', 'other')"}]))
    assert imported.obj["spec"]["references"] == [{"apiVersion": "v1", "resource": "configmaps"},
                                                  {"apiVersion": "networking.k8s.io/v1", "resource": "ingresses"}]
    compiled = compile_policy(imported.obj).policy
    assert compiled is not None and set(compiled.spec.references) == {
        Reference("v1", "configmaps"), Reference("networking.k8s.io/v1", "ingresses")}


def test_a_computed_read_cannot_be_cached_ahead() -> None:
    imported = one(kyverno_vpol(variables=[
        {"name": "x", "expression": "resource.Get(object.apiVersion, 'configmaps', '', 'a')"}]))
    assert paths(imported) == ["spec.variables[0].expression"]
    assert "must be string literals" in imported.problems[0].message


@pytest.mark.parametrize(("expression", "library"), [
    ("http.Get('https://example.com').ok", "http library"),
    ("globalContext.Get('entry', '') != null", "GlobalContext library"),
    ("image.GetMetadata('nginx:1').config.os == 'linux'", "ImageData library"),
    ("json.marshal(object) != ''", "json library"),
    ("random() != ''", "random library"),
    ("time_now() != ''", "time library"),
    ("listObjToMap([], [], 'a', 'b') != null", "transform library"),
    ("jmespath('a', object) != null", "jmespath library"),
    ("resource.Post('v1', 'configmaps', {}) != null", "resource.Post"),
    ("exceptions.allowedValues.size() == 0", "PolicyException"),
])
def test_a_kyverno_library_tollgate_lacks_is_named(expression: str, library: str) -> None:
    imported = one(kyverno_vpol(validations=[{"expression": expression}]))
    assert paths(imported) == ["spec.validations[0].expression"]
    assert library in imported.problems[0].message and "Tollgate does not implement" in imported.problems[0].message
    assert compile_policy(imported.obj).condition["reason"] == "ImportError"


@pytest.mark.parametrize("expression", [
    "parseImageReference(object.spec.containers[0].image).containsDigest() == false",
    "isImage('nginx') && image('nginx').registry() == 'index.docker.io'",
    "parseServiceAccount(request.userInfo.username).Name == ''",
    "user.parseServiceAccount(request.userInfo.username).Namespace == ''",
    "sha256('a') != '' && hash.md5('a') != ''",
    "json.unmarshal('{}') != null",
    "yaml.parse('a: 1').a == 1.0",
    "time.now() > timestamp('2020-01-01T00:00:00Z') && time.toCron(time.truncate(time.now(), duration('1h'))) != ''",
    "math.round(1.25, 1) == 1.3",
    "regex.replace('docker.io/a', '^docker\\\\.io/', 'r.io/') == 'r.io/a'",
])
def test_kyvernos_libraries_that_need_no_network_are_tollgates(expression: str) -> None:
    imported = one(kyverno_vpol(validations=[{"expression": expression}]))
    assert not imported.problems
    assert verdicts(imported, request(pod())) == ["pass"]


def test_a_library_tollgate_lacks_is_named_beside_ones_it_has() -> None:
    imported = one(kyverno_vpol(validations=[{"expression": "json.unmarshal(json.marshal(object)) != null"}]))
    assert [p.message for p in imported.problems] == [
        "json.marshal is Kyverno's json library, which Tollgate does not implement"]


def test_a_variable_named_like_a_library_is_not_the_library() -> None:
    imported = one(kyverno_vpol(validations=[
        {"expression": "object.spec.containers.all(image, image.image.startsWith('a'))"},
        # Does not compile (an unknown name), so it is searched for libraries: the bound ``image`` is none.
        {"expression": "object.spec.containers.all(image, image.isImage()) && unknownName"}]))
    assert not imported.problems
    condition = compile_policy(imported.obj).condition
    assert condition["reason"] == "CompileError" and "spec.validations[1].expression" in condition["message"]


def test_what_tollgate_cannot_do_is_refused_or_noted() -> None:
    json_mode = one(kyverno_vpol(evaluation={"mode": "JSON"}))
    assert paths(json_mode) == ["spec.evaluation.mode"]
    noted = one(kyverno_vpol(webhookConfiguration={"timeoutSeconds": 3},
                             autogen={"validatingAdmissionPolicy": {"enabled": True}},
                             evaluation={"background": {"interval": "1h"}}))
    assert not noted.problems and len(noted.notes) == 3
    assert paths(one(kyverno_vpol(evaluation={"background": {"enabled": "yes"}}))) == [
        "spec.evaluation.background.enabled"]
    assert paths(one(kyverno_vpol(rules=[]))) == ["spec.rules"]
    assert paths(one(dict(kyverno_vpol(), apiVersion="policies.kyverno.io/v2"))) == ["apiVersion"]


def test_a_mutating_policy_mutates_admission_requests_only() -> None:
    imported = one(kyverno_mpol())
    assert imported.key == "MutatingPolicy/add-team" and not imported.problems
    assert imported.obj["spec"]["mutations"] and "background" not in imported.obj["spec"]
    assert paths(one(kyverno_mpol(evaluation={"mutateExisting": {"enabled": True}}))) == [
        "spec.evaluation.mutateExisting.enabled"]
    assert paths(one(kyverno_mpol(evaluation={"admission": {"enabled": False}}))) == [
        "spec.evaluation.admission.enabled"]
    targets = one(kyverno_mpol(targetMatchConstraints={"expression": "true"}, reinvocationPolicy="IfNeeded"))
    assert not targets.problems and len(targets.notes) == 2


@pytest.mark.parametrize("version", ["v1", "v1beta1", "v1alpha1"])
@pytest.mark.parametrize("make", [kyverno_vpol, kyverno_mpol])
def test_every_version_kyverno_serves_is_read(version: str, make: Any) -> None:
    obj = dict(make(), apiVersion=f"policies.kyverno.io/{version}")
    imported = one(obj)
    assert not imported.problems and compile_policy(imported.obj).condition["status"] == "True"


def namespaced(obj: dict[str, Any], namespace: str | None = "team-a") -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["kind"] = "Namespaced" + out["kind"]
    if namespace is not None:
        out["metadata"]["namespace"] = namespace
    return out


def test_a_namespaced_validating_policy_is_confined_to_its_namespace() -> None:
    imported = one(namespaced(kyverno_vpol()))
    assert not imported.problems and imported.key == "team-a/NamespacedValidatingPolicy/check-team"
    assert (imported.obj["kind"], imported.obj["metadata"]["namespace"]) == ("AdmissionPolicy", "team-a")
    assert str(imported.policy) == "NamespacedValidatingPolicy team-a/check-team"
    unlabelled = pod(labels={})
    in_ns, elsewhere = request(dict(unlabelled, metadata={"name": "p", "namespace": "team-a"}), namespace="team-a"), \
        request(unlabelled, namespace="default")
    assert verdicts(imported, in_ns, elsewhere) == ["fail", "none"]


def test_a_namespaced_policy_without_a_namespace_is_in_default() -> None:
    imported = one(namespaced(kyverno_mpol(), namespace=None))
    assert imported.key == "default/NamespacedMutatingPolicy/add-team" and imported.obj["metadata"]["namespace"] == \
        "default"
    assert compile_policy(imported.obj).policy is not None


def test_namespaced_twins_of_one_name_in_two_namespaces_are_two_policies() -> None:
    result = import_policies([namespaced(kyverno_vpol(), "a"), namespaced(kyverno_vpol(), "b"), kyverno_vpol()])
    assert sorted(i.key for i in result.policies) == ["ValidatingPolicy/check-team",
                                                      "a/NamespacedValidatingPolicy/check-team",
                                                      "b/NamespacedValidatingPolicy/check-team"]


def test_target_match_fields_are_noted_without_mutate_existing() -> None:
    imported = one(kyverno_mpol(targetMatchConstraints={"resourceRules": [copy.deepcopy(PODS_RULE)]},
                                targetMatchConditions=[{"name": "t", "expression": "true"}]))
    assert not imported.problems
    assert [n.path for n in imported.notes] == ["spec.targetMatchConstraints", "spec.targetMatchConditions"]


def _mutations(imported: Imported, req: dict[str, Any]) -> Any:
    compiled = compile_policy(imported.obj)
    assert compiled.policy is not None, compiled.condition
    out = evaluate_mutating(req, [compiled.policy], InMemoryLookups())
    assert out.allowed, out.message
    return out.patch


def test_a_mutating_policys_match_conditions_read_its_variables_as_kyvernos_do() -> None:
    # kyverno/policies other-mpol/remove-hostpath-volumes: Kyverno binds a MutatingPolicy's variables for its
    # matchConditions (pkg/cel/policies/mpol/compiler/policy.go).
    imported = one(kyverno_mpol(
        variables=[{"name": "hostPaths", "expression": "object.spec.?volumes.orValue([]).filter(v, has(v.hostPath))"},
                   {"name": "hasHostPath", "expression": "size(variables.hostPaths) > 0"}],
        matchConditions=[{"name": "has-hostpath", "expression": "variables.hasHostPath"}]))
    assert not imported.problems
    with_host_path = pod()
    with_host_path["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/"}}]
    assert _mutations(imported, request(with_host_path))
    assert not _mutations(imported, request(pod()))


def test_a_validating_policys_match_conditions_see_no_variables_as_in_kyverno() -> None:
    # Kyverno compiles a ValidatingPolicy's matchConditions before its variables (pkg/cel/policies/vpol/compiler).
    imported = one(kyverno_vpol(variables=[{"name": "x", "expression": "true"}],
                                matchConditions=[{"name": "c", "expression": "variables.x"}]))
    assert imported.obj["spec"]["matchConditions"][0]["expression"] == "variables.x"
    assert "undeclared variable" in compile_policy(imported.obj).condition["message"]
