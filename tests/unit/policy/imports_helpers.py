"""Builders for the imported kinds: ValidatingAdmissionPolicy/MutatingAdmissionPolicy, bindings, Kyverno policies."""

from __future__ import annotations

import copy
from typing import Any

ADMISSION = "admissionregistration.k8s.io/v1"
KYVERNO = "policies.kyverno.io/v1"
PODS_RULE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE", "UPDATE"]}


def vap(name: str = "need-team", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"matchConstraints": {"resourceRules": [copy.deepcopy(PODS_RULE)]},
                            "validations": [{"expression": "'team' in object.metadata.?labels.orValue({})",
                                             "message": "team label required"}]}
    body.update(spec)
    return {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name, "generation": 3},
            "spec": body}


def vap_binding(name: str = "need-team-all", policy: str = "need-team", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"policyName": policy, "validationActions": ["Deny"]}
    body.update(spec)
    return {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
            "spec": body}


def map_policy(name: str = "add-team", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "matchConstraints": {"resourceRules": [copy.deepcopy(PODS_RULE)]}, "reinvocationPolicy": "Never",
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
            "expression": "[{'op': 'add', 'path': '/metadata/labels', 'value': {'team': 'none'}}]"}}]}
    body.update(spec)
    return {"apiVersion": ADMISSION, "kind": "MutatingAdmissionPolicy", "metadata": {"name": name}, "spec": body}


def map_binding(name: str = "add-team-all", policy: str = "add-team", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"policyName": policy}
    body.update(spec)
    return {"apiVersion": ADMISSION, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name},
            "spec": body}


def kyverno_vpol(name: str = "check-team", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"matchConstraints": {"resourceRules": [copy.deepcopy(PODS_RULE)]},
                            "validations": [{"expression": "'team' in object.metadata.?labels.orValue({})",
                                             "message": "team label required"}]}
    body.update(spec)
    return {"apiVersion": KYVERNO, "kind": "ValidatingPolicy", "metadata": {"name": name}, "spec": body}


def kyverno_mpol(name: str = "add-team", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"matchConstraints": {"resourceRules": [copy.deepcopy(PODS_RULE)]},
                            "mutations": copy.deepcopy(map_policy()["spec"]["mutations"])}
    body.update(spec)
    return {"apiVersion": KYVERNO, "kind": "MutatingPolicy", "metadata": {"name": name}, "spec": body}
