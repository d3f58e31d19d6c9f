"""Shared helper: evaluate an expression in Tollgate's policy environment, as the upstream tests do."""

from __future__ import annotations

from typing import Any

from webhook.policy.cel.env import T, environment

ENV = environment()



def run(expr: str, **data: Any) -> tuple[str, Any]:
    """``("value", plain)``, ``("error", message)`` (runtime error value) or ``("compile", message)``."""
    try:
        program = ENV.compile(expr)
    except RuntimeError as e:
        return "compile", str(e)
    v = program.eval(ENV.Activation(data))
    if v.type() == T.ERROR:
        return "error", str(v.value())
    return "value", v.plain_value()


def check(expr: str, kind: str, expected: Any) -> None:
    """Assert ``expr`` yields ``expected``: a value, or an error/compile message containing it."""
    got_kind, got = run(expr)
    assert got_kind == kind, (expr, got_kind, got)
    if kind == "value":
        if isinstance(expected, float):
            assert abs(got - expected) < 1e-4, (expr, got)
        else:
            assert got == expected, (expr, got)
            assert type(got) is type(expected), (expr, type(got))
    else:
        assert expected in got, (expr, got)
