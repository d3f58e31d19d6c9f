"""Kyverno's CEL PolicyException in the CLI: ``tollgate test`` (a Kyverno Test's ``exceptions:``, ``-p``), lint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.cli.main import main

POLICY = """\
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: require-team
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  validations:
  - expression: "'team' in object.metadata.?labels.orValue({})"
    message: team label required
"""
EXCEPTION = """\
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata:
  name: debug-pods
  namespace: team-a
spec:
  policyRefs:
  - name: require-team
    kind: ValidatingPolicy
  matchConditions:
  - name: debug-only
    expression: "object.metadata.name.startsWith('debug')"
"""
RESOURCES = """\
apiVersion: v1
kind: Pod
metadata: {name: debug-1, namespace: team-a}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: team-a}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Pod
metadata: {name: debug-2, namespace: team-b}
spec: {containers: [{name: c, image: busybox}]}
"""
# debug-1 is exempted; web is not selected by the matchCondition; debug-2 is in another namespace (confined).
TEST = """\
apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata:
  name: require-team
policies: [policy.yaml]
resources: [resources.yaml]
exceptions: [exception.yaml]
results:
- policy: require-team
  resources: [debug-1]
  kind: Pod
  result: skip
- policy: require-team
  resources: [web, debug-2]
  kind: Pod
  result: fail
"""


def write(tmp_path: Path, exception: str = EXCEPTION) -> Path:
    for name, text in (("policy.yaml", POLICY), ("exception.yaml", exception), ("resources.yaml", RESOURCES),
                       ("kyverno-test.yaml", TEST)):
        (tmp_path / name).write_text(text)
    return tmp_path / "kyverno-test.yaml"


def test_a_kyverno_test_with_exceptions_runs_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["test", str(write(tmp_path)), "-o", "json"])
    out, err = capsys.readouterr()
    rows = {(r["namespace"], r["name"]): r for r in json.loads(out)}
    assert status == 0, err
    assert rows["team-a", "debug-1"]["result"] == "skip"
    assert "PolicyException.policies.kyverno.io team-a/debug-pods" in rows["team-a", "debug-1"]["message"]
    assert rows["team-a", "web"]["result"] == rows["team-b", "debug-2"]["result"] == "fail"


def test_an_expired_exception_exempts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    test_file = write(tmp_path, EXCEPTION + "  expiresAt: \"2020-01-01T00:00:00Z\"\n")
    status = main(["test", str(test_file)])
    _, err = capsys.readouterr()
    assert status == 1 and "require-team on Pod/team-a/debug-1 (CREATE): expected skip, got fail" in err


def test_policies_and_exceptions_given_with_p(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path)
    status = main(["test", "-p", str(tmp_path / "policy.yaml"), "-p", str(tmp_path / "exception.yaml"),
                   "-r", str(tmp_path / "resources.yaml"), "-o", "json"])
    rows = {r["name"]: r["result"] for r in json.loads(capsys.readouterr().out)}
    assert status == 1  # two pods still fail
    assert rows == {"debug-1": "skip", "web": "fail", "debug-2": "fail"}


def test_lint_accepts_a_kyverno_exception_naming_a_policy_it_reads(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path)
    assert main(["lint", str(tmp_path)]) == 0, capsys.readouterr().out


@pytest.mark.parametrize(("change", "line", "message"), [
    (("name: require-team", "name: require-tame"), 8,
     "spec.policyRefs[0]: no ValidatingPolicy named require-tame among the files linted "
     "(have: ValidatingPolicy/require-team)"),
    (("kind: ValidatingPolicy", "kind: MutatingPolicy"), 9,
     "spec.policyRefs[0].kind: MutatingPolicy: Tollgate exempts only ValidatingPolicy and NamespacedValidatingPolicy"),
    (("startsWith('debug')", "startsWith(1)"), 12, "spec.matchConditions[0].expression:"),
    (("  matchConditions:", "  images: [busybox]\n  matchConditions:"), 10, "spec.images: fine-grained exceptions"),
])
def test_lint_refuses_a_kyverno_exception_it_cannot_honour(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          change: tuple[str, str], line: int, message: str) -> None:
    write(tmp_path, EXCEPTION.replace(*change))
    capsys.readouterr()
    assert main(["lint", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"exception.yaml:{line}: document 1: PolicyException team-a/debug-pods: {message}" in out, out


def test_audit_reports_the_exempted_object_as_skip_naming_the_exception(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path)
    status = main(["audit", "-p", str(tmp_path / "policy.yaml"), "-p", str(tmp_path / "exception.yaml"),
                   "-r", str(tmp_path / "resources.yaml"), "-o", "json"])
    reports = json.loads(capsys.readouterr().out)
    rows = {(r["resources"][0]["name"]): (r["result"], r.get("properties"))
            for report in reports.get("items", []) for r in report.get("results", [])}
    assert status == 1  # two objects fail
    assert rows["debug-1"] == ("skip", {"exception": "PolicyException.policies.kyverno.io team-a/debug-pods"})
    assert rows["web"][0] == rows["debug-2"][0] == "fail"
