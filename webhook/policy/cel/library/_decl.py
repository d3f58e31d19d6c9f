"""Helpers to declare Python-implemented CEL functions for cel-expr-python (pure; no I/O)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from cel_expr_python import cel

T = cel.Type

#: The type Tollgate's library values (quantity, URL, IP, CIDR, semver, format) have in CEL: a map
#: with one reserved key, since cel-expr-python cannot declare opaque types from Python.
VALUE = T.DYN


class LibraryError(ValueError):
    """A Kubernetes CEL library function failed; the message follows Kubernetes' where known."""


class Declaration(NamedTuple):
    """A Python-implemented CEL function: its name (cost estimates count its calls) and its ``cel.FunctionDecl``."""

    name: str
    decl: Any


def member(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Declaration:
    """One receiver-style function ``params[0].name(params[1:])`` with one overload.

    Args:
        name: CEL function name.
        oid: overload id, unique in the environment (prefix ``tg_``).
        ret: return ``cel.Type``.
        params: receiver type then argument types.
        impl: Python implementation; raising makes a CEL error value.
    """
    return Declaration(name, cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=True, impl=impl)]))


def function(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Declaration:
    """One global function ``name(params...)`` with one overload (see :func:`member`)."""
    return Declaration(name, cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=False, impl=impl)]))


def overloads(name: str, *ovs: Any) -> Declaration:
    """A function with several overloads (``cel.Overload`` objects)."""
    return Declaration(name, cel.FunctionDecl(name, list(ovs)))
