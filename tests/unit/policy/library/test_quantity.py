"""Quantity library: transcribed from kubernetes staging/src/k8s.io/apiserver/pkg/cel/library/quantity_test.go."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check, run
from webhook.policy.cel.library import quantity

# TestQuantity
CASES = [
    ('quantity("12Mi")', "value", {"@quantity": "12582912"}),
    ('quantity("10Mo")', "error", "quantities must match the regular expression"),
    ('quantity("10Mm")', "error", "unable to parse quantity's suffix"),
    ('isQuantity("20")', "value", True),
    ('isQuantity("20M")', "value", True),
    ('isQuantity("20Mi")', "value", True),
    ('isQuantity("20Mo")', "value", False),
    ('isQuantity("10Mm")', "value", False),
    ("isQuantity([1, 2, 3])", "compile", "found no matching overload for 'isQuantity'"),
    ('quantity("200M") == quantity("200M")', "value", True),
    ('quantity("200M") == quantity("0.2G") && quantity("0.2G") == quantity("200M")', "value", True),
    (('quantity("2M") == quantity("0.002G") && quantity("2000k") == quantity("2M") && '
      'quantity("0.002G") == quantity("2000k")'), "value", True),
    ('quantity("200M") == quantity("0.3G")', "value", False),
    ('quantity("50M").isLessThan(quantity("50Mi"))', "value", True),
    ('quantity("50M").isLessThan(quantity("100M"))', "value", True),
    ('quantity("100M").isLessThan(quantity("50M"))', "value", False),
    ('quantity("50Mi").isGreaterThan(quantity("50M"))', "value", True),
    ('quantity("150Mi").isGreaterThan(quantity("100Mi"))', "value", True),
    ('quantity("50M").isGreaterThan(quantity("100M"))', "value", False),
    ('quantity("200M").compareTo(quantity("0.2G"))', "value", 0),
    ('quantity("50M").compareTo(quantity("50Mi"))', "value", -1),
    ('quantity("50Mi").compareTo(quantity("50M"))', "value", 1),
    ('quantity("50k").add(quantity("20")) == quantity("50.02k")', "value", True),
    ('quantity("50k").add(20).isLessThan(quantity("50020"))', "value", False),
    ('quantity("50k").sub(quantity("20")) == quantity("49.98k")', "value", True),
    ('quantity("50k").sub(20) == quantity("49980")', "value", True),
    ('quantity("50k").mul(2) == quantity("100000")', "value", True),
    ('quantity("10000").div(3).asApproximateFloat()', "value", 3333.3333),
    ('quantity("10k").div(2) == quantity("5000")', "value", True),
    ('quantity("10000").divInt(3) == quantity("3333")', "value", True),
    ('quantity("50k").add(20).sub(quantity("100k")).asInteger()', "value", -49980),
    ('quantity("50k").add(20).sub(quantity("100k")).sub(-50000).asInteger()', "value", 20),
    ('quantity("50k").asInteger()', "value", 50000),
    ('quantity("9999999999999999999999999999999999999G").asInteger()', "error", "cannot convert value to integer"),
    ('quantity("9999999999999999999999999999999999999G").isInteger()', "value", False),
    ('quantity("50").isInteger()', "value", True),
    ('quantity("50.703k").asApproximateFloat()', "value", 50703.0),
    # quantity.go: sign().
    ('quantity("-5m").sign()', "value", -1),
    ('quantity("0").sign()', "value", 0),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_quantity(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


def test_huge_exponent_is_stored_not_expanded() -> None:
    # Issue #13: quantity('1e9999999') took 10 s (an exact rational with ten million digits).
    assert quantity.parse_quantity("1e9999999").adjusted() == 9999999
    assert run("quantity('1e9999999').isGreaterThan(quantity('1Ei'))") == ("value", True)
    assert run("quantity('1e9999999').asApproximateFloat()") == ("value", float("inf"))
    kind, message = run("quantity('1e9999999').add(1)")
    assert kind == "error" and "significant digits" in message


def test_exponent_beyond_int32_is_not_a_quantity() -> None:
    assert run("isQuantity('1e99999999999')") == ("value", False)
