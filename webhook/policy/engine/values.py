"""Evaluating one compiled program: its value as plain data, a bool, or JSON to write into an object."""

from __future__ import annotations

import base64
import datetime
from typing import Any

from webhook.policy.cel import env as celenv
from webhook.policy.compiler import Program
from webhook.policy.engine.outcome import EvaluationError

__all__ = ["COST_EXCEEDED", "bool_value", "cel_type_name", "json_value", "value"]

#: The error of an evaluation stopped by cel-cpp's iteration budget, a cost error as Kubernetes words its own
#: ("operation cancelled: actual cost limit exceeded").
COST_EXCEEDED = ("evaluation cost limit exceeded: more than 10,000 comprehension iterations in one expression "
                 "(cel-cpp's per-evaluation limit)")


def _clean(text: str) -> str:
    for prefix in ("INVALID_ARGUMENT: ", "NOT_FOUND: ", "OUT_OF_RANGE: ", "UNKNOWN: ", "INTERNAL: "):
        text = text.removeprefix(prefix)
    return text.strip()


def cel_type_name(value: Any) -> str:
    """The CEL type name of a plain evaluation result (``bool``, ``int``, ``string``, ``map``, ...)."""
    if value is None:
        return "null_type"
    for py, name in ((bool, "bool"), (int, "int"), (float, "double"), (str, "string"), (bytes, "bytes"),
                     (list, "list"), (dict, "map"), (datetime.timedelta, "google.protobuf.Duration"),
                     (datetime.datetime, "google.protobuf.Timestamp")):
        if isinstance(value, py):
            return name
    return type(value).__name__


def value(program: Program, activation: Any) -> Any:
    """Evaluate ``program``; its plain Python value.

    Raises:
        EvaluationError: a CEL error value, or the engine stopped evaluation
            (iteration budget); the message names the spec path.
    """
    try:
        return celenv.evaluate(program.program, activation)
    except celenv.BudgetExceeded:
        raise EvaluationError(f"{program.path}: {COST_EXCEEDED}") from None
    except celenv.EvaluationError as e:  # a CEL error value
        raise EvaluationError(f"{program.path}: {_clean(str(e))}") from None


def bool_value(program: Program, activation: Any, what: str) -> bool:
    """Evaluate ``program``, which must yield a bool (``what`` names it in the error).

    Raises:
        EvaluationError: an evaluation error, or a value that is not a bool.
    """
    result = value(program, activation)
    if not isinstance(result, bool):
        raise EvaluationError(f"{program.path}: {what} must evaluate to bool, but evaluated to "
                              f"{cel_type_name(result)}")
    return result


def json_value(value: Any, path: str) -> Any:
    """A mutation's CEL result as JSON data; durations, timestamps and bytes as Kubernetes encodes them."""
    cls = value.__class__
    if cls is str or cls is int or cls is bool or value is None:  # the common leaves, by exact type first
        return value
    if cls is dict or isinstance(value, dict):
        return {k if k.__class__ is str else str(k): json_value(v, path) for k, v in value.items()}
    if isinstance(value, list):
        return [json_value(v, path) for v in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise EvaluationError(f"{path}: {value} is not a JSON number")
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise EvaluationError(f"{path}: a {cel_type_name(value)} value cannot be written into an object")
