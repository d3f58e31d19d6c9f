"""List library: transcribed from the examples of kubernetes staging/src/k8s.io/apiserver/pkg/cel/library/lists.go
(the library's doc comments are its test table; there is no lists_test.go), plus the cel-cpp ext lists the
1.36 environment enables natively."""

from __future__ import annotations

import pytest

from tests.unit.policy.library._cel import check

# lists.go: isSorted, sum, min/max, indexOf/lastIndexOf
CASES = [
    ("[1, 2, 3].isSorted()", "value", True),
    ("['a', 'b', 'b', 'c'].isSorted()", "value", True),
    ("[2.0, 1.0].isSorted()", "value", False),
    ("[1].isSorted()", "value", True),
    ("[].isSorted()", "value", True),
    ("[1, 3].sum()", "value", 4),
    ("[1.0, 3.0].sum()", "value", 4.0),
    ("[].sum()", "value", 0),
    ("[1, 3].min()", "value", 1),
    ("[1, 3].max()", "value", 3),
    ("[].min()", "error", "min called on empty list"),
    ("[1].min()", "value", 1),
    ("([0] + []).min()", "value", 0),
    ("[1, 2, 2, 3].indexOf(2)", "value", 1),
    ("['a', 'b', 'b', 'c'].lastIndexOf('b')", "value", 2),
    ("[1.0].indexOf(1.1)", "value", -1),
    ("[].indexOf('string')", "value", -1),
    # The element type must be comparable: a compile error, as Kubernetes declares no overload.
    ("[[1], [2]].min()", "compile", "found no matching overload for 'min' applied to 'list(list(int))'"),
    ("[{'a': 1}].isSorted()", "compile", "found no matching overload for 'isSorted'"),
    ("['a'].sum()", "compile", "found no matching overload for 'sum'"),
    ("[timestamp('2024-01-01T00:00:00Z'), timestamp('2023-01-01T00:00:00Z')].isSorted()", "value", False),
    # ext lists (cel-cpp, native): Kubernetes 1.34 enables ext.Lists version 3.
    ("lists.range(3)", "value", [0, 1, 2]),
    ("[3, 1, 2].sort()", "value", [1, 2, 3]),
    ("[[1], [2, 3]].flatten()", "value", [1, 2, 3]),
    ("[1, 1, 2].distinct()", "value", [1, 2]),
    ("[1, 2, 3].reverse()", "value", [3, 2, 1]),
    ("[1, 2, 3, 4].slice(1, 3)", "value", [2, 3]),
    ("[{'a': 2}, {'a': 1}].sortBy(x, x.a)", "value", [{"a": 1}, {"a": 2}]),
    ("[1, 2].first() == optional.of(1)", "value", True),
    ("[].last() == optional.none()", "value", True),
    ("sets.contains([1, 2, 3], [2, 3])", "value", True),
    ("sets.equivalent([1, 2], [2, 1, 1])", "value", True),
    ("sets.intersects([1], [2])", "value", False),
    # lists.go includes (ListsVersion 1, Kubernetes 1.37): the doc comment's examples, then CEL equality.
    ("[1, 2, 3].includes(2)", "value", True),
    ("[1, 2, 3].includes(4)", "value", False),
    ("'model-a'.includes('model-a')", "value", True),
    ("'model-a'.includes('model-b')", "value", False),
    ("[1, 2].includes(2.0)", "value", True),
    ("[1u].includes(1)", "value", True),
    ("[[1], [2, 3]].includes([2, dyn(3.0)])", "value", True),
    ("[[true]].includes([1])", "value", False),
    ("['1'].includes(1)", "value", False),
    ("[].includes(1)", "value", False),
    # sets over mixed int/uint/double (cost_test.go TestSetsCost): cel-go's heterogeneous numeric
    # equality. Kubernetes' policy environment refuses mixed list literals (HomogeneousAggregateLiterals),
    # so the mixed elements come through dyn() here, as they do from an object's fields.
    ("sets.contains([1], [dyn(1.0), 1])", "value", True),
    ("sets.contains([1, dyn(2.0), dyn(3u)], [dyn(1.0), dyn(2u), 3])", "value", True),
    ("sets.contains([[1], [2, 3]], [[2, dyn(3.0)]])", "value", True),
    ("sets.contains([1], [dyn(1.1), dyn(1u)])", "value", False),
    ("sets.equivalent([1, 2, 3], [dyn(3u), dyn(2.0), 1])", "value", True),
    ("sets.equivalent([1, 2], [dyn(1u), 2, dyn(2.3)])", "value", False),
    ("sets.intersects([1, 2], [dyn(2u), 2, dyn(2.0)])", "value", True),
    ("sets.intersects([1], [dyn(1.1), dyn(2u)])", "value", False),
    ("sets.contains([1], [1.0, 1])", "compile", "expected type 'double' but found 'int'"),
]

# Typed results: the checker's element type selects a typed variant (lists.go: sum of durations, the
# typed zero of an empty list).
TYPED = [
    ("[duration('1m'), duration('1s')].sum() == duration('1m1s')", "value", True),
    ("[duration('1m'), duration('1s')].min() == duration('1s')", "value", True),
    (("[timestamp('2024-01-01T00:00:00Z'), timestamp('2023-01-01T00:00:00Z')].max() == "
     "timestamp('2024-01-01T00:00:00Z')"), "value", True),
    ("type([1.0].filter(x, false).sum()) == double", "value", True),
    ("[1.0, 3.0].filter(x, false).sum()", "value", 0.0),
    ("[1u, 2u].sum() == 3u", "value", True),
]

# Cannot pass: when the element type is only known at run time (dyn, e.g. object fields) the generic
# overload cannot return a duration, and an empty list sums to int 0.
CANNOT = [
    ("dyn([duration('1m'), duration('1s')]).sum() == duration('1m1s')", "value", True),
    ("type(dyn([1.0]).filter(x, false).sum()) == double", "value", True),
]


@pytest.mark.parametrize(("expr", "kind", "expected"), CASES)
def test_lists(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


@pytest.mark.parametrize(("expr", "kind", "expected"), TYPED)
def test_lists_typed(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)


@pytest.mark.xfail(strict=True, reason="a dyn-typed list: Python functions cannot return durations as dyn, nor know "
                                       "the element type of an empty list")
@pytest.mark.parametrize(("expr", "kind", "expected"), CANNOT)
def test_lists_typed_results(expr: str, kind: str, expected: object) -> None:
    check(expr, kind, expected)
