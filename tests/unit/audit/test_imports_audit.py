"""``tollgate audit`` reads the imported kinds: their PolicyReports, and what is not audited said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
VAP_EXAMPLE = ROOT / "policies" / "examples" / "vap-required-labels"
KYVERNO_EXAMPLE = ROOT / "policies" / "examples" / "kyverno-restrict-image-registries"


def test_audit_reports_imported_policies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--all", "-p", str(KYVERNO_EXAMPLE / "validating-policy.yaml"),
                 "-r", str(KYVERNO_EXAMPLE / "resources.yaml"), "-r", str(KYVERNO_EXAMPLE / "existing.yaml"),
                 "-o", "json"]) == 1
    (report,) = json.loads(capsys.readouterr().out)["items"]
    # One row per validation: the registries are configured (validations[0]); some images are not from them.
    assert {(r["policy"], r["rule"], r["result"], r["resources"][0]["name"], r["severity"], r["category"])
            for r in report["results"]} == {
        ("ValidatingPolicy/restrict-image-registries", f"validations[{i}]", result, name, "medium", "Best Practices")
        for name, results in (("good", ("pass", "pass")), ("bad", ("pass", "fail")), ("bad-deploy", ("pass", "fail")))
        for i, result in enumerate(results)}


def test_audit_reads_bindings_and_their_params(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Background scans asked for by annotation on the policy (without it: --all).
    asked = tmp_path / "admission-policy.yaml"
    asked.write_text((VAP_EXAMPLE / "admission-policy.yaml").read_text().replace(
        "  name: required-labels\nspec:",
        "  name: required-labels\n  annotations: {policies.tollgate.dev/background: \"true\"}\nspec:"))
    assert main(["audit", "-p", str(asked), "-r", str(VAP_EXAMPLE / "resources.yaml"),
                 "-c", str(VAP_EXAMPLE / "configmap.yaml"), "-n", str(VAP_EXAMPLE / "namespaces.yaml"),
                 "-o", "json"]) == 1
    rows = {(r["policy"].rsplit("/", 1)[1], r["result"], r["resources"][0]["namespace"])
            for report in json.loads(capsys.readouterr().out)["items"] for r in report["results"]}
    assert rows == {("required-labels-prod", "pass", "shop"), ("required-labels-prod", "fail", "shop"),
                    ("required-labels-elsewhere", "fail", "sandbox")}
    # Without the annotation (the example's), nothing is audited, and said so.
    assert main(["audit", "-p", str(VAP_EXAMPLE / "admission-policy.yaml"),
                 "-r", str(VAP_EXAMPLE / "resources.yaml")]) == 2
    assert "nothing audited: no policy has spec.background: true" in capsys.readouterr().err


def test_audit_follows_kyverno_evaluation_background(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    on = tmp_path / "on.yaml"
    shutil.copy(KYVERNO_EXAMPLE / "validating-policy.yaml", on)
    on.write_text(on.read_text().replace("enabled: false", "enabled: true"))
    assert main(["audit", "-p", str(on), "-r", str(KYVERNO_EXAMPLE / "resources.yaml"),
                 "-r", str(KYVERNO_EXAMPLE / "existing.yaml")]) == 1
    assert "audited 1 policy on 3 objects" in capsys.readouterr().err
    assert main(["audit", "-p", str(KYVERNO_EXAMPLE / "validating-policy.yaml"),
                 "-r", str(KYVERNO_EXAMPLE / "resources.yaml")]) == 2
    assert "nothing audited" in capsys.readouterr().err


NAMESPACED_POLICY = """\
apiVersion: policies.kyverno.io/v1alpha1
kind: NamespacedValidatingPolicy
metadata: {name: no-evil, namespace: team-a}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
  - {expression: "!object.spec.containers.exists(c, c.image.startsWith('evil'))", message: no evil}
"""
EVIL_PODS = """\
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: team-a}
spec: {containers: [{name: c, image: evil/x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: team-b}
spec: {containers: [{name: c, image: evil/x}]}
"""


def test_audit_confines_a_namespaced_kyverno_policy_to_its_namespace(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(NAMESPACED_POLICY)
    (tmp_path / "pods.yaml").write_text(EVIL_PODS)
    assert main(["audit", "-p", str(tmp_path / "p.yaml"), "-r", str(tmp_path / "pods.yaml"), "-o", "json"]) == 1
    reports = json.loads(capsys.readouterr().out)["items"]
    assert [(r["metadata"]["namespace"], [(x["policy"], x["result"]) for x in r["results"]]) for r in reports] == [
        ("team-a", [("team-a/NamespacedValidatingPolicy/no-evil", "fail")])]
