"""Store and Indexer: the informer's in-memory cache (client-go ``tools/cache``).

There are three kinds of strings here, as in client-go's index.go:
1. a storage key (``namespace/name``, or ``name`` for cluster-scoped objects);
2. the name of an index (e.g. :data:`NAMESPACE_INDEX`);
3. an indexed value, produced by an :data:`IndexFunc` from an object.

Single writer: only the informer's processing task mutates an Indexer, and no
mutation awaits, so coroutine readers on the same loop need no lock.
Objects are shared, read-only raw dicts: never modify what ``get`` returns.
Pure; no I/O.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from webhook.informer.types import KubeObject

IndexFunc = Callable[[KubeObject], list[str]]
TransformFunc = Callable[[KubeObject], KubeObject]

#: The index every Indexer has: objects by ``metadata.namespace``.
NAMESPACE_INDEX = "namespace"


@dataclass(frozen=True, slots=True)
class DeletedFinalStateUnknown:
    """A tombstone: ``key`` vanished while the watch was down; ``obj`` is its last known state.

    Delivered to ``on_delete`` when a relist no longer contains a known key,
    as client-go's DeltaFIFO.Replace does.
    """

    key: str
    obj: KubeObject


def meta_namespace_key(obj: KubeObject | DeletedFinalStateUnknown) -> str:
    """client-go ``MetaNamespaceKeyFunc``: ``namespace/name`` or ``name``."""
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


def namespace_index(obj: KubeObject) -> list[str]:
    """Index function for :data:`NAMESPACE_INDEX` (``[]`` for cluster-scoped objects)."""
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


def drop_managed_fields(obj: KubeObject) -> KubeObject:
    """Default transform: drop ``metadata.managedFields`` (large, never read by policies)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


class IndexConflictError(ValueError):
    """``add_indexers`` named an index that already exists."""


class Indexer:
    """A Store with secondary indices (client-go ``cache.Indexer`` over ``threadSafeMap``).

    ``get_by_key`` is one dict lookup; ``by_index`` one dict lookup plus the
    size of the result. Empty index sets are dropped (kubernetes#84959).
    """

    def __init__(self, indexers: dict[str, IndexFunc] | None = None, *,
                 key_func: Callable[[KubeObject], str] = meta_namespace_key) -> None:
        self._key_func = key_func
        self._items: dict[str, KubeObject] = {}
        self._indexers: dict[str, IndexFunc] = {NAMESPACE_INDEX: namespace_index}
        self._indexers.update(indexers or {})
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

    # -- reads -------------------------------------------------------------
    def get_by_key(self, key: str) -> KubeObject | None:
        """The object stored under ``key``, or None."""
        return self._items.get(key)

    def get(self, obj: KubeObject) -> KubeObject | None:
        """The stored object with the same key as ``obj``."""
        return self._items.get(self._key_func(obj))

    def list_keys(self) -> builtins.list[str]:
        """Every key (a new list)."""
        return list(self._items)

    def list(self) -> builtins.list[KubeObject]:
        """Every object (a new list; O(n): not for the request path)."""
        return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def index_keys(self, index_name: str, value: str) -> frozenset[str]:
        """Keys whose ``index_name`` values include ``value``.

        Raises:
            KeyError: no such index.
        """
        return frozenset(self._indices[index_name].get(value, ()))

    def by_index(self, index_name: str, value: str) -> builtins.list[KubeObject]:
        """Objects whose ``index_name`` values include ``value``.

        Raises:
            KeyError: no such index.
        """
        return [self._items[k] for k in self._indices[index_name].get(value, ())]

    def index_values(self, index_name: str) -> builtins.list[str]:
        """Every indexed value of ``index_name`` that has at least one object."""
        return list(self._indices[index_name])

    # -- writes (single writer) ----------------------------------------------
    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Add indices and index every existing object into them.

        Raises:
            IndexConflictError: a name is already an index.
        """
        clash = set(indexers) & set(self._indexers)
        if clash:
            raise IndexConflictError(f"indexer(s) already exist: {sorted(clash)}")
        computed = {name: [(k, fn(obj)) for k, obj in self._items.items()] for name, fn in indexers.items()}
        for name, pairs in computed.items():
            index: dict[str, set[str]] = {}
            for key, values in pairs:
                for v in values:
                    index.setdefault(v, set()).add(key)
            self._indexers[name] = indexers[name]
            self._indices[name] = index

    def remove_indexer(self, name: str) -> None:
        """Drop the index ``name`` (no-op when absent); objects stay (e.g. a policy stopped using it)."""
        self._indexers.pop(name, None)
        self._indices.pop(name, None)

    def has_index(self, name: str) -> bool:
        """Whether ``name`` is an index."""
        return name in self._indexers

    def _values(self, obj: KubeObject) -> dict[str, builtins.list[str]]:
        # Computed before any mutation, so a failing IndexFunc leaves the store intact.
        return {name: fn(obj) for name, fn in self._indexers.items()}

    def _unindex(self, key: str, values: dict[str, builtins.list[str]]) -> None:
        for name, vals in values.items():
            index = self._indices[name]
            for v in vals:
                keys = index.get(v)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[v]

    def _index(self, key: str, values: dict[str, builtins.list[str]]) -> None:
        for name, vals in values.items():
            index = self._indices[name]
            for v in vals:
                index.setdefault(v, set()).add(key)

    def upsert(self, obj: KubeObject) -> KubeObject | None:
        """Add or replace ``obj``; returns the previous object under its key, if any."""
        key = self._key_func(obj)
        new_values = self._values(obj)
        old = self._items.get(key)
        if old is not None:
            old_values = self._values(old)
            if old_values != new_values:
                self._unindex(key, old_values)
                self._index(key, new_values)
        else:
            self._index(key, new_values)
        self._items[key] = obj
        return old

    def delete(self, obj_or_key: KubeObject | str) -> KubeObject | None:
        """Remove by object or key; returns the removed object, or None if absent."""
        key = obj_or_key if isinstance(obj_or_key, str) else self._key_func(obj_or_key)
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, self._values(old))
        return old

    def replace(self, objs: Iterable[KubeObject]) -> None:
        """Replace the whole content: new items and indices are built aside, then swapped in one step."""
        items: dict[str, KubeObject] = {}
        for obj in objs:
            items[self._key_func(obj)] = obj
        indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        for key, obj in items.items():
            for name, vals in self._values(obj).items():
                for v in vals:
                    indices[name].setdefault(v, set()).add(key)
        self._items, self._indices = items, indices

    def snapshot(self) -> dict[str, Any]:
        """``{key: object}`` copy of the mapping (tests and debugging)."""
        return dict(self._items)
