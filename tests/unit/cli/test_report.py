"""Output formats of ``tollgate test`` (webhook.cli.report), rendered from rows without running anything."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml

from webhook.cli.report import render
from webhook.files.testsuite import Row

ADHOC = [Row("p", "Pod", "default", "a", "pass", ""), Row("p", "Pod", "default", "b", "fail", "no <&> way"),
         Row("p", "Namespace", "", "n", "error", "boom"), Row("p", "Pod", "default", "c", "warn", "careful")]
SUITE = [Row("p", "Pod", "default", "a", "fail", "denied", suite="s.yaml", expected="pass",
             mismatch="expected pass, got fail: denied"),
         Row("p", "Pod", "default", "b", "skip", "no match", suite="s.yaml", operation="UPDATE", expected="skip")]


def test_adhoc_junit_fails_fail_and_error_rows_only() -> None:
    root = ET.fromstring(render(ADHOC, "junit"))
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "tollgate test" and suite.get("tests") == "4" and suite.get("failures") == "2"
    failed = {c.get("name"): c.find("failure") for c in suite if c.find("failure") is not None}
    assert set(failed) == {"Pod default/b CREATE", "Namespace n CREATE"}
    assert failed["Pod default/b CREATE"].get("message") == "fail: no <&> way"  # escaped by the XML writer


def test_suite_rows_carry_expectation_in_json_and_yaml() -> None:
    as_json = json.loads(render(SUITE, "json"))
    assert as_json == yaml.safe_load(render(SUITE, "yaml"))
    assert [(r["expected"], r["ok"], r["operation"], r["mismatch"]) for r in as_json] == [
        ("pass", False, "CREATE", "expected pass, got fail: denied"), ("skip", True, "UPDATE", "")]


def test_adhoc_json_has_the_six_documented_keys() -> None:
    assert all(set(r) == {"policy", "kind", "namespace", "name", "result", "message"}
               for r in json.loads(render(ADHOC, "json")))


def test_table_columns() -> None:
    lines = render(SUITE, "table").splitlines()
    assert lines[0].split() == ["POLICY", "KIND", "NAMESPACE", "NAME", "RESULT", "EXPECTED", "MESSAGE"]
    assert lines[1].endswith("MISMATCH: expected pass, got fail: denied")
    assert render(ADHOC, "table").splitlines()[3].split()[:5] == ["p", "Namespace", "n", "error", "boom"]


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown output format 'xml'"):
        render(ADHOC, "xml")
