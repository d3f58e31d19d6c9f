"""PolicyExceptions in ``tollgate test``, ``lint`` and ``audit``: read where policies are, applied as served."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main

POLICY = {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy", "metadata": {"name": "no-priv"},
          "spec": {"background": True,
                   "match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                                "operations": ["CREATE"]}]},
                   "validations": [{"expression": "object.spec.containers.all(c, "
                                                  "!c.?securityContext.?privileged.orValue(false))",
                                    "message": "privileged"}]}}


def exception(name: str = "debug", namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"policies": [{"name": "no-priv"}], "reason": "OPS-1"}
    body.update(spec)
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}


def pod(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]}}


def write(tmp_path: Path, name: str, *docs: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return path


def rows(tmp_path: Path, capsys: pytest.CaptureFixture[str], *exceptions: dict[str, Any]) -> list[dict[str, Any]]:
    (tmp_path / "policies").mkdir(exist_ok=True)
    write(tmp_path / "policies", "policy.yaml", POLICY)
    write(tmp_path / "policies", "exceptions.yaml", *exceptions)
    resources = write(tmp_path, "pods.yaml", pod("team-a"), pod("team-b"))
    main(["test", "-p", str(tmp_path / "policies"), "-r", str(resources), "-o", "json"])
    out: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return out


def test_test_rows_are_skip_naming_the_exception_in_its_namespace_only(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    found = {r["namespace"]: (r["result"], r["message"]) for r in rows(tmp_path, capsys, exception())}
    assert found == {"team-a": ("skip", "exempted by PolicyException team-a/debug: OPS-1"),
                     "team-b": ("fail", "privileged")}


def test_an_expired_exception_exempts_nothing_in_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found = {r["namespace"]: r["result"] for r in rows(tmp_path, capsys, exception(expiresAt="2020-01-01T00:00:00Z"))}
    assert found == {"team-a": "fail", "team-b": "fail"}


def test_a_testsuite_reads_exceptions_from_its_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "policy.yaml", POLICY, exception())
    write(tmp_path, "pods.yaml", pod("team-a"))
    suite = write(tmp_path, "suite.yaml", {
        "apiVersion": "tollgate.dev/v1alpha1", "kind": "TestSuite", "metadata": {"name": "s"},
        "policies": ["policy.yaml"], "resources": ["pods.yaml"],
        "results": [{"policy": "no-priv", "resource": {"kind": "Pod", "namespace": "team-a", "name": "debug"},
                     "result": "skip", "messageContains": "PolicyException team-a/debug"}]})
    assert main(["test", str(suite)]) == 0, capsys.readouterr()


@pytest.mark.parametrize(("spec", "expected"), [
    ({"reason": ""}, "spec.reason: "),
    ({"matchConditions": [{"name": "c", "expression": "objekt.x"}]},
     "spec.matchConditions[0].expression: ERROR: <input>:1:7: undeclared reference"),
    ({"policies": [{"name": "nope"}]}, "spec.policies[0].name: no policy named nope among the files linted"),
])
def test_lint_refuses_a_broken_exception(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: dict[str, Any],
                                         expected: str) -> None:
    path = write(tmp_path, "all.yaml", POLICY, exception(**spec))
    assert main(["lint", str(path)]) == 1
    assert expected in capsys.readouterr().out


def test_lint_accepts_a_sound_exception(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(write(tmp_path, "all.yaml", POLICY, exception()))]) == 0, capsys.readouterr()


def test_audit_rows_are_skip_with_the_exception_in_properties(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    policies = write(tmp_path, "policy.yaml", POLICY, exception())
    resources = write(tmp_path, "pods.yaml", pod("team-a"), pod("team-b"))
    main(["audit", "-p", str(policies), "-r", str(resources), "-o", "json"])
    reports = json.loads(capsys.readouterr().out)
    results = [r for report in (reports if isinstance(reports, list) else reports.get("items", []))
               for r in report.get("results", [])]
    by_ns = {r["resources"][0]["namespace"]: r for r in results}
    assert by_ns["team-a"]["result"] == "skip"
    assert by_ns["team-a"]["properties"] == {"exception": "PolicyException team-a/debug"}
    assert by_ns["team-b"]["result"] == "fail"
