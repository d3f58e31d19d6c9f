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
from webhook.formats.kubernetes.export import BINDING_FIELDS, POLICY_FIELDS, blockers, export_policy

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
    (policy("a", autogen={"podControllers": True}), "spec.autogen.podControllers"),
    (policy("s", paramRef={"selector": {"matchLabels": {"a": "b"}}, "namespace": "x"},
            validations=[{"expression": "size(params) > 0"}]), "spec.paramRef.selector"),
    (policy("u", onUnsynced="Allow", validations=[{"expression": "namespaceObject.metadata.name != 'x'"}]),
     "spec.onUnsynced"),
    (policy("m", mutations=_mutation("{'metadata': {'labels': {'a': 'b'}}}")),
     "spec.mutations[0].applyConfiguration.expression"),
    (policy("j", mutations=_mutation("[{'op': 'remove', 'path': '/metadata/labels'}]", "JSONPatch")),
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
    blocked = policy("blocked", autogen={"podControllers": True}, onUnsynced="Warn",
                     validations=[{"expression": "namespaceObject != null"}])
    (tmp_path / "p.yaml").write_text(yaml.safe_dump_all([EVERYTHING, blocked]))
    assert main(["export", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert [o["metadata"]["name"] for o in yaml.safe_load_all(out)] == [
        "everything", "everything-binding", "everything", "everything-binding"]
    lines = err.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'p.yaml'}:")
    assert [line.split(": cannot be exported: ")[1].split(":")[0] for line in lines[:-1]] == [
        "spec.autogen.podControllers", "spec.onUnsynced"]
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
