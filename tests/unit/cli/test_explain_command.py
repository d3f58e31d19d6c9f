"""``tollgate test --explain``: a tree per row after the table, the trace in JSON/YAML/JUnit, suites and ad hoc."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.cli.test_test_command import write_suite
from webhook.cli.main import main


def _rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    code = main(["test", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out) if "json" in args else yaml.safe_load(out)
    return rows


def _row(rows: list[dict[str, Any]], policy: str, name: str, **match: str) -> dict[str, Any]:
    return next(r for r in rows if r["policy"] == policy and r["name"] == name
                and all(r.get(k) == v for k, v in match.items()))


def test_json_rows_carry_the_trace_of_the_policy_on_the_resource_it_saw(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, "--explain", "-o", "json", str(write_suite(tmp_path)))
    # require-team validates the object label-team mutated: its operand shows the label the mutation added.
    (web,) = _row(rows, "require-team", "web")["explanation"]
    (validation,) = web["validations"]
    assert validation["result"] == "pass" and validation["value"] is True
    stray = _row(rows, "require-team", "stray", result="fail")["explanation"][0]
    assert stray["matchConditions"][0]["value"] is True
    (failed,) = stray["validations"]
    assert failed["message"] == "namespace has no team"
    assert failed["operands"] == [{"expression": "object.metadata.labels.team", "role": "operand", "value": "none",
                                   "type": "string", "size": 4}]
    admin = _row(rows, "require-team", "stray", result="skip")["explanation"][0]
    assert admin["matchConditions"][0]["value"] is False and admin["message"] == "matchCondition not-admin is false"
    assert "validations" not in admin
    (mutation,) = _row(rows, "label-team", "web")["explanation"]
    assert mutation["endpoint"] == "mutate"
    assert mutation["patch"]["value"] == [{"op": "add", "path": "/metadata/labels/team", "value": "payments"}]
    not_selected = _row(rows, "owner-is-immutable", "web", operation="CREATE")["explanation"][0]
    assert not_selected["match"]["selected"] is False
    assert not_selected["match"]["rules"][0]["mismatch"] == "operation CREATE is not in UPDATE"


def test_without_explain_rows_have_no_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, "-o", "json", str(write_suite(tmp_path)))
    assert all("explanation" not in r for r in rows)


def test_yaml_carries_the_same_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = str(write_suite(tmp_path))
    as_yaml = _rows(capsys, "--explain", "-o", "yaml", suite)
    as_json = _rows(capsys, "--explain", "-o", "json", suite)
    assert [r["explanation"] for r in as_yaml] == [r["explanation"] for r in as_json]


def test_the_table_is_followed_by_a_tree_per_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", "--explain", str(write_suite(tmp_path))]) == 0
    out = capsys.readouterr().out
    table, _, trees = out.partition("\n\n")
    assert table.startswith("POLICY") and "===" not in table
    assert trees.count("=== ") == 6
    stray = trees[trees.index("=== require-team on Pod nowhere/stray (CREATE): fail, expected fail"):]
    stray = stray[:stray.index("\n\n")]
    assert "      [0] fail: object.metadata.labels.team != 'none'\n" in stray
    assert '          object.metadata.labels.team = "none"\n' in stray
    assert "        message: namespace has no team" in stray


def test_fail_only_explains_only_the_rows_it_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path)
    suite.write_text(suite.read_text().replace(
        "result: fail,\n   messageContains", "result: pass,\n   messageContains"))
    assert main(["test", "--explain", "--fail-only", str(suite)]) == 1
    out = capsys.readouterr().out
    assert out.count("=== ") == 1 and "=== require-team on Pod nowhere/stray (CREATE): fail, expected pass" in out


def test_ad_hoc_explains_every_policy_on_every_resource(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_suite(tmp_path)
    code = main(["test", "--explain", "-p", str(tmp_path / "policies.yaml"), "-r", str(tmp_path / "resources.yaml"),
                 "--namespace-file", str(tmp_path / "namespaces.yaml")])
    out = capsys.readouterr().out
    assert code == 1  # stray fails require-team
    headings = [line for line in out.splitlines() if line.startswith("=== ")]
    assert len(headings) == 6  # three policies, two resources
    assert "=== owner-is-immutable on Pod shop/web (CREATE): skip" in headings


def test_junit_test_cases_print_the_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", "--explain", "-o", "junit", str(write_suite(tmp_path))]) == 0
    root = ET.fromstring(capsys.readouterr().out)
    outs = [case.findtext("system-out") or "" for case in root.iter("testcase")]
    assert len(outs) == 6 and all(o.startswith("=== ") for o in outs)
    assert any("matchCondition not-admin is false" in o for o in outs)
