"""Pruning: a copy of JSON data keeping only what a field tree says a set of programs can read (pure).

:mod:`webhook.policy.projection` works out, from the programs' parse trees, the field trees
(:data:`~webhook.policy.projection.Tree`) of ``object`` and ``oldObject``; this module applies them:
:func:`project` prunes one value, :class:`Projection` the pair a plan binds (see
:mod:`webhook.policy.plan` and :class:`webhook.policy.engine.context.RequestContext`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from webhook.policy.projection import ALL, EACH, KEYS, Tree, union

__all__ = ["Projection", "project"]

# A tree is turned once into a pruning function (a closure per map or list the tree descends into),
# so pruning a request's object costs one call per kept map or list, not one per kept value.

_Prune: TypeAlias = Callable[[Any], Any]
#: How a child is pruned: kept whole, emptied (presence and type only), or by its function.
_KEEP, _EMPTY, _CALL = 0, 1, 2
_CONTAINERS = (dict, list)


def _empty(value: Any) -> Any:
    """Presence and type only: a map becomes ``{}``, a list keeps its length with each element emptied."""
    if isinstance(value, dict):
        return {}
    if isinstance(value, list):
        return [v if v.__class__ not in _CONTAINERS else _empty(v) for v in value]
    return value


def _mode(fn: _Prune | None) -> tuple[int, _Prune]:
    if fn is None:
        return _KEEP, _empty
    return (_EMPTY, _empty) if fn is _empty else (_CALL, fn)


def _pruner(tree: Tree) -> _Prune | None:
    """The function pruning a value by ``tree``; None keeps the value whole."""
    if tree is ALL:
        return None
    each, keys = tree.get(EACH), tree.get(KEYS)
    each_fn = None if each is None else _pruner(each)
    if each is not None and each_fn is None:
        return None  # every element and every value kept whole: the same as the whole map or list
    fields = {k: _mode(_pruner(sub if each is None else union(sub, each))) for k, sub in tree.items()
              if k not in (EACH, KEYS)}
    if each is None and keys is None and not fields:
        return _empty
    element = each if keys is None else keys if each is None else union(each, keys)
    element_mode = _mode(_empty if element is None else _pruner(element))
    if each is not None:
        other: tuple[int, _Prune] | None = _mode(each_fn)
    else:
        other = (_EMPTY, _empty) if keys is not None else None
    return _node(fields, other, element_mode)


def _node(fields: dict[str, tuple[int, _Prune]], other: tuple[int, _Prune] | None,
          element: tuple[int, _Prune]) -> _Prune:
    """Prune a map to ``fields`` (and every other key by ``other`` unless None), a list by ``element``."""
    element_mode, element_fn = element
    listed = tuple((k, mode, fn) for k, (mode, fn) in fields.items())

    def prune(value: Any) -> Any:
        if value.__class__ is dict or isinstance(value, dict):
            out = {}
            if other is None:
                for key, mode, fn in listed:
                    if key in value:
                        v = value[key]
                        out[key] = v if mode == _KEEP or (mode == _EMPTY and v.__class__ not in _CONTAINERS) \
                            else fn(v)
            else:
                get = fields.get
                for key, v in value.items():
                    mode, fn = get(key, other)
                    out[key] = v if mode == _KEEP or (mode == _EMPTY and v.__class__ not in _CONTAINERS) else fn(v)
            return out
        if isinstance(value, list):
            if element_mode == _KEEP:
                return value
            if element_mode == _EMPTY:
                return _empty(value)
            return [element_fn(v) for v in value]
        return value  # a scalar, or a type the tree did not expect: kept as it is

    return prune


def project(value: Any, tree: Tree) -> Any:
    """A copy of ``value`` with only what ``tree`` keeps (the original is never modified).

    Maps keep the tree's field names they have (every key under :data:`EACH` or :data:`KEYS`), each
    pruned by its subtree; lists keep every element, pruned by the :data:`EACH`/:data:`KEYS`
    subtree (emptied without one); anything else, including a value whose type is not what the tree
    expects, is kept as it is. Kept subtrees are shared with ``value``, not copied.

    Args:
        value: JSON data (dicts, lists, scalars), e.g. a Pod.
        tree: the field tree (see :func:`reads`).
    """
    fn = _pruner(tree)
    return value if fn is None else fn(value)


@dataclass(frozen=True, slots=True, eq=False)
class Projection:
    """The pruning of ``object`` and ``oldObject`` for a set of programs.

    Attributes:
        object: the field tree of ``object`` (:data:`ALL` keeps it whole).
        old_object: the field tree of ``oldObject``.
    """

    object: Tree
    old_object: Tree
    _object: _Prune | None
    _old_object: _Prune | None

    @classmethod
    def of(cls, trees: Mapping[str, Tree]) -> Projection | None:
        """The projection for :func:`reads`' trees, or None when it would keep both roots whole."""
        obj, old = trees.get("object", ALL), trees.get("oldObject", ALL)
        prune_object, prune_old = _pruner(obj), _pruner(old)
        if prune_object is None and prune_old is None:
            return None
        return cls(obj, old, prune_object, prune_old)

    def apply(self, obj: Any, old: Any) -> tuple[Any, Any]:
        """``(object, oldObject)`` pruned: new maps and lists where pruned, kept values shared."""
        return (obj if self._object is None else self._object(obj),
                old if self._old_object is None else self._old_object(old))
