"""Strict schema validation (webhook.files.schema): one source of truth with manifests/crds, kubectl-like messages."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.files import schema

ROOT = Path(__file__).resolve().parents[3]
CRDS = sorted((ROOT / "manifests" / "crds").glob("*policies.yaml"))

GOOD: dict[str, Any] = {
    "apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy", "metadata": {"name": "x"},
    "spec": {"match": {"resourceRules": [{"resources": ["pods"], "operations": ["CREATE"]}]},
             "validationActions": ["Deny"], "validations": [{"expression": "true"}]},
}


@pytest.mark.parametrize("crd", CRDS, ids=[c.name for c in CRDS])
def test_package_schema_is_the_crd_schema(crd: Path) -> None:
    doc = yaml.safe_load(crd.read_text())
    assert doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == schema.policy_openapi_schema(), (
        f"webhook/schemas/policy-v1alpha1.yaml differs from {crd}: run "
        f"python -m webhook.files.schema --sync {crd.relative_to(ROOT)}")


def test_sync_rewrites_the_package_copy_from_a_crd(tmp_path: Path) -> None:
    out = tmp_path / "copy.yaml"
    out.write_text("# header kept\nstale: true\n")
    schema.sync_from_crd(CRDS[0], out)
    assert out.read_text().startswith("# header kept\n")
    assert yaml.safe_load(out.read_text()) == schema.policy_openapi_schema()


def with_spec(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    doc["spec"].update(changes)
    return doc


def messages(doc: dict[str, Any]) -> list[tuple[str, str]]:
    from webhook.files.yamlio import format_path

    return [(format_path(p.path), p.message) for p in schema.validate(doc)]


def test_a_good_policy_is_clean() -> None:
    assert schema.validate(GOOD) == []


@pytest.mark.parametrize(("doc", "expected"), [
    (with_spec(validationAction=["Deny"]),
     [("spec.validationAction", "unknown field (did you mean validationActions?)")]),
    (with_spec(failurePolicy="Sometimes"),
     [("spec.failurePolicy", "unsupported value Sometimes: must be one of Fail, Ignore")]),
    (with_spec(validations="true"), [("spec.validations", "must be a list, got a string")]),
    (with_spec(match={}), [("spec.match.resourceRules", "required field is missing")]),
    (with_spec(validationActions=["Deny", "Warn"]), [("spec.validationActions", "Deny and Warn may not be combined")]),
    (with_spec(variables=[{"name": "1x", "expression": "1"}]),
     [("spec.variables[0].name", "1x does not match ^[A-Za-z_][A-Za-z0-9_]*$")]),
    ({**GOOD, "metadata": {"name": "x", "labels": {"tollgate.dev/params": True}}},
     [("metadata.labels.tollgate.dev/params", "must be a string, got a boolean")]),
    ({**GOOD, "metadata": {"name": "x", "nmae": "y"}}, [("metadata.nmae", "unknown field (did you mean name?)")]),
    ({**GOOD, "apiVersion": "tollgate.dev/v1"},
     [("apiVersion", "ClusterAdmissionPolicy is served as tollgate.dev/v1alpha1, not tollgate.dev/v1")]),
    ({k: v for k, v in GOOD.items() if k != "apiVersion"},
     [("apiVersion", "required field is missing (want tollgate.dev/v1alpha1)")]),
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"n": 1}},
     [("data.n", "must be a string, got an integer")]),
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "datas": {}},
     [("datas", "unknown field (did you mean data?)")]),
    ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "creationTimestamp": None},
      "spec": {"finalizer": []}}, [("spec.finalizer", "unknown field (did you mean finalizers?)")]),
    ({"apiVersion": "tollgate.dev/v1alpha1", "kind": "TestSuite", "policies": ["p.yaml"], "resources": ["r.yaml"],
      "results": [{"policy": "p", "resource": {"kind": "Pod", "name": "x"}, "result": "pass", "opration": "x"}]},
     [("results[0].opration", "unknown field (did you mean operation?)")]),
    ({"apiVersion": "tollgate.dev/v1alpha1", "kind": "TestSuite", "policies": [], "resources": ["r.yaml"],
      "results": []}, [("policies", "must not be empty"), ("results", "must not be empty")]),
])
def test_violations_are_named_by_yaml_path(doc: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert messages(doc) == expected


def test_kinds_without_a_schema() -> None:
    assert not schema.has_schema({"apiVersion": "v1", "kind": "Pod"})
    with pytest.raises(ValueError, match="no schema for kind 'Pod'"):
        schema.validate({"apiVersion": "v1", "kind": "Pod"})


def test_a_wrong_type_is_reported_alone_at_its_path() -> None:
    doc = with_spec(validations=[{"expression": "true", "reason": 3}])
    assert messages(doc) == [("spec.validations[0].reason", "must be a string, got an integer")]


EXCEPTION_CRDS = sorted((ROOT / "manifests" / "crds").glob("*policyexceptions.yaml"))


@pytest.mark.parametrize("crd", EXCEPTION_CRDS, ids=[c.name for c in EXCEPTION_CRDS])
def test_package_exception_schema_is_the_crd_schema(crd: Path) -> None:
    doc = yaml.safe_load(crd.read_text())
    assert doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == schema.exception_openapi_schema(), (
        f"webhook/schemas/exception-v1alpha1.yaml differs from {crd}: run "
        f"python -m webhook.files.schema --sync {crd.relative_to(ROOT)}")


def test_a_policy_exception_is_checked_strictly() -> None:
    doc = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
           "metadata": {"name": "x", "namespace": "team-a"},
           "spec": {"policies": [{"name": "p"}], "reason": "T-1", "expiresAt": "2026-11-28T06:00:00Z",
                    "mode": "Audit", "matchConditions": [{"name": "c", "expression": "true"}]}}
    assert schema.validate(doc) == []
    doc["spec"]["policy"] = doc["spec"].pop("policies")
    assert [(p.path, p.message) for p in schema.validate(doc)] == [
        (("spec", "policies"), "required field is missing"),
        (("spec", "policy"), "unknown field (did you mean policies?)")]
