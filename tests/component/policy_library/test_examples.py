"""Every worked example's TestSuite passes with ``tollgate test`` (the CLI as users run it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
SUITES = sorted((ROOT / "policies" / "examples").glob("*/test.yaml"))


def test_there_are_example_suites() -> None:
    assert len(SUITES) >= 3


@pytest.mark.parametrize("suite", SUITES, ids=[s.parent.name for s in SUITES])
def test_example_suite_passes(suite: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(suite), "--output", "json"]) == 0, capsys.readouterr().err
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(set(r) == {"policy", "kind", "namespace", "name", "result", "message", "suite", "operation",
                                   "expected", "ok", "mismatch"} for r in rows)
    assert all(r["ok"] and r["result"] == r["expected"] and r["mismatch"] == "" for r in rows)


def test_the_examples_directory_runs_every_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(ROOT / "policies" / "examples"), "--output", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["suite"] for r in rows} == {str(s) for s in SUITES}


def test_lint_accepts_every_shipped_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(ROOT / "policies")]) == 0, capsys.readouterr().out
    assert "no problems" in capsys.readouterr().err


def test_a_wrong_expectation_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = ROOT / "policies" / "examples" / "disallow-latest-tag"
    suite = tmp_path / "test.yaml"
    suite.write_text(
        f"apiVersion: tollgate.dev/v1alpha1\nkind: TestSuite\npolicies: [{example / 'policy.yaml'}]\n"
        f"resources: [{example / 'resources.yaml'}]\n"
        "results:\n- {policy: disallow-latest-tag, resource: {kind: Pod, name: latest}, result: pass}\n")
    assert main(["test", str(suite)]) == 1
    assert "expected pass, got warn" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "fragment", "code"), [
    ("a: [unclosed", "policy.yaml:2:1: invalid YAML: did not find expected ',' or ']'", 2),
    # A policy whose CEL does not compile is evaluated as in a cluster (an error row under its failurePolicy,
    # exit 1), and the author is told where the error is.
    (("apiVersion: tollgate.dev/v1alpha1\nkind: ClusterAdmissionPolicy\nmetadata: {name: x}\nspec:\n"
      "  match: {resourceRules: [{resources: [pods]}]}\n  validations: [{expression: 'objekt'}]\n"),
     "policy.yaml:6: document 1: ClusterAdmissionPolicy x: spec.validations[0].expression: ERROR: <input>:1:1", 1),
])
def test_bad_input_is_a_clear_error_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    content: str, fragment: str, code: int) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text(content)
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n")
    assert main(["test", "--policy", str(bad), "--resource", str(pod)]) == code
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
