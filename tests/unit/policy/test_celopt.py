"""celopt: list-building comprehensions over slices give the same results as the plain macros."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.policy.cel import ast as celast
from webhook.policy.cel import optimize as celopt
from webhook.policy.cel.env import T, environment

ENV = environment()



def plain_and_chunked(expr: str, **data: Any) -> tuple[Any, Any]:
    """Evaluate ``expr`` without the rewrite (raw cel-cpp program) and through ENV (rewritten)."""
    act = ENV.Activation(data)
    plain = ENV.env.compile(expr).eval(act)
    chunked = ENV.compile(expr).eval(act)
    return plain, chunked


@pytest.mark.parametrize("expr", [
    "lists.range(300).map(x, x * 2)",
    "lists.range(300).filter(x, x % 7 == 0)",
    "lists.range(300).map(x, x % 2 == 0, x)",
    "object.items.map(c, c.name)",
    "object.items.filter(c, c.n > 250).map(c, c.name)",
    "object.items.sortBy(c, -c.n).map(c, c.n)",
    "lists.range(130).map(x, lists.range(3).map(y, x + y))",
    "{'a': 1, 'b': 2}.map(k, k).sort()",
    "[].map(x, x)",
    "lists.range(65).map(x, x)",
])
def test_same_result(expr: str) -> None:
    items = [{"name": f"c{i}", "n": i} for i in range(300)]
    plain, chunked = plain_and_chunked(expr, object={"items": items})
    assert plain.type() != T.ERROR, plain.value()
    assert chunked.plain_value() == plain.plain_value()


def test_errors_are_kept() -> None:
    plain, chunked = plain_and_chunked("lists.range(100).map(x, 10 / (x - 70))")
    assert plain.type() == T.ERROR and chunked.type() == T.ERROR
    assert "divide by zero" in str(chunked.value())


def test_rewrite_applies_only_to_list_building_comprehensions() -> None:
    assert celopt.chunk_list_comprehensions(ENV.env.compile("[1, 2].all(x, x > 0)").serialize()) is None
    assert celopt.chunk_list_comprehensions(ENV.env.compile("cel.bind(a, [1], a)").serialize()) is None
    assert celopt.chunk_list_comprehensions(ENV.env.compile("[1].transformList(i, x, x)").serialize()) is None
    out = celopt.chunk_list_comprehensions(ENV.env.compile("[1, 2].map(x, x)").serialize())
    assert out is not None
    ast = celast.decode(out)
    assert not ast.checked
    names = {n.name for n in ast.root.walk() if n.kind == "call"}
    assert {"slice", "flatten", "lists.range"} <= names
    ids = [n.id for n in ast.root.walk()]
    assert len(ids) == len(set(ids))
