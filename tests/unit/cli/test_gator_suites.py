"""``tollgate test`` on gator Suites unchanged (the Gatekeeper library's), ``lint`` on ConstraintTemplates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
LIBRARY = ROOT / "tests" / "fixtures" / "gatekeeper-library"
SUITES = sorted(LIBRARY.rglob("suite.yaml"))
LABELS = LIBRARY / "general" / "requiredlabels"


@pytest.mark.parametrize("suite", SUITES, ids=[str(s.parent.relative_to(LIBRARY)) for s in SUITES])
def test_the_librarys_suites_pass_unchanged_as_under_gator_verify(suite: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(suite)]) == 0, capsys.readouterr()
    assert "expectations met" in capsys.readouterr().err


def test_json_rows_carry_expected_and_ok_as_testsuite_rows_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", "-o", "json", str(LABELS / "suite.yaml")]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 5 and all(r["ok"] is True and r["mismatch"] == "" for r in rows)
    disallowed = rows[1]
    assert disallowed["policy"] == "K8sRequiredLabels/all-must-have-owner" and disallowed["kind"] == "Namespace"
    assert disallowed["expected"] == "must-have-owner/example-disallowed: violations: yes"
    assert disallowed["result"] == "fail" and disallowed["suite"] == str(LABELS / "suite.yaml")


def copy_suite(tmp_path: Path, edit: dict[str, object]) -> Path:
    """The requiredlabels suite with the first case's first assertion replaced by ``edit``."""
    target = tmp_path / "requiredlabels"
    shutil.copytree(LABELS, target)
    suite = yaml.safe_load((target / "suite.yaml").read_text())
    suite["tests"][0]["cases"][1]["assertions"] = [edit]
    (target / "suite.yaml").write_text(yaml.safe_dump(suite))
    return target / "suite.yaml"


@pytest.mark.parametrize(("assertion", "status"), [
    ({"violations": 2}, 0),  # both validations fail: one violation each, as the CEL driver reports
    ({"violations": 1}, 1),
    ({"violations": "no"}, 1),
    ({"violations": 1, "message": "^missing required label"}, 0),
    ({"violations": "yes", "message": "no such message"}, 1),
    ({"message": "regex"}, 0),  # violations defaults to yes
    ({"violations": 1, "message": "requires all of"}, 0),  # found anywhere in the message, as Go's MatchString
])
def test_assertions_count_violations_per_validation_and_match_messages_as_regexes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], assertion: dict[str, object], status: int) -> None:
    assert main(["test", str(copy_suite(tmp_path, assertion))]) == status, capsys.readouterr()


def test_a_mismatch_says_what_gator_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(copy_suite(tmp_path, {"violations": "no"}))]) == 1
    err = capsys.readouterr().err
    assert "MISMATCH" in err and "must-have-owner/example-disallowed: got 2 violations but want none" in err


def test_a_rego_only_template_makes_the_suite_unusable_with_a_line_that_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = copy_suite(tmp_path, {"violations": "yes"})
    template = yaml.safe_load((suite.parent / "template.yaml").read_text())
    code = template["spec"]["targets"][0]["code"]
    template["spec"]["targets"][0]["code"] = [c for c in code if c["engine"] == "Rego"]
    (suite.parent / "template.yaml").write_text(yaml.safe_dump(template))
    assert main(["test", str(suite)]) == 2
    err = capsys.readouterr().err
    assert "a Rego-only template: Tollgate runs only K8sNativeValidation (CEL) code" in err
    assert "Traceback" not in err
    assert main(["lint", str(suite.parent / "template.yaml")]) == 1
    assert "a Rego-only template" in capsys.readouterr().out


def test_lint_reads_templates_and_constraints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(LABELS / "template.yaml"),
                 str(LABELS / "samples" / "all-must-have-owner" / "constraint.yaml")]) == 0, capsys.readouterr()


def test_an_unsupported_gator_field_is_refused_not_passed(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    suite = copy_suite(tmp_path, {"violations": "yes"})
    doc = yaml.safe_load(suite.read_text())
    doc["tests"][0]["expansion"] = "expansion.yaml"
    suite.write_text(yaml.safe_dump(doc))
    assert main(["test", str(suite)]) == 2
    assert "tests[0].expansion: not supported by tollgate test" in capsys.readouterr().err


def test_audit_reads_templates_and_constraints(capsys: pytest.CaptureFixture[str]) -> None:
    sample = LABELS / "samples" / "all-must-have-owner"
    assert main(["audit", "-p", str(LABELS / "template.yaml"), "-p", str(sample / "constraint.yaml"),
                 "-r", str(sample / "example_disallowed.yaml")]) == 1  # findings
    assert "audited 1 policy on 1 object: pass 0, fail 2" in capsys.readouterr().err


def test_lint_names_the_templates_line_of_a_cel_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (LABELS / "template.yaml").read_text().replace('message: "regex mismatch"',
                                                          'messageExpression: "objekt.name"')
    (tmp_path / "template.yaml").write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "objekt.name" in t)
    assert main(["lint", str(tmp_path / "template.yaml"),
                 str(LABELS / "samples" / "all-must-have-owner" / "constraint.yaml")]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'template.yaml'}:{line}: " in out and "undeclared reference to 'objekt.name'" in out, out


def test_export_renders_a_constraint_as_a_policy_and_binding_that_decide_the_same(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sample = LABELS / "samples" / "all-must-have-owner"
    assert main(["export", str(LABELS / "template.yaml"), str(sample / "constraint.yaml")]) == 0
    exported = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(d["kind"], d["metadata"]["name"]) for d in exported] == [
        ("ValidatingAdmissionPolicy", "k8srequiredlabels-all-must-have-owner"),
        ("ValidatingAdmissionPolicyBinding", "k8srequiredlabels-all-must-have-owner-binding")]
    (tmp_path / "exported.yaml").write_text(yaml.safe_dump_all(exported))
    for name, result in (("example_disallowed.yaml", "fail"), ("example_allowed.yaml", "pass")):
        assert main(["test", "-o", "json", "-p", str(tmp_path / "exported.yaml"), "-r", str(sample / name)]) in (0, 1)
        (row,) = json.loads(capsys.readouterr().out)
        assert row["result"] == result, row
