"""Regex library: transcribed from the examples of kubernetes staging/src/k8s.io/apiserver/pkg/cel/library/regex.go,
with RE2 semantics (linear time; patterns RE2 rejects are compile errors when literal)."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check, run

# regex.go: find, findAll
CASES = [
    ("'abc 123'.find('[0-9]+')", "value", "123"),
    ("'abc 123'.find('xyz')", "value", ""),
    ("'123 abc 456'.findAll('[0-9]+')", "value", ["123", "456"]),
    ("'123 abc 456'.findAll('[0-9]+', 1)", "value", ["123"]),
    ("'123 abc 456'.findAll('xyz')", "value", []),
    ("'123 abc 456'.findAll('[0-9]+', 0)", "value", []),
    # Go's FindAllString skips an empty match adjacent to the previous match.
    ("'abc'.findAll('b*')", "value", ["", "b", ""]),
    # ValidateRegexLiterals (Kubernetes 1.29+) and the library's regex optimisation: literal patterns are checked
    # when the policy is compiled; RE2 has no lookaround or backreferences.
    ("'abc'.matches('(?=a)')", "compile", "invalid regex"),
    ("'abc'.find('[')", "compile", "invalid regex"),
    ("'abc'.findAll('(a)\\\\1')", "compile", "invalid regex"),
    ("matches('abc', 'b(')", "compile", "invalid regex"),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_regex(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


def test_dynamic_invalid_pattern_is_a_runtime_error() -> None:
    kind, message = run("'abc'.find(object.p)", object={"p": "(?<=a)b"})
    assert kind == "error" and "invalid regular expression" in message


def test_catastrophic_backtracking_pattern_is_linear() -> None:
    # Issue #13: with Python's re this took 7 s; RE2 answers in linear time (no timing asserted here;
    # bench numbers are in the report). The input is large enough that backtracking would never finish.
    text = "a1" * 5000 + "_"
    assert run("object.s.find('^([a-z0-9]+-?)+$')", object={"s": text}) == ("value", "")
    assert run("object.s.matches('^([a-z0-9]+-?)+$')", object={"s": text}) == ("value", False)
