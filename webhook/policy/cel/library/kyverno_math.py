"""Kyverno's math library: ``math.round(<double>, <int>)`` (pure; no I/O).

Follows ``github.com/kyverno/sdk`` ``extensions/cel/libs/math`` (``impl.go``): ``math.Round(v * 10^p) / 10^p``
with Go's ``math.Round`` (half away from zero) on float64, so ``math.round(10.125, 2)`` is ``10.13`` when
``10.125 * 100`` is exactly ``1012.5`` and a negative precision rounds to tens, hundreds...
(``math.round(12345.6789, -2) == 12300.0``). ``math.round(<double>)`` is cel-cpp's own (ext math).

Cost: constant; result a double.
"""

from __future__ import annotations

import math
from typing import Any

from webhook.policy.cel.cost import PYTHON_SCALAR
from webhook.policy.cel.library._decl import T, function


def _go_round(x: float) -> float:
    """Go's ``math.Round``: the nearest integer, halves away from zero; NaN and infinities unchanged."""
    if math.isnan(x) or math.isinf(x):
        return x
    t = float(math.trunc(x))
    if abs(x - t) >= 0.5:
        t += math.copysign(1.0, x)
    return t if t != 0 else math.copysign(0.0, x)


def round_to(value: float, precision: int) -> float:
    """``math.round(<double>, <int>) -> double``: ``value`` rounded to ``precision`` decimal places."""
    try:
        shift = math.pow(10, precision)
    except OverflowError:
        shift = math.inf
    return _go_round(value * shift) / shift


def declarations() -> list[Any]:
    """The math library's function (the one-argument ``math.round`` is cel-cpp's)."""
    return [function("math.round", "tg_kyverno_math_round_precision", T.DOUBLE, [T.DOUBLE, T.INT], round_to,
                     rule=PYTHON_SCALAR)]
