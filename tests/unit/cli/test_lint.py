"""``tollgate lint``: schema + CEL compilation only; exit 0 clean, 1 problems, 2 usage."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli.main import main

POLICY = """\
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata:
  name: x
spec:
  match: {resourceRules: [{resources: [pods]}]}
  validationAction: [Deny]
  validations:
  - expression: "true"
---
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {name: y}
spec:
  match: {resourceRules: [{resources: [pods]}]}
  validations:
  - expression: "true"
  - expression: objekt.spec
---
apiVersion: v1
kind: Pod
metadata: {name: not-checked, extra: field}
"""


def test_problems_are_one_line_each_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cm.yml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {n: 1}\n")
    (tmp_path / "broken.yaml").write_text("a: [")
    assert main(["lint", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 4
    assert all(line.startswith(want) for line, want in zip(lines, [
        f"{tmp_path}/broken.yaml:2:1: invalid YAML: did not find expected node content",
        f"{tmp_path}/policy.yaml:7: document 1: spec.validationAction: unknown field (did you mean validationActions?)",
        (f"{tmp_path}/policy.yaml:18: document 2: ClusterAdmissionPolicy y: spec.validations[1].expression: ERROR: "
         "<input>:1:7: undeclared reference to 'objekt.spec'"),  # the CEL error text follows
        f"{tmp_path}/sub/cm.yml:4: document 1: data.n: must be a string, got an integer",
    ], strict=True)), lines
    assert err == "4 problem(s)\n"


def test_clean_files_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[3] / "policies" / "examples" / "allowed-registries"
    assert main(["lint", str(example / "policy.yaml"), str(example)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == "4 document(s) checked, no problems\n"


@pytest.mark.parametrize("argv", [["lint"], ["lint", "/does-not-exist"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 1


THREE_ERRORS = """\
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {name: three}
spec:
  match: {resourceRules: [{resources: [pods]}]}
  validationAction: [Deny]
  variables:
  - name: c
    expression: "objekt.spec.?containers.orValue([])"
  validations:
  - expression: "size(variables.c) > 0 && foo.bar"
    messageExpression: "'x' + 1"
  - expression: "object.metadata.name.size()"
"""


def test_every_error_of_every_expression_in_one_run_with_the_schema_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(THREE_ERRORS)
    assert main(["lint", str(tmp_path / "p.yaml")]) == 1
    where = f"{tmp_path}/p.yaml"
    assert capsys.readouterr().out.splitlines() == [
        f"{where}:6: document 1: spec.validationAction: unknown field (did you mean validationActions?)",
        f"{where}:9: document 1: ClusterAdmissionPolicy three: spec.variables[0].expression: ERROR: <input>:1:7: "
        "undeclared reference to 'objekt.spec'",  # not the follow-on errors of the selects on it
        f"{where}:11: document 1: ClusterAdmissionPolicy three: spec.validations[0].expression: ERROR: <input>:1:29: "
        "undeclared reference to 'foo.bar'",
        f"{where}:12: document 1: ClusterAdmissionPolicy three: spec.validations[0].messageExpression: ERROR: "
        "<input>:1:5: found no matching overload for '_+_' applied to '(string, int)'",
        f"{where}:13: document 1: ClusterAdmissionPolicy three: spec.validations[1].expression: must evaluate to "
        "bool, but evaluates to int",
    ]


def test_a_key_given_twice_is_a_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(POLICY.replace("  validationAction: [Deny]\n",
                                                    "  validationActions: [Deny]\n  validationActions: [Warn]\n"))
    assert main(["lint", str(tmp_path / "p.yaml")]) == 1
    assert capsys.readouterr().out.splitlines()[0] == (
        f"{tmp_path}/p.yaml:8:3: invalid YAML: duplicate key 'validationActions' (first on line 7)")


ENUM_AND_CEL = """\
apiVersion: tollgate.dev/v1alpha1
kind: ClusterAdmissionPolicy
metadata: {name: enum-and-cel}
spec:
  failurePolicy: Deny
  match: {resourceRules: [{resources: [pods]}]}
  validations:
  - expression: "object.spec.containers.all(c, c.image.startsWith(1))"
    reason: Nope
"""


def test_a_value_the_schema_refuses_does_not_hide_the_cel_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(ENUM_AND_CEL)
    assert main(["lint", str(tmp_path / "p.yaml")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 2)[2].split(":")[0] for line in lines] == [
        "spec.failurePolicy", "spec.validations[0].reason", "ClusterAdmissionPolicy enum-and-cel"]
    assert ("spec.validations[0].expression: ERROR: <input>:1:49: found no matching overload for 'startsWith'"
            in lines[2])


def test_a_named_file_holding_nothing_lint_reads_is_a_problem(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "widget.yaml").write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    assert main(["lint", str(tmp_path / "widget.yaml")]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{tmp_path}/widget.yaml: nothing to lint: no document of a kind tollgate lint reads (")
    assert err == "1 problem(s)\n"


def test_a_directory_with_nothing_lint_reads_is_a_usage_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    assert main(["lint", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"tollgate lint: nothing to lint under {tmp_path}: no document of a kind it reads\n"
