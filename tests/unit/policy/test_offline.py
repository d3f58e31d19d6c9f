"""``tollgate test`` (webhook.cli.test): help, TestSuite expectations, input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.cli.main import main as tollgate


def run_test(argv: list[str]) -> int:
    return tollgate(["test", *argv])


EXAMPLE = Path(__file__).resolve().parents[3] / "policies" / "examples" / "allowed-registries"


def test_help_documents_the_test_suite_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_test(["--help"]) == 0
    out = capsys.readouterr().out
    for word in ("kind: TestSuite", "configMaps", "namespaces", "oldResources", "patchedResource", "results",
                 "pass | fail | warn | skip | error", "1 on any mismatch", "table|json|yaml|junit"):
        assert word in out


def test_json_rows_for_files_and_exit_1_on_a_fail_row(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_test(["--policy", str(EXAMPLE / "policy.yaml"), "--resource", str(EXAMPLE / "resources.yaml"),
                 "--configmap", str(EXAMPLE / "configmap.yaml"), "--output", "json"])
    assert code == 1
    rows = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["name"], r["result"]) for r in rows] == [
        ("Pod", "good", "pass"), ("Pod", "bad", "fail"), ("Deployment", "bad-deploy", "fail")]
    assert rows[2]["message"].startswith("spec.template: ")


def test_missing_configmap_is_an_error_under_parameter_not_found_action_deny(
        capsys: pytest.CaptureFixture[str]) -> None:
    # VAP: with parameterNotFoundAction Deny, missing params are "subject to the failurePolicy" (Fail here).
    code = run_test(["--policy", str(EXAMPLE / "policy.yaml"), "--resource", str(EXAMPLE / "resources.yaml"),
                 "--output", "json"])
    assert code == 1
    rows = json.loads(capsys.readouterr().out)
    assert {r["result"] for r in rows} == {"error"}


@pytest.mark.parametrize(("expected", "code"), [("pass", 0), ("fail", 1)])
def test_suite_mismatch_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str], expected: str, code: int) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "apiVersion: tollgate.dev/v1alpha1\nkind: TestSuite\n"
        f"policies: [{EXAMPLE / 'policy.yaml'}]\nresources: [{EXAMPLE / 'resources.yaml'}]\n"
        f"configMaps: [{EXAMPLE / 'configmap.yaml'}]\n"
        f"results:\n- {{policy: allowed-registries, resource: {{kind: Pod, namespace: default, name: good}}, "
        f"result: {expected}}}\n")
    assert run_test([str(suite)]) == code
    if code:
        assert "expected fail, got pass" in capsys.readouterr().err
    else:
        assert "all 1 expectations met" in capsys.readouterr().err


def test_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_test(["--policy", str(tmp_path / "nope.yaml"), "--resource", str(EXAMPLE / "resources.yaml")]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml" in err and "Traceback" not in err


@pytest.mark.parametrize(("failure_policy", "result", "code"), [("Fail", "error", 1), ("Ignore", "error", 1)])
def test_a_broken_policy_is_answered_per_its_failure_policy_offline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], failure_policy: str, result: str, code: int) -> None:
    # As in a cluster: a policy whose CEL does not compile still selects what its rules select,
    # and each such request is an error under its failurePolicy; the author is told it is not Ready.
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: tollgate.dev/v1alpha1\nkind: ClusterAdmissionPolicy\nmetadata: {name: broken}\nspec:\n"
        f"  failurePolicy: {failure_policy}\n"
        "  match: {resourceRules: [{apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}]}\n"
        "  validations: [{expression: 'objekt.spec == 1'}]\n")
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\n"
                   "spec: {containers: [{name: c, image: x}]}\n")
    assert run_test(["--policy", str(policy), "--resource", str(pod), "--output", "json"]) == code
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert [(r["policy"], r["result"]) for r in rows] == [("broken", result)]
    assert ("policy is not ready: spec.validations[0].expression: ERROR: <input>:1:7: undeclared reference"
            in rows[0]["message"])
    assert "not Ready" in captured.err and "answered per its failurePolicy" in captured.err
