"""``tollgate export``: Tollgate policies as Kubernetes admission policies, checked against Kubernetes' own schema.

The 1.20 API server the realapi suite runs does not serve these kinds, so every exported object is
validated with ``jsonschema`` against the OpenAPI v3 schemas of Kubernetes 1.35
(``tests/fixtures/kubernetes-openapi-admissionregistration``), strict as the API server's field
validation (undeclared fields refused), plus the rules of the API server's validation the OpenAPI
does not carry (enums, required fields).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing
import yaml

from tests.fixtures import fixture_dir
from tests.unit.policy.helpers import policy
from webhook.cli.main import main
from webhook.files.chain import AdmissionChain
from webhook.files.inputs import load_kind, load_policies, load_resources
from webhook.files.requests import build_request
from webhook.formats.kubernetes.export import (
    BINDING_FIELDS,
    POD_VARIABLES,
    POLICY_FIELDS,
    blockers,
    export_policy,
    pod_expression,
    replace_identifiers,
    template_path_expression,
    typed_mutation,
)
from webhook.policy.cel.env import environment
from webhook.policy.engine.context import synthesize_pod
from webhook.policy.vocabulary import PatchType

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = fixture_dir("kubernetes-openapi-admissionregistration")


def _strict(node: Any) -> Any:
    """The schema with ``additionalProperties: false`` on every object that declares properties."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def _validator(version: str, kind: str) -> jsonschema.protocols.Validator:
    doc = _strict(json.loads((FIXTURES / f"apis__admissionregistration.k8s.io__{version}_openapi.json").read_text()))
    resource = referencing.Resource.from_contents(doc, default_specification=referencing.jsonschema.DRAFT7)
    registry = referencing.Registry().with_resource("urn:k8s", resource)
    schema = {"$ref": f"urn:k8s#/components/schemas/io.k8s.api.admissionregistration.{version}.{kind}"}
    return jsonschema.Draft7Validator(schema, registry=registry)


#: Values the API server's validation (``pkg/apis/admissionregistration/validation``) accepts.
ENUMS = {
    "failurePolicy": {"Fail", "Ignore"}, "matchPolicy": {"Exact", "Equivalent"},
    "reinvocationPolicy": {"Never", "IfNeeded"}, "patchType": {"JSONPatch", "ApplyConfiguration"},
    "parameterNotFoundAction": {"Allow", "Deny"}, "scope": {"*", "Cluster", "Namespaced"},
    "reason": {"Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"},
}


def _walk(node: Any, path: str = "") -> Any:
    if isinstance(node, dict):
        for k, v in node.items():
            yield f"{path}.{k}", k, v
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def assert_accepted(obj: dict[str, Any]) -> None:
    """``obj`` is what the API server's schema and validation accept for its kind."""
    group, version = obj["apiVersion"].split("/")
    assert group == "admissionregistration.k8s.io"
    checked = copy.deepcopy(obj)
    if obj["kind"].startswith("Mutating") and version == "v1":
        version = "v1beta1"  # same fields (see the fixture's README)
        checked["apiVersion"] = f"{group}/{version}"
    errors = sorted(_validator(version, obj["kind"]).iter_errors(checked), key=str)
    assert not errors, [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
    for path, key, value in _walk(obj["spec"], "spec"):
        if key in ENUMS and isinstance(value, str):
            assert value in ENUMS[key], f"{path}: {value!r}"
    assert obj["metadata"]["name"]
    spec = obj["spec"]
    if obj["kind"] == "ValidatingAdmissionPolicy":
        assert spec.get("validations") or spec.get("auditAnnotations")
    if obj["kind"] == "MutatingAdmissionPolicy":
        assert spec["mutations"] and spec["reinvocationPolicy"]
    if obj["kind"] == "ValidatingAdmissionPolicyBinding":
        assert set(spec["validationActions"]) <= {"Deny", "Warn", "Audit"} and spec["validationActions"]
    if obj["kind"].endswith("Binding"):
        assert spec["policyName"]
        if "paramRef" in spec:
            assert spec["paramRef"]["parameterNotFoundAction"]
    if "matchConstraints" in spec:
        assert spec["matchConstraints"]["resourceRules"]


EVERYTHING = policy(
    "everything", failurePolicy="Ignore", validationActions=["Warn", "Audit"],
    resources=("deployments",), groups=("apps",),
    namespaceSelector={"matchExpressions": [{"key": "team", "operator": "Exists"}]},
    objectSelector={"matchLabels": {"app": "web"}},
    excludeResourceRules=[{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments/scale"],
                           "operations": ["UPDATE"]}],
    paramRef={"name": "limits", "namespace": "policy-params", "parameterNotFoundAction": "Allow"},
    matchConditions=[{"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:')"}],
    variables=[{"name": "replicas", "expression": "object.spec.replicas"}],
    validations=[{"expression": "variables.replicas <= int(params.data.max)", "reason": "Forbidden",
                  "messageExpression": "'at most ' + params.data.max + ' replicas'"}],
    auditAnnotations=[{"key": "replicas", "valueExpression": "string(variables.replicas)"}],
    mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        "expression": "Object{metadata: Object.metadata{labels: {'replicas': string(variables.replicas)}}}"}},
        {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: "
                                                               "'/metadata/annotations', value: {}}]"}}],
)


@pytest.mark.parametrize("mutating_version", ["v1", "v1beta1"])
def test_every_field_exports_into_objects_the_api_server_accepts(mutating_version: str) -> None:
    result = export_policy(EVERYTHING, mutating_version=mutating_version)
    assert result.blockers == []
    kinds = [(o["apiVersion"], o["kind"]) for o in result.objects]
    assert kinds == [("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
                     ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
                     (f"admissionregistration.k8s.io/{mutating_version}", "MutatingAdmissionPolicy"),
                     (f"admissionregistration.k8s.io/{mutating_version}", "MutatingAdmissionPolicyBinding")]
    for obj in result.objects:
        assert_accepted(obj)


def test_each_mapped_field_is_carried_as_written() -> None:
    vap, vapb, map_, mapb = export_policy(EVERYTHING).objects
    src = EVERYTHING["spec"]
    assert vap["spec"]["validations"] == src["validations"]
    assert vap["spec"]["auditAnnotations"] == src["auditAnnotations"]
    assert vap["spec"]["variables"] == map_["spec"]["variables"] == src["variables"]
    assert vap["spec"]["matchConditions"] == src["matchConditions"]
    assert "mutations" not in vap["spec"] and "validations" not in map_["spec"]
    assert map_["spec"]["mutations"] == src["mutations"]
    constraints = vap["spec"]["matchConstraints"]
    assert constraints["namespaceSelector"] == src["match"]["namespaceSelector"]
    assert constraints["objectSelector"] == src["match"]["objectSelector"]
    assert constraints["excludeResourceRules"][0]["resources"] == ["deployments/scale"]
    assert constraints["matchPolicy"] == "Equivalent"
    assert vap["spec"]["failurePolicy"] == "Ignore"
    assert vap["spec"]["paramKind"] == map_["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert vapb["spec"] == {"policyName": "everything", "validationActions": ["Warn", "Audit"],
                            "paramRef": {"name": "limits", "namespace": "policy-params",
                                         "parameterNotFoundAction": "Allow"}}
    assert mapb["spec"] == {"policyName": "everything", "paramRef": vapb["spec"]["paramRef"]}
    # The mapping is a table an importer can read backwards: every Tollgate field has one Kubernetes path.
    assert len({k for k, _ in POLICY_FIELDS + BINDING_FIELDS}) == len(POLICY_FIELDS + BINDING_FIELDS)


def test_defaults_are_written_out() -> None:
    (vap, vapb) = export_policy(policy("defaults", validations=[{"expression": "true"}])).objects
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert vap["spec"]["matchConstraints"]["resourceRules"][0]["scope"] == "*"
    assert vapb["spec"]["validationActions"] == ["Deny"]
    for obj in (vap, vapb):
        assert_accepted(obj)


def test_every_exportable_example_is_accepted() -> None:
    docs = [d for path in sorted((ROOT / "policies").rglob("*.yaml")) for d in yaml.safe_load_all(path.read_text())
            if isinstance(d, dict) and d.get("kind") in ("ClusterAdmissionPolicy", "AdmissionPolicy")]
    exported = [o for d in docs for o in export_policy(d).objects]
    assert len(exported) >= 6  # the Gatekeeper examples and always-pull-images
    for obj in exported:
        assert_accepted(obj)


def _mutation(expression: str, patch_type: str = "ApplyConfiguration") -> list[dict[str, Any]]:
    field = "jsonPatch" if patch_type == "JSONPatch" else "applyConfiguration"
    return [{"patchType": patch_type, field: {"expression": expression}}]


BLOCKED = [
    (policy("t", kind="AdmissionPolicy", namespace="team-a"), "kind"),
    (policy("r", references=[{"apiVersion": "v1", "resource": "services"}],
            validations=[{"expression": "resource.List('v1', 'services', 'default').size() < 10"}]),
     "spec.references"),
    (policy("a", autogen={"podControllers": True}, groups=("*",), resources=("*",)), "spec.autogen.podControllers"),
    (policy("am", autogen={"podControllers": True}, mutations=[
        {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'remove', path: '/spec/x'}]"}}]),
     "spec.autogen.podControllers"),
    (policy("s", paramRef={"selector": {"matchLabels": {"a": "b"}}, "namespace": "x"},
            validations=[{"expression": "size(params) > 0"}]), "spec.paramRef.selector"),
    (policy("m", mutations=_mutation("{'metadata': {'x-y': {'a': 'b'}}}")),
     "spec.mutations[0].applyConfiguration.expression"),
    (policy("j", mutations=_mutation("[{'op': 'remove', 'pat': '/metadata/labels'}]", "JSONPatch")),
     "spec.mutations[0].jsonPatch.expression"),
    (policy("v", validations=[{"expression": "Object{a: 1} != {}"}]), "spec.validations[0].expression"),
    (policy("broken", validations=[{"expression": "objekt == 1"}]), "status"),
    (policy("k", validations=[{"expression": "image(object.spec.containers[0].image).registry() == 'ghcr.io' "
                                             "&& math.round(1.5) == math.round(1.54, 1) + 0.5"}]),
     "spec.validations[0].expression"),
]


@pytest.mark.parametrize(("obj", "path"), BLOCKED, ids=[b[0]["metadata"]["name"] for b in BLOCKED])
def test_each_feature_kubernetes_cannot_express_is_named(obj: dict[str, Any], path: str) -> None:
    found = blockers(obj)
    assert [b.path for b in found] == [path], found
    assert export_policy(obj).objects == []


def test_on_unsynced_without_a_cache_read_does_not_block() -> None:
    assert blockers(policy("u", onUnsynced="Allow", validations=[{"expression": "object.metadata.name != 'x'"}])) == []


def test_typed_mutations_through_a_ternary_and_a_bind_are_exportable() -> None:
    obj = policy("ok", mutations=_mutation(
        "cel.bind(l, {'a': 'b'}, has(object.metadata.labels) ? Object{metadata: Object.metadata{labels: l}} "
        ": Object{})"))
    assert blockers(obj) == []


def test_on_unsynced_is_dropped_with_a_note() -> None:
    result = export_policy(policy("u", onUnsynced="Allow",
                                  validations=[{"expression": "namespaceObject.metadata.name != 'x'"}]))
    assert result.blockers == [] and len(result.objects) == 2
    assert [n.split(":")[0] for n in result.notes] == ["spec.onUnsynced"]


AUTOGEN = policy("ag", autogen={"podControllers": True}, excludeResourceRules=[
    {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["UPDATE"]}],
    matchConditions=[{"name": "labelled", "expression": "has(object.metadata.labels)"}],
    variables=[{"name": "names", "expression": "object.spec.containers.map(c, c.name)"}],
    validations=[{"expression": "oldObject == null || 'object' != object.kind",
                  "messageExpression": "'in ' + object.metadata.namespace"}])


def test_autogen_adds_the_controllers_and_reads_the_template_pod_through_variables() -> None:
    result = export_policy(AUTOGEN)
    assert result.blockers == []
    vap, binding = result.objects
    for obj in (vap, binding):
        assert_accepted(obj)
    constraints = vap["spec"]["matchConstraints"]
    rules = {(g, r) for rule in constraints["resourceRules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert rules == {("", "pods"), ("", "replicationcontrollers"), ("apps", "deployments"), ("apps", "statefulsets"),
                     ("apps", "daemonsets"), ("apps", "replicasets"), ("batch", "jobs"), ("batch", "cronjobs")}
    excluded = {r for rule in constraints["excludeResourceRules"] for r in rule["resources"]}
    assert "deployments" in excluded and "cronjobs" in excluded  # Tollgate excludes them as Pods too
    spec = vap["spec"]
    assert [v["name"] for v in spec["variables"]] == ["tollgatePod", "tollgateOldPod", "tollgateTemplatePath", "names"]
    assert spec["variables"][3]["expression"] == "variables.tollgatePod.spec.containers.map(c, c.name)"
    assert spec["validations"][0] == {
        "expression": "variables.tollgateOldPod == null || 'object' != variables.tollgatePod.kind",
        "messageExpression": "variables.tollgateTemplatePath + ('in ' + variables.tollgatePod.metadata.namespace)"}
    # matchConditions run before variables: the Pod's expression is inlined there.
    assert spec["matchConditions"][0]["expression"].startswith("has((object == null ? null :\n")
    assert "spec.jobTemplate.spec.template" in spec["variables"][0]["expression"]


def test_replace_identifiers_leaves_strings_fields_and_keys_alone() -> None:
    text = "object.a + 'object' + x.object + {'object': oldObject}['object']"
    assert replace_identifiers(text, {k: f"variables.{v}" for k, v in POD_VARIABLES.items()}) == (
        "variables.tollgatePod.a + 'object' + x.object + {'object': variables.tollgateOldPod}['object']")
    assert replace_identifiers("[1].all(object, object > 0)", POD_VARIABLES) is None
    assert replace_identifiers("object.(", POD_VARIABLES) is None


def test_map_literal_mutations_export_as_typed_literals() -> None:
    assert typed_mutation("has(object.metadata.labels) ? [{'op': 'add', \"path\": '/a', 'value': {'k': 1}}] : []",
                          PatchType.JSON_PATCH) == (
        "has(object.metadata.labels) ? [JSONPatch{op: 'add', path: '/a', value: {'k': 1}}] : []")
    assert typed_mutation("{'metadata': {'labels': {'a': 'b'}, 'ownerReferences': [{'name': 'x'}]}, "
                          "'spec': {?'replicas': optional.of(1)}}", PatchType.APPLY_CONFIGURATION) == (
        "Object{metadata: Object.metadata{labels: {'a': 'b'}, ownerReferences: [Object.metadata.ownerReferences"
        "{name: 'x'}]}, spec: Object.spec{?replicas: optional.of(1)}}")
    assert typed_mutation("{'a-b': 1}", PatchType.APPLY_CONFIGURATION) is None


def test_the_map_literal_example_exports_as_typed_literals() -> None:
    obj = yaml.safe_load((ROOT / "policies" / "examples" / "add-default-labels" / "policy.yaml").read_text())
    result = export_policy(obj)
    assert result.blockers == []
    map_ = result.objects[0]
    assert_accepted(map_)
    patch = map_["spec"]["mutations"][0]["jsonPatch"]["expression"]
    apply = map_["spec"]["mutations"][1]["applyConfiguration"]["expression"]
    assert "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'tollgate.dev/managed': 'true'}}]" in patch
    assert apply.startswith("Object{metadata: Object.metadata{labels: {'team': ")


def test_policies_export_all_but_the_three_kubernetes_cannot_express(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(ROOT / "policies")]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "tollgate export: 25 of 28 policies exported, 3 blocked"
    blocked = sorted({line.split(": cannot be exported: ")[0].rsplit(" ", 1)[1] for line in err.splitlines()
                      if ": cannot be exported: " in line})
    assert blocked == ["service-selector-matches-deployment", "team-a/require-limits", "unique-ingress-host"]


# --- the command ----------------------------------------------------------------------------------------------

def test_export_prints_yaml_kubectl_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(EVERYTHING))
    assert main(["export", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    objects = list(yaml.safe_load_all(out))
    assert objects == export_policy(EVERYTHING).objects
    assert err == ""


def test_export_json_is_a_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(EVERYTHING))
    assert main(["export", "-o", "json", "--mutating-version", "v1beta1", str(tmp_path / "p.yaml")]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List" and listed["apiVersion"] == "v1"
    assert listed["items"] == export_policy(EVERYTHING, mutating_version="v1beta1").objects


def test_some_blocked_exits_1_with_one_line_per_blocker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocked = policy("blocked", autogen={"podControllers": True}, groups=("*",), resources=("*",),
                     references=[{"apiVersion": "v1", "resource": "services"}])
    (tmp_path / "p.yaml").write_text(yaml.safe_dump_all([EVERYTHING, blocked]))
    assert main(["export", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert [o["metadata"]["name"] for o in yaml.safe_load_all(out)] == [
        "everything", "everything-binding", "everything", "everything-binding"]
    lines = err.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'p.yaml'}:")
    assert [line.split(": cannot be exported: ")[1].split(":")[0] for line in lines[:-1]] == [
        "spec.references", "spec.autogen.podControllers"]
    assert lines[-1] == "tollgate export: 1 of 2 policies exported, 1 blocked"


def test_nothing_exportable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(ROOT / "policies" / "examples" / "unique-ingress-host")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "spec.references: reading cached objects" in err
    assert err.splitlines()[-1] == "tollgate export: nothing exported: 1 policy blocked"


@pytest.mark.parametrize(("argv", "message"), [
    (["export", "/nonexistent"], "tollgate export: /nonexistent: no such file or directory"),
    (["export", "-o", "xml", "x"], "argument -o/--output: invalid choice: 'xml'"),
])
def test_unusable_input_is_one_line_and_exit_2(argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_no_policy_in_the_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
    assert main(["export", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "tollgate export: no ClusterAdmissionPolicy or AdmissionPolicy found\n"


def test_kyverno_library_calls_are_named() -> None:
    found = blockers(policy("k", validations=[{"expression": "sha256(regex.replace(object.metadata.name, 'a', 'b')) "
                                                             "!= '' && math.round(1.5) == 2.0"}]))
    assert [b.reason for b in found] == ["regex.replace, sha256 is Kyverno's CEL library; Kubernetes' CEL has none"]


def _template_pod(root: str, request: dict[str, Any], obj: Any) -> Any:
    env = environment()
    program = env.compile(pod_expression(root))
    return program.eval(env.Activation({"request": request, root: obj})).plain_value()


WORKLOAD_TEMPLATE = {"metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}


@pytest.mark.parametrize(("group", "resource", "path"), [
    ("apps", "deployments", ("spec", "template")),
    ("", "replicationcontrollers", ("spec", "template")),
    ("batch", "jobs", ("spec", "template")),
    ("batch", "cronjobs", ("spec", "jobTemplate", "spec", "template")),
])
def test_the_exported_pod_is_the_pod_tollgate_evaluates(group: str, resource: str, path: tuple[str, ...]) -> None:
    workload: dict[str, Any] = {"metadata": {"name": "w", "namespace": "team-a"}}
    node = workload
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = copy.deepcopy(WORKLOAD_TEMPLATE)
    request = {"resource": {"group": group, "version": "v1", "resource": resource}}
    for root in POD_VARIABLES:
        assert _template_pod(root, request, workload) == synthesize_pod(workload, path)
        assert _template_pod(root, request, None) is None


def test_messages_carry_tollgates_template_prefix() -> None:
    obj = policy("m", autogen={"podControllers": True}, validations=[
        {"expression": "object.spec.x == 1", "message": 'no "x"'}, {"expression": "object.spec.y == 1"}])
    vap = export_policy(obj).objects[0]
    first, second = vap["spec"]["validations"]
    assert first["message"] == 'no "x"'  # the fallback when the messageExpression fails
    assert first["messageExpression"] == 'variables.tollgateTemplatePath + "no \\"x\\""'
    assert second["messageExpression"] == (
        'variables.tollgateTemplatePath + "failed expression: object.spec.y == 1"')
    env = environment()
    prefix = env.compile(template_path_expression())
    for resource, want in (("cronjobs", "spec.jobTemplate.spec.template: "), ("jobs", "spec.template: "),
                           ("pods", "")):
        group = {"cronjobs": "batch", "jobs": "batch", "pods": ""}[resource]
        request = {"resource": {"group": group, "version": "v1", "resource": resource}}
        assert prefix.eval(env.Activation({"request": request})).plain_value() == want


def test_the_exported_pod_of_a_pod_request_is_the_pod_itself() -> None:
    pod = {"metadata": {"name": "p", "namespace": "x"}, "spec": {"containers": []}}
    request = {"resource": {"group": "", "version": "v1", "resource": "pods"}}
    assert _template_pod("object", request, pod) == pod


def test_the_typed_mutations_patch_as_the_map_literals_did(tmp_path: Path) -> None:
    example = ROOT / "policies" / "examples" / "add-default-labels"
    exported = tmp_path / "exported.yaml"
    exported.write_text(yaml.safe_dump_all(export_policy(
        yaml.safe_load((example / "policy.yaml").read_text())).objects))
    namespaces = [d.obj for d in load_kind([example / "namespaces.yaml"], "Namespace")]
    resources = load_resources([example / "resources.yaml"])
    patched = []
    for source in (example / "policy.yaml", exported):
        chain = AdmissionChain(load_policies([source]), namespaces=namespaces)
        patched.append([chain.evaluate(build_request(doc.obj, operation="CREATE", user_info={"username": "alice"}))
                        .patched for doc in resources])
    original, back = patched
    assert original == back
    assert all(p is not None and p["metadata"]["labels"]["tollgate.dev/managed"] == "true" for p in back)
