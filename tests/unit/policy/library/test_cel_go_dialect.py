"""cel-go behaviours the public policies rely on that cel-cpp does not share: ``orValue`` on a value that is not
optional returns the value (cel-go ``cel/library.go`` ``evalOptionalOrValue``, v0.12 to v0.27)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy, request
from tests.unit.policy.library._cel import ENV, check
from webhook.policy import InMemoryLookups, compile_policy, evaluate_validating
from webhook.policy.cel.rewrites import rewrite_or_value

CASES = [
    # Not an optional: the receiver itself (cel-go); an optional: its value or the alternative.
    ("dyn({'m': {'a': 1}}).m.orValue({})", "value", {"a": 1}),
    ("dyn('s').orValue('t')", "value", "s"),
    ("{'m': {'a': 1}}.?m.orValue({})", "value", {"a": 1}),
    ("{'m': {'a': 1}}.?n.orValue({})", "value", {}),
    ("dyn({'m': {'a': 1}}).m.orValue({}).a + 1", "value", 2),
    ("optional.of(1).orValue(2) + 1", "value", 2),
    ("dyn(optional.none()).orValue(3)", "value", 3),
    ("dyn({'m': {'a': 1}}).m.orValue({'a': 2}.?b.orValue(3))", "value", {"a": 1}),
    ("dyn({'m': 'a'}).m.orValue('.orValue(')", "value", "a"),
    # A missing key stays an error, as in cel-go; a receiver the checker types as a map stays refused.
    ("dyn({'m': 1}).n.orValue(2)", "error", "Key not found"),
    ("{'a': 1}.orValue(2)", "compile", "found no matching overload for 'orValue'"),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_or_value(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


def test_require_qos_guaranteed_reads_non_optional_fields_with_or_value() -> None:
    # kyverno/policies other-vpol/require-qos-guaranteed.
    expression = """object.spec.containers.all(container,
        has(container.resources) &&
        container.resources.?requests.orValue({}).?cpu.hasValue() &&
        container.resources.?limits.orValue({}).?cpu.hasValue() &&
        container.resources.requests.orValue({}).cpu == container.resources.limits.orValue({}).cpu)"""
    program = ENV.compile(expression)

    def verdict(requests: dict[str, Any], limits: dict[str, Any]) -> Any:
        obj = {"spec": {"containers": [{"resources": {"requests": requests, "limits": limits}}]}}
        return program.eval(ENV.Activation({"object": obj})).plain_value()

    assert verdict({"cpu": "1"}, {"cpu": "1"}) is True
    assert verdict({"cpu": "1"}, {"cpu": "2"}) is False


def test_a_variable_holding_an_optional_or_a_value_answers_or_value_either_way() -> None:
    # Variables are dyn to the checker and inlined unchecked at run time: both dispatch on the value.
    compiled = compile_policy(policy(
        variables=[{"name": "labels", "expression": "object.metadata.?labels"},
                   {"name": "name", "expression": "object.metadata.name"}],
        validations=[{"expression": "variables.labels.orValue({}).size() == 0 && "
                                    "variables.name.orValue('none') == 'web'"}])).policy
    assert compiled is not None
    outcome = evaluate_validating(request(pod()), [compiled], InMemoryLookups())
    assert outcome.allowed, outcome.message


def test_the_rewrite_delimits_receivers_as_cels_member_chains() -> None:
    assert rewrite_or_value("!a.?b[0].f(x).orValue(1)") == (
        "!cel.bind(__tg_ov, a.?b[0].f(x), type(__tg_ov) == optional_type ? __tg_ov.orValue(1) : __tg_ov)")
    assert rewrite_or_value("x + (a || b).orValue(c)", frozenset()) == "x + (a || b).orValue(c)"


@pytest.mark.parametrize("text", ["c.?a.?b.orValue(1)", "m[?'k'].orValue(1)", "optional.of(x).orValue(1)"])
def test_receivers_optional_by_their_syntax_are_left_to_cel_cpp(text: str) -> None:
    # Unchecked programs (inlined variables) rewrite every other orValue: the run-time dispatch costs about a
    # third of an orValue-heavy Pod Security program's evaluation (bench figure in the commit message).
    assert rewrite_or_value(text) == text
