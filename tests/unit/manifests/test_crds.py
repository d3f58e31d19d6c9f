"""The CRDs' structural schemas accept every shipped policy and reject malformed specs.

The API server would check both the openAPIV3Schema and its
``x-kubernetes-validations`` CEL rules at ``kubectl apply``; here the schema is
checked with jsonschema and the rules are evaluated with cel-expr-python
(``self`` bound to the value at that node), as kube-apiserver does.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cel_expr_python import cel

ROOT = Path(__file__).resolve().parents[3]
CRDS = {doc["spec"]["names"]["kind"]: doc for path in sorted((ROOT / "manifests" / "crds").glob("*policies.yaml"))
        for doc in yaml.safe_load_all(path.read_text()) if doc}
CEL_ENV = cel.NewEnv(variables={"self": cel.Type.DYN})


def rule_violations(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    out = []
    for rule in schema.get("x-kubernetes-validations", []):
        result = CEL_ENV.compile(rule["rule"]).eval(CEL_ENV.Activation({"self": value}))
        if result.type() == cel.Type.ERROR or result.plain_value() is not True:
            out.append(f"{path or '<root>'}: {rule['message']}")
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                out += rule_violations(sub, value[key], f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += rule_violations(schema["items"], item, f"{path}[{i}]")
    return out


def problems(obj: dict[str, Any]) -> list[str]:
    schema = CRDS[obj["kind"]]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]
    return errors + rule_violations(schema, obj)


def shipped_policies() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "policies").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in CRDS:
                out.append((f"{path.relative_to(ROOT)}:{doc['metadata']['name']}", doc))
    return out


def test_both_kinds_with_status_subresource_and_printer_columns() -> None:
    assert set(CRDS) == {"ClusterAdmissionPolicy", "AdmissionPolicy"}
    assert CRDS["ClusterAdmissionPolicy"]["spec"]["scope"] == "Cluster"
    assert CRDS["AdmissionPolicy"]["spec"]["scope"] == "Namespaced"
    for crd in CRDS.values():
        version = crd["spec"]["versions"][0]
        assert version["subresources"] == {"status": {}}
        assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Ready", "Actions", "Age"]
        assert crd["spec"]["names"]["shortNames"]


@pytest.mark.parametrize(("name", "doc"), shipped_policies(), ids=[n for n, _ in shipped_policies()])
def test_shipped_policies_are_accepted(name: str, doc: dict[str, Any]) -> None:
    assert problems(doc) == []


GOOD = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy", "metadata": {"name": "x"},
        "spec": {"match": {"resourceRules": [{"resources": ["pods"], "operations": ["CREATE"]}]},
                 "validations": [{"expression": "true"}]}}


@pytest.mark.parametrize(("mutate", "fragment"), [
    (lambda s: s.update(failurePolicy="Sometimes"), "is not one of"),
    (lambda s: s.update(validationActions=["Deny", "Warn"]), "Deny and Warn may not be combined"),
    (lambda s: s["match"]["resourceRules"][0].update(operations=["PATCH"]), "is not one of"),
    (lambda s: s["match"].update(resourceRules=[]), "should be non-empty"),
    (lambda s: s.pop("validations"), "at least one of validations"),
    (lambda s: s.update(paramRef={"name": "a", "selector": {}}), "exactly one of name or selector"),
    (lambda s: s.update(mutations=[{"patchType": "JSONPatch"}]), "jsonPatch is required"),
    (lambda s: s["validations"][0].update(reason="Teapot"), "is not one of"),
    (lambda s: s.update(variables=[{"name": "not an identifier", "expression": "1"}]), "does not match"),
    (lambda s: s["match"].update(namespaceSelector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
     "values must be non-empty"),
])
def test_malformed_specs_are_rejected(mutate: Any, fragment: str) -> None:
    doc = copy.deepcopy(GOOD)
    assert problems(doc) == []
    mutate(doc["spec"])
    found = problems(doc)
    assert any(fragment in p for p in found), found
