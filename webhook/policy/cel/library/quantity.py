"""Kubernetes quantity library: ``quantity(s)``, ``isQuantity(s)`` and quantity arithmetic (pure).

Follows ``k8s.io/apiserver/pkg/cel/library/quantity.go`` (Kubernetes 1.28+; ``mul``/``div``/``divInt``
as in 1.36) and ``resource.ParseQuantity`` for the syntax: ``<sign><digits>[.<digits>]<suffix>``
with binary (``Ki`` … ``Ei``), decimal (``n`` … ``E``) or exponent (``e3``) suffixes.

Values are exact decimals (:class:`decimal.Decimal`) kept as ``{"@quantity": "<normalized>"}``, so
``quantity('1Gi') == quantity('1024Mi')`` holds under CEL ``==``. Parsing is O(length): an exponent
such as ``1e9999999`` is stored, not expanded. Arithmetic is exact up to :data:`PRECISION`
significant digits and an error beyond (Kubernetes' arbitrary precision would compute such results
at unbounded cost).
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal
from typing import Any

from webhook.policy.cel.cost import PYTHON_PART, PYTHON_SCALAR
from webhook.policy.cel.library import semver
from webhook.policy.cel.library._decl import VALUE, LibraryError, T, function, member

KEY = "@quantity"

#: Significant digits arithmetic keeps exactly; larger results are an error.
PRECISION = 200

_CTX = decimal.Context(prec=PRECISION, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN,
                       traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow])
_SYNTAX = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_SYNTAX_RE = re.compile(_SYNTAX)
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)$")
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: Largest decimal exponent accepted (Go parses the exponent as an int32).
MAX_EXPONENT = 2**31 - 1


def parse_quantity(text: str) -> Decimal:
    """The exact value of a quantity string.

    Raises:
        LibraryError: "quantities must match the regular expression ..." or "unable to parse
            quantity's suffix", as Kubernetes words them.
    """
    m = _SYNTAX_RE.match(text)
    if not m:
        raise LibraryError(f"quantities must match the regular expression '{_SYNTAX}'")
    number, suffix = m.group(1), m.group(2)
    if not _NUMBER.match(number):
        raise LibraryError(f"quantities must match the regular expression '{_SYNTAX}'")
    value = Decimal(number.rstrip(".") or "0") if number not in ("+.", "-.", ".") else None
    if value is None:
        raise LibraryError(f"quantities must match the regular expression '{_SYNTAX}'")
    if suffix in _BINARY:
        return _CTX.multiply(value, Decimal(2 ** _BINARY[suffix]))
    if suffix in _DECIMAL:
        return value.scaleb(_DECIMAL[suffix], _CTX)
    if _EXPONENT.match(suffix):
        exp = int(suffix[1:])
        if abs(exp) > MAX_EXPONENT:
            raise LibraryError("unable to parse quantity's suffix")
        return value.scaleb(exp, _CTX)
    raise LibraryError("unable to parse quantity's suffix")


def is_quantity(text: str) -> bool:
    """``isQuantity(<string>) -> bool``."""
    try:
        parse_quantity(text)
    except LibraryError:
        return False
    return True


def _canonical(v: Decimal) -> dict[str, str]:
    return {KEY: "0" if v.is_zero() else str(v.normalize(_CTX))}


def quantity(text: str) -> dict[str, str]:
    """``quantity(<string>) -> Quantity``."""
    return _canonical(parse_quantity(text))


def value(q: Any) -> Decimal:
    """The decimal value of a quantity (or an int operand).

    Raises:
        LibraryError: neither.
    """
    if isinstance(q, dict) and KEY in q:
        return Decimal(q[KEY])
    if isinstance(q, int) and not isinstance(q, bool):
        return Decimal(q)
    raise LibraryError("no such overload: expected a quantity")


def _exact(op: Any, *args: Decimal) -> Decimal:
    ctx = _CTX.copy()
    ctx.traps[decimal.Inexact] = True
    try:
        result: Decimal = op(ctx, *args)
    except decimal.Inexact:
        raise LibraryError(f"quantity arithmetic needs more than {PRECISION} significant digits") from None
    return result


def is_integer(q: Any) -> bool:
    """``<Quantity>.isInteger() -> bool``: an integer within int64."""
    v = value(q)
    return v == v.to_integral_value() and -(2**63) <= v < 2**63


def as_integer(q: Any) -> int:
    """``<Quantity>.asInteger() -> int``.

    Raises:
        LibraryError: "cannot convert value to integer" (fractional or beyond int64).
    """
    if not is_integer(q):
        raise LibraryError("cannot convert value to integer")
    return int(value(q))


def as_approximate_float(q: Any) -> float:
    """``<Quantity>.asApproximateFloat() -> double`` (±Inf beyond float range)."""
    return float(value(q))


def sign(q: Any) -> int:
    """``<Quantity>.sign() -> int``: -1, 0 or 1."""
    v = value(q)
    return (v > 0) - (v < 0)


def add(q: Any, other: Any) -> dict[str, str]:
    """``<Quantity>.add(<Quantity> | <int>) -> Quantity``."""
    return _canonical(_exact(decimal.Context.add, value(q), value(other)))


def sub(q: Any, other: Any) -> dict[str, str]:
    """``<Quantity>.sub(<Quantity> | <int>) -> Quantity``."""
    return _canonical(_exact(decimal.Context.subtract, value(q), value(other)))


def mul(q: Any, n: int) -> dict[str, str]:
    """``<Quantity>.mul(<int>) -> Quantity``."""
    return _canonical(_exact(decimal.Context.multiply, value(q), Decimal(n)))


def div(q: Any, n: int) -> dict[str, str]:
    """``<Quantity>.div(<int>) -> Quantity`` (rounded to :data:`PRECISION` digits).

    Raises:
        LibraryError: division by zero.
    """
    if n == 0:
        raise LibraryError("division by zero")
    return _canonical(_CTX.divide(value(q), Decimal(n)))


def div_int(q: Any, n: int) -> dict[str, str]:
    """``<Quantity>.divInt(<int>) -> Quantity``: the quotient truncated toward zero."""
    if n == 0:
        raise LibraryError("division by zero")
    return _canonical(_CTX.divide_int(value(q), Decimal(n)))


def compare_to(q: Any, other: Any) -> int:
    """``<Quantity>.compareTo(<Quantity>) -> int`` (also ``<Semver>.compareTo(<Semver>)``): -1, 0 or 1."""
    if semver.is_semver_value(q):
        return semver.compare(q, other)
    a, b = value(q), value(other)
    return (a > b) - (a < b)


def is_less_than(q: Any, other: Any) -> bool:
    """``<Quantity>.isLessThan(<Quantity>) -> bool`` (also for semver values)."""
    return compare_to(q, other) < 0


def is_greater_than(q: Any, other: Any) -> bool:
    """``<Quantity>.isGreaterThan(<Quantity>) -> bool`` (also for semver values)."""
    return compare_to(q, other) > 0


def declarations() -> list[Any]:
    """The quantity library's functions."""
    return [
        function("quantity", "tg_quantity", VALUE, [T.STRING], quantity, rule=PYTHON_PART),
        function("isQuantity", "tg_is_quantity", T.BOOL, [T.STRING], is_quantity, rule=PYTHON_SCALAR),
        member("isInteger", "tg_q_is_integer", T.BOOL, [VALUE], is_integer, rule=PYTHON_SCALAR),
        member("asInteger", "tg_q_as_integer", T.INT, [VALUE], as_integer, rule=PYTHON_SCALAR),
        member("asApproximateFloat", "tg_q_as_float", T.DOUBLE, [VALUE], as_approximate_float, rule=PYTHON_SCALAR),
        member("sign", "tg_q_sign", T.INT, [VALUE], sign, rule=PYTHON_SCALAR),
        member("add", "tg_q_add", VALUE, [VALUE, T.DYN], add, rule=PYTHON_PART),
        member("sub", "tg_q_sub", VALUE, [VALUE, T.DYN], sub, rule=PYTHON_PART),
        member("mul", "tg_q_mul", VALUE, [VALUE, T.INT], mul, rule=PYTHON_PART),
        member("div", "tg_q_div", VALUE, [VALUE, T.INT], div, rule=PYTHON_PART),
        member("divInt", "tg_q_div_int", VALUE, [VALUE, T.INT], div_int, rule=PYTHON_PART),
        member("compareTo", "tg_q_compare_to", T.INT, [VALUE, VALUE], compare_to, rule=PYTHON_SCALAR),
        member("isLessThan", "tg_q_is_less_than", T.BOOL, [VALUE, VALUE], is_less_than, rule=PYTHON_SCALAR),
        member("isGreaterThan", "tg_q_is_greater_than", T.BOOL, [VALUE, VALUE], is_greater_than, rule=PYTHON_SCALAR),
    ]
