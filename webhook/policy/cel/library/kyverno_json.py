"""Kyverno's json library: ``json.unmarshal(<string>)`` (pure; no I/O).

Follows ``github.com/kyverno/sdk`` ``extensions/cel/libs/json`` (``impl.go``, ``types.go``): Go's
``encoding/json`` ``Unmarshal`` into ``any``, so objects are maps, arrays lists, and every number is a
double (``json.unmarshal('{"a": 1}').a == 1.0``); text that is not one JSON value (trailing data, ``NaN``,
a number beyond float64) is an error value. Kyverno declares ``json`` as a variable of an opaque type with
a member ``unmarshal``; here ``json.unmarshal`` is one qualified function, written the same way.
``json.marshal`` is not implemented (Go's number and HTML-escaping output would have to be reproduced).

Bounds: nesting deeper than :data:`MAX_DEPTH` is an error (Go's decoder stops at 10,000; Python's parser
recurses). Cost: linear in the length of the text; the result is at most a constant times that size.
"""

from __future__ import annotations

import json
import math
from typing import Any

from webhook.policy.cel.cost import PYTHON_PART
from webhook.policy.cel.library._decl import LibraryError, T, function

#: Deepest nesting of arrays and objects accepted.
MAX_DEPTH = 500


def _constant(name: str) -> Any:
    raise LibraryError(f"invalid character '{name[0]}' looking for beginning of value")


def _number(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise LibraryError(f"json: cannot unmarshal number {text} into Go value of type float64")
    return value


def _depth(text: str) -> int:
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def unmarshal(text: str) -> Any:
    """``json.unmarshal(<string>) -> dyn``: the JSON value, numbers as doubles.

    Raises:
        LibraryError: not exactly one JSON value, or nested deeper than :data:`MAX_DEPTH`.
    """
    if _depth(text) > MAX_DEPTH:
        raise LibraryError(f"json: exceeded max depth of {MAX_DEPTH}")
    try:
        return json.loads(text, parse_float=_number, parse_int=_number, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise LibraryError(f"json: {e.msg} at offset {e.pos}") from None


def declarations() -> list[Any]:
    """The json library's function."""
    return [function("json.unmarshal", "tg_kyverno_json_unmarshal", T.DYN, [T.STRING], unmarshal,
                     rule=PYTHON_PART)]
