"""Runtime half of two-variable comprehensions: ``cel.@mapInsert`` (pure; no I/O).

cel-cpp's ``two-var-comprehensions`` extension (Kubernetes 1.32: ``transformMap``,
``transformMapEntry``) expands those macros to ``cel.@mapInsert`` calls, but cel-expr-python 0.1.3
registers no runtime function for it ("No overload found in reference resolve step for
cel.@mapInsert"), and redeclaring it in the compiling environment collides with the checker's
declaration. :mod:`webhook.policy.cel.env` therefore compiles in the full environment and, for
expressions that use these macros, re-plans the checked AST in a twin environment that declares
:func:`declarations` instead of the two-var extension.
"""

from __future__ import annotations

from typing import Any

from cel_expr_python import cel

from webhook.policy.cel.library._decl import LibraryError, T

#: Largest map a transformMap/transformMapEntry may build (each insert copies the map in Python).
MAX_ENTRIES = 2_000


def map_insert(m: dict[Any, Any], key: Any, value: Any = None, *rest: Any) -> dict[Any, Any]:
    """``cel.@mapInsert(map, key, value)`` or ``cel.@mapInsert(map, map)``: a new map.

    Raises:
        LibraryError: a key already present (cel-go: "insert failed: key ... already exists"),
            or more than :data:`MAX_ENTRIES` entries.
    """
    out = dict(m)
    additions = key.items() if value is None and isinstance(key, dict) and not rest else [(key, value)]
    for k, v in additions:
        if k in out:
            raise LibraryError(f"insert failed: key {k!r} already exists")
        out[k] = v
    if len(out) > MAX_ENTRIES:
        raise LibraryError(f"map comprehension result exceeds {MAX_ENTRIES} entries")
    return out


def declarations() -> list[Any]:
    """``cel.@mapInsert`` with cel-cpp's overload ids, for the runtime twin environment only."""
    m = T.Map(T.DYN, T.DYN)
    return [cel.FunctionDecl("cel.@mapInsert", [
        cel.Overload("@mapInsert_map_key_value", m, [m, T.DYN, T.DYN], impl=map_insert),
        cel.Overload("@mapInsert_map_map", m, [m, m], impl=map_insert),
    ])]
