"""Helpers to declare Python-implemented CEL functions for cel-expr-python (pure; no I/O).

Every declaration carries its cost and result-size rule (:class:`webhook.policy.cel.cost.Rule`), as cel-go's
estimator and Kubernetes' ``library/cost.go`` give every library function one: the helpers below take
``rule`` as a required keyword, so no function can be declared without one. Ready rules for Python functions
are in :mod:`webhook.policy.cel.cost` (``PYTHON_SCALAR``, ``PYTHON_PART``, ``PYTHON_MATCHES``, ...); a new
shape of result gets a new rule there, built from its cost and size helpers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from cel_expr_python import cel

from webhook.policy.cel.cost import Rule

T = cel.Type

#: The type Tollgate's library values (quantity, URL, IP, CIDR, semver, format) have in CEL: a map
#: with one reserved key, since cel-expr-python cannot declare opaque types from Python.
VALUE = T.DYN


class LibraryError(ValueError):
    """A Kubernetes CEL library function failed; the message follows Kubernetes' where known."""


class Declaration(NamedTuple):
    """A Python-implemented CEL function.

    Attributes:
        name: the CEL function name.
        decl: its ``cel.FunctionDecl``.
        rule: its cost and result size (:class:`webhook.policy.cel.cost.Rule`), for every overload.
    """

    name: str
    decl: Any
    rule: Rule


def member(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any], *, rule: Rule) -> Declaration:
    """One receiver-style function ``params[0].name(params[1:])`` with one overload.

    Args:
        name: CEL function name.
        oid: overload id, unique in the environment (prefix ``tg_``).
        ret: return ``cel.Type``.
        params: receiver type then argument types.
        impl: Python implementation; raising makes a CEL error value.
        rule: its cost and result size (:class:`webhook.policy.cel.cost.Rule`).
    """
    return Declaration(name, cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=True, impl=impl)]),
                       rule)


def function(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any], *,
             rule: Rule) -> Declaration:
    """One global function ``name(params...)`` with one overload (see :func:`member`)."""
    return Declaration(name, cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=False, impl=impl)]),
                       rule)


def overloads(name: str, *ovs: Any, rule: Rule) -> Declaration:
    """A function with several overloads (``cel.Overload`` objects), one ``rule`` bounding them all."""
    return Declaration(name, cel.FunctionDecl(name, list(ovs)), rule)
