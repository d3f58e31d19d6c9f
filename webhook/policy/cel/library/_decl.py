"""Helpers to declare Python-implemented CEL functions for cel-expr-python (pure; no I/O)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cel_expr_python import cel

T = cel.Type

#: The type Tollgate's library values (quantity, URL, IP, CIDR, semver, format) have in CEL: a map
#: with one reserved key, since cel-expr-python cannot declare opaque types from Python.
VALUE = T.DYN


class LibraryError(ValueError):
    """A Kubernetes CEL library function failed; the message follows Kubernetes' where known."""


def member(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
    """One receiver-style function ``params[0].name(params[1:])`` with one overload.

    Args:
        name: CEL function name.
        oid: overload id, unique in the environment (prefix ``tg_``).
        ret: return ``cel.Type``.
        params: receiver type then argument types.
        impl: Python implementation; raising makes a CEL error value.
    """
    return cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=True, impl=impl)])


def function(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
    """One global function ``name(params...)`` with one overload (see :func:`member`)."""
    return cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=False, impl=impl)])


def overloads(name: str, *ovs: Any) -> Any:
    """A function with several overloads (``cel.Overload`` objects)."""
    return cel.FunctionDecl(name, list(ovs))
