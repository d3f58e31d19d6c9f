"""Index values of ``spec.references[].indexes``: CEL over one cached object (pure; no I/O).

Used on both sides of an index: the server's informer Indexer computes them on every watch event
(``webhook.caches.references``), and :class:`~webhook.policy.lookups.InMemoryLookups` computes
them on the fly for ``tollgate test``. The policy compiler checks the expressions (with spec paths);
here a broken expression simply indexes nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from webhook.policy.cel import env as celenv
from webhook.policy.model import ReferenceIndex

_UNBOUND = {name: None for name in celenv.VARIABLES if name != "object"}


@functools.lru_cache(maxsize=512)
def _program(expression: str) -> Any:
    return celenv.compile_expression(expression).program


def index_values(index: ReferenceIndex, obj: dict[str, Any]) -> list[str]:
    """The index values of ``obj`` (``object`` in the expression), as client-go's ``IndexFunc`` returns them.

    Args:
        index: the index definition.
        obj: a cached object.

    Returns:
        The distinct strings the expression yields (a string, or the strings of a list), in order;
        ``[]`` for ``null``, a CEL error, a compile error or any other type.
    """
    try:
        program = _program(index.expression)
    except RuntimeError:
        return []
    try:
        value = celenv.evaluate(program, celenv.environment().Activation({"object": obj, **_UNBOUND}))
    except (celenv.EvaluationError, celenv.BudgetExceeded):
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return list(dict.fromkeys(v for v in value if isinstance(v, str)))
    return []
