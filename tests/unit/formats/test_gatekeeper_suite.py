"""gator Suite files: parsing (skips, refusals, YAML 1.1 booleans) and assertions as gator's Assertion.Run."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.formats.gatekeeper.suite import Assertion, SuiteError, check_assertion, is_gator_suite, parse_suite


def suite(*tests: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "test.gatekeeper.sh/v1alpha1", "kind": "Suite", "metadata": {"name": "s"},
            "tests": list(tests), **fields}


def case(name: str = "c", **fields: Any) -> dict[str, Any]:
    return {"name": name, "object": "o.yaml", "assertions": [{"violations": "yes"}], **fields}


def test_tests_and_cases_are_read_with_their_paths_and_skips_left_out() -> None:
    (test,) = parse_suite(suite({"name": "t", "template": "t.yaml", "constraint": "c.yaml",
                                 "cases": [case("a"), case("b", skip=True), case("d", inventory=["i.yaml"])]},
                                {"name": "skipped", "skip": True}))
    assert (test.name, test.template, test.constraint) == ("t", "t.yaml", "c.yaml")
    assert [(c.name, c.inventory, c.path) for c in test.cases] == [("a", (), ("tests", 0, "cases", 0)),
                                                                   ("d", ("i.yaml",), ("tests", 0, "cases", 2))]
    assert parse_suite(suite({"template": "t", "constraint": "c", "cases": [case()]}, skip=True)) == []


@pytest.mark.parametrize(("raw", "expected"), [({"violations": True}, "yes"), ({"violations": False}, "no"),
                                               ({}, "yes"), ({"violations": 3}, 3)])
def test_violations_are_yes_no_or_a_count(raw: dict[str, Any], expected: str | int) -> None:
    (test,) = parse_suite(suite({"template": "t", "constraint": "c", "cases": [case(assertions=[raw])]}))
    assert test.cases[0].assertions[0].violations == expected


@pytest.mark.parametrize(("test", "path", "message"), [
    ({"constraint": "c", "cases": [case()]}, ("tests", 0, "template"), "required"),
    ({"template": "t", "constraint": "c", "cases": [case(assertions=[])]}, ("tests", 0, "cases", 0, "assertions"),
     "must be non-empty"),
    ({"template": "t", "constraint": "c", "cases": [case(assertions=[{"violations": -1}])]},
     ("tests", 0, "cases", 0, "assertions", 0, "violations"), 'must be a nonnegative integer, "yes", or "no"'),
    ({"template": "t", "constraint": "c", "cases": [case(assertions=[{"message": "("}])]},
     ("tests", 0, "cases", 0, "assertions", 0, "message"), "not a regular expression"),
    ({"template": "t", "constraint": "c", "invalid": True}, ("tests", 0, "invalid"), "not supported"),
])
def test_malformed_or_unsupported_fields_are_refused_with_their_path(test: dict[str, Any],
                                                                     path: tuple[Any, ...], message: str) -> None:
    with pytest.raises(SuiteError) as e:
        parse_suite(suite(test))
    assert e.value.path == path and message in e.value.message


@pytest.mark.parametrize(("assertion", "messages", "mismatch"), [
    (Assertion("yes"), ["m"], ""),
    (Assertion("yes"), [], "got 0 violations but want at least 1: got messages []"),
    (Assertion("no"), [], ""),
    (Assertion("no"), ["a", "b"], "got 2 violations but want none: got messages ['a', 'b']"),
    (Assertion(2), ["a", "b"], ""),
    (Assertion(1, "b$"), ["a", "ab"], ""),
    (Assertion(1, "x"), ["a"], "got 0 violations containing 'x' but want exactly 1: got messages ['a']"),
])
def test_assertions_count_the_messages_their_regex_finds(assertion: Assertion, messages: list[str],
                                                         mismatch: str) -> None:
    assert check_assertion(assertion, messages) == mismatch


def test_only_gatekeepers_suite_kind_is_a_gator_suite() -> None:
    assert is_gator_suite(suite())
    assert not is_gator_suite({"apiVersion": "tollgate.dev/v1alpha1", "kind": "Suite"})
