"""Kubernetes list library: ``isSorted``, ``sum``, ``min``, ``max``, ``indexOf``, ``lastIndexOf``, ``includes`` (pure).

Follows ``k8s.io/apiserver/pkg/cel/library/lists.go`` (Kubernetes 1.24+; ``includes`` is its version 1,
Kubernetes 1.37). Element types must be
comparable (int, uint, double, bool, string, bytes, duration, timestamp); ``sum`` accepts int,
uint, double and duration. The checker-level element-type check (``[[1],[2]].min()`` is a compile
error) lives in :mod:`webhook.policy.cel.validators`, because cel-expr-python cannot register one
Python overload per element type.
"""

from __future__ import annotations

import datetime
from typing import Any

from webhook.policy.cel.cost import PYTHON_PART, PYTHON_SCALAR
from webhook.policy.cel.library._decl import LibraryError, T, member

#: Element types the comparison functions accept, as the checker names them.
COMPARABLE = frozenset({"int", "uint", "double", "bool", "string", "bytes", "duration", "timestamp"})
#: Element types ``sum()`` accepts.
SUMMABLE = frozenset({"int", "uint", "double", "duration"})


def _check_same_kind(items: list[Any]) -> None:
    kinds = {bool if isinstance(x, bool) else (float if isinstance(x, float | int) and not isinstance(x, bool)
                                                else type(x)) for x in items}
    if len(kinds) > 1:
        raise LibraryError("no such overload: list elements are not of one comparable type")
    for x in items:
        if isinstance(x, list | dict) or x is None:
            raise LibraryError(f"no such overload: {type(x).__name__} elements are not comparable")


def is_sorted(items: list[Any]) -> bool:
    """``<list<T>>.isSorted() -> bool``: each element ``<=`` the next.

    Raises:
        LibraryError: elements not comparable.
    """
    _check_same_kind(items)
    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))


def list_sum(items: list[Any]) -> Any:
    """``<list<T>>.sum() -> T``: 0 for an empty list (int; see the module docstring).

    Durations sum to a duration, ints overflow-check as int64.

    Raises:
        LibraryError: non-numeric elements or int64 overflow.
    """
    if not items:
        return 0
    _check_same_kind(items)
    first = items[0]
    if isinstance(first, datetime.timedelta):
        return sum(items, datetime.timedelta(0))
    if isinstance(first, bool) or not isinstance(first, int | float):
        raise LibraryError(f"no such overload: sum() of {type(first).__name__}")
    total = sum(items)
    if isinstance(total, int) and not -(2**63) <= total < 2**64:
        raise LibraryError("integer overflow")
    return total


def _need(items: list[Any], what: str) -> list[Any]:
    if not items:
        raise LibraryError(f"{what} called on empty list")
    _check_same_kind(items)
    return items


def list_min(items: list[Any]) -> Any:
    """``<list<T>>.min() -> T``; an error on an empty list (Kubernetes: "min called on empty list")."""
    return min(_need(items, "min"))


def list_max(items: list[Any]) -> Any:
    """``<list<T>>.max() -> T``; an error on an empty list."""
    return max(_need(items, "max"))


def index_of(items: list[Any], x: Any) -> int:
    """``<list<T>>.indexOf(T) -> int``: first index of ``x`` by CEL equality, or -1."""
    for i, v in enumerate(items):
        if _equal(v, x):
            return i
    return -1


def last_index_of(items: list[Any], x: Any) -> int:
    """``<list<T>>.lastIndexOf(T) -> int``: last index of ``x``, or -1."""
    for i in range(len(items) - 1, -1, -1):
        if _equal(items[i], x):
            return i
    return -1


def includes(target: Any, x: Any) -> bool:
    """``<dyn>.includes(<dyn>) -> bool``: whether the list ``target`` holds ``x``, or a non-list ``target`` equals it.

    As ``lists.go`` ``includes`` (ListsVersion 1): CEL equality, so ``[1, 2].includes(2.0)`` is true
    (cel-go's heterogeneous numeric equality) and ``'model-a'.includes('model-a')`` is true.
    """
    if isinstance(target, list):
        return any(_equal(v, x) for v in target)
    return _equal(target, x)


def _equal(a: Any, b: Any) -> bool:
    """CEL equality (cel-go's, heterogeneous for numbers), element by element in lists and maps."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(v, b[k]) for k, v in a.items())
    return bool(type(a) is type(b) and a == b) or (
        isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool) and a == b)


#: Typed variants the environment calls instead of ``sum``/``min``/``max`` when the checker knows the
#: element type (cel-expr-python converts a Python result by the declared return type, so a ``dyn``
#: overload cannot return a duration, and an empty list's zero must be typed): function → element
#: type → hidden function name.
TYPED = {
    "sum": {"double": "__tg_sum_double", "uint": "__tg_sum_uint", "duration": "__tg_sum_duration"},
    "min": {"duration": "__tg_min_duration", "timestamp": "__tg_min_timestamp"},
    "max": {"duration": "__tg_max_duration", "timestamp": "__tg_max_timestamp"},
}


def _sum_double(items: list[Any]) -> float:
    return float(list_sum(items)) if items else 0.0


def _sum_duration(items: list[Any]) -> datetime.timedelta:
    return sum(items, datetime.timedelta(0)) if items else datetime.timedelta(0)


def _typed_declarations() -> list[Any]:
    dl = T.List(T.DYN)
    return [
        member("__tg_sum_double", "tg_list_sum_double", T.DOUBLE, [dl], _sum_double, rule=PYTHON_SCALAR),
        member("__tg_sum_uint", "tg_list_sum_uint", T.UINT, [dl], list_sum, rule=PYTHON_SCALAR),
        member("__tg_sum_duration", "tg_list_sum_duration", T.DURATION, [dl], _sum_duration, rule=PYTHON_SCALAR),
        member("__tg_min_duration", "tg_list_min_duration", T.DURATION, [dl], list_min, rule=PYTHON_SCALAR),
        member("__tg_max_duration", "tg_list_max_duration", T.DURATION, [dl], list_max, rule=PYTHON_SCALAR),
        member("__tg_min_timestamp", "tg_list_min_timestamp", T.TIMESTAMP, [dl], list_min, rule=PYTHON_SCALAR),
        member("__tg_max_timestamp", "tg_list_max_timestamp", T.TIMESTAMP, [dl], list_max, rule=PYTHON_SCALAR),
    ]


def declarations() -> list[Any]:
    """The list library's functions (receiver ``list(dyn)``), and the typed variants of :data:`TYPED`."""
    dl = T.List(T.DYN)
    return [
        *_typed_declarations(),
        member("isSorted", "tg_list_is_sorted", T.BOOL, [dl], is_sorted, rule=PYTHON_SCALAR),
        member("sum", "tg_list_sum", T.DYN, [dl], list_sum, rule=PYTHON_SCALAR),
        member("min", "tg_list_min", T.DYN, [dl], list_min, rule=PYTHON_PART),
        member("max", "tg_list_max", T.DYN, [dl], list_max, rule=PYTHON_PART),
        member("indexOf", "tg_list_index_of", T.INT, [dl, T.DYN], index_of, rule=PYTHON_SCALAR),
        member("lastIndexOf", "tg_list_last_index_of", T.INT, [dl, T.DYN], last_index_of, rule=PYTHON_SCALAR),
        member("includes", "tg_list_includes", T.BOOL, [T.DYN, T.DYN], includes, rule=PYTHON_SCALAR),
    ]
