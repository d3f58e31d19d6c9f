"""A mutation's CEL result as JSON data (webhook.policy.engine.values.json_value)."""

from __future__ import annotations

import pytest

from webhook.policy.engine.outcome import EvaluationError
from webhook.policy.engine.values import json_value


class _Text(str):
    pass


def test_a_mutation_result_becomes_json_data() -> None:
    result = {"a": [1, True, None, "s", 1.5, b"hi", {2: "x", "k": [{}]}], _Text("t"): _Text("u")}
    assert json_value(result, "spec.mutations[0]") == {
        "a": [1, True, None, "s", 1.5, "aGk=", {"2": "x", "k": [{}]}], "t": "u"}
    out = json_value(result, "p")
    assert list(out) == ["a", "t"] and all(type(k) is str for k in out)
    assert type(out["a"][6]) is dict and list(out["a"][6]) == ["2", "k"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"a": [float("-inf")]}])
def test_a_number_json_cannot_hold_is_an_error_naming_the_path(bad: object) -> None:
    with pytest.raises(EvaluationError, match=r"^spec\.mutations\[1\]: .* is not a JSON number"):
        json_value(bad, "spec.mutations[1]")


def test_a_value_json_cannot_hold_is_an_error() -> None:
    with pytest.raises(EvaluationError, match="cannot be written into an object"):
        json_value({"a": object()}, "p")
