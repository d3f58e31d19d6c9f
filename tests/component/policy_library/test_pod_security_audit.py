"""The Pod Security library ships audited: ``spec.background: true`` and every policy auditable.

Kyverno's Pod Security policies default to ``background: true``; so do these, so that
``serve --background-audit`` and ``tollgate audit -p policies -r ...`` report existing Pods and
controllers. A policy whose CEL reads what a stored object cannot supply (``request.userInfo``,
``oldObject``) would only be reported as not auditable.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from webhook.audit.auditable import not_auditable
from webhook.cli.main import main
from webhook.policy import compile_policy

ROOT = Path(__file__).resolve().parents[3]
POD_SECURITY = ROOT / "policies" / "pod-security"
FILES = sorted(p for p in POD_SECURITY.glob("*/*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_policy_is_background_and_auditable(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    policy = compile_policy(doc).policy
    assert policy is not None and policy.spec.background is True
    assert not_auditable(policy) is None
    category = doc["metadata"]["annotations"]["policies.tollgate.dev/category"]
    assert category == f"Pod Security Standards ({path.parent.name.title()})"


def test_audit_of_the_shipped_policies_reports_the_violations(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "-p", str(ROOT / "policies"), "-r", str(POD_SECURITY / "resources.yaml"),
                 "-o", "json"]) == 1  # fail results: exit status 1
    [report] = json.loads(capsys.readouterr().out)["items"]
    assert report["kind"] == "PolicyReport" and report["metadata"]["namespace"] == "default"
    failed = {(r["policy"], r["resources"][0]["name"]) for r in report["results"] if r["result"] == "fail"}
    assert ("disallow-privileged-containers", "debugged-privileged") in failed
    assert not {name for _, name in failed} - {"debugged-privileged"}, "the compliant Pod passes"
    assert report["summary"]["fail"] == len([r for r in report["results"] if r["result"] == "fail"]) > 0
    assert {r.get("category") for r in report["results"] if r["policy"] == "disallow-privileged-containers"} == {
        "Pod Security Standards (Baseline)"}
