"""kyverno/policies' CEL policies that exercise the CEL dialect gaps and Kyverno's libraries, run as their own
``.kyverno-test`` files expect (tests/fixtures/kyverno-policies-cel/, Apache-2.0).

Each result row of a ``kyverno-test.yaml`` is decided here with Tollgate's converter and engine: a
ValidatingPolicy row's ``pass``/``fail``/``skip`` is the policy's result for the resource; a MutatingPolicy
row's ``pass`` is the resource patched into its ``patchedResources`` document, ``skip`` no patch at all.
The policies are written as ``policies.kyverno.io/v1alpha1``, read here as ``v1`` (the same schema).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.unit.policy.helpers import request
from webhook.formats.catalog import import_policies
from webhook.policy import InMemoryLookups, compile_policy, evaluate_mutating, evaluate_validating

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kyverno-policies-cel"
_PLURAL = {"Pod": "pods", "ConfigMap": "configmaps", "Job": "jobs", "CronJob": "cronjobs",
           "Deployment": "deployments", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets",
           "ReplicaSet": "replicasets"}


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def _rows() -> list[Any]:
    rows = []
    for test_file in sorted(FIXTURES.glob("*/*/.kyverno-test/kyverno-test.yaml")):
        test = yaml.safe_load(test_file.read_text())
        for i, row in enumerate(test["results"]):
            for name in row["resources"]:
                rows.append(pytest.param(test_file, row, name, id=f"{test_file.parts[-3]}[{i}]-{name}"))
    return rows


def _request(test_file: Path, test: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    req = request(obj, resource=_PLURAL[obj["kind"]], group=group, version=version, kind=obj["kind"],
                  namespace=obj["metadata"]["namespace"])
    req["name"] = obj["metadata"]["name"]
    if "userinfo" in test:
        user = yaml.safe_load((test_file.parent / test["userinfo"]).read_text())["userInfo"]
        req["userInfo"] = user
    return req


@pytest.mark.parametrize(("test_file", "row", "name"), _rows())
def test_a_kyverno_test_row_holds(test_file: Path, row: dict[str, Any], name: str) -> None:
    test = yaml.safe_load(test_file.read_text())
    here = test_file.parent
    sources = [d for p in test["policies"] for d in _documents(here / p)]
    for source in sources:
        source["apiVersion"] = source["apiVersion"].replace("/v1alpha1", "/v1")
    (imported,) = [p for p in import_policies(sources).policies if p.key.endswith("/" + row["policy"])]
    assert not imported.problems, imported.problems
    compiled = compile_policy(imported.obj)
    assert compiled.policy is not None, compiled.condition
    resources = [d for p in test["resources"] for d in _documents(here / p)]
    namespace, _, name = name.rpartition("/")  # a row names "namespace/name" or "name"
    (obj,) = [r for r in resources if r["metadata"]["name"] == name and r["kind"] == row["kind"]
              and r["metadata"].get("namespace", "") == (namespace or r["metadata"].get("namespace", ""))]
    obj["metadata"].setdefault("namespace", "default")  # as the API server (and Kyverno's CLI) fill it
    req = _request(test_file, test, obj)
    if row.get("isMutatingPolicy"):
        out = evaluate_mutating(req, [compiled.policy], InMemoryLookups())
        assert out.allowed, out.message
        if row["result"] == "skip":
            assert not out.patch
            return
        (expected,) = [d for d in _documents(here / row["patchedResources"]) if d["metadata"]["name"] == name
                       and d["kind"] == obj["kind"]]
        patched = jsonpatch.apply_patch(copy.deepcopy(obj), out.patch or [])
        if "namespace" not in expected["metadata"]:
            del patched["metadata"]["namespace"]  # some expected documents leave out the namespace filled in
        assert patched == expected
    else:
        results = evaluate_validating(req, [compiled.policy], InMemoryLookups()).results
        got = str(results[0].result) if results else "skip"
        assert got == row["result"], results
