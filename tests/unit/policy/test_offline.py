"""``tollgate test`` (webhook.offline.main): help, TestSuite expectations, input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.offline import main

EXAMPLE = Path(__file__).resolve().parents[3] / "policies" / "examples" / "allowed-registries"


def test_help_documents_the_test_suite_schema(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for word in ("kind: TestSuite", "configMaps", "namespaces", "oldResources", "patchedResource", "results",
                 "pass | fail | warn | skip | error", "1 on any mismatch", "table|json|yaml|junit"):
        assert word in out


def test_json_rows_for_files_and_exit_1_on_a_fail_row(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--policy", str(EXAMPLE / "policy.yaml"), "--resource", str(EXAMPLE / "resources.yaml"),
                 "--configmap", str(EXAMPLE / "configmap.yaml"), "--output", "json"])
    assert code == 1
    rows = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["name"], r["result"]) for r in rows] == [
        ("Pod", "good", "pass"), ("Pod", "bad", "fail"), ("Deployment", "bad-deploy", "fail")]
    assert rows[2]["message"].startswith("spec.template: ")


def test_missing_configmap_is_an_error_under_parameter_not_found_action_deny(capsys: pytest.CaptureFixture[str]) -> None:
    # VAP: with parameterNotFoundAction Deny, missing params are "subject to the failurePolicy" (Fail here).
    code = main(["--policy", str(EXAMPLE / "policy.yaml"), "--resource", str(EXAMPLE / "resources.yaml"),
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
    assert main([str(suite)]) == code
    if code:
        assert "expected fail, got pass" in capsys.readouterr().err
    else:
        assert "all 1 expectations met" in capsys.readouterr().err


def test_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--policy", str(tmp_path / "nope.yaml"), "--resource", str(EXAMPLE / "resources.yaml")]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml" in err and "Traceback" not in err
