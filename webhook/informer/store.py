"""Store and Indexer: the informer's in-memory cache (client-go ``tools/cache``).

There are three kinds of strings here, as in client-go's index.go:
1. a storage key (``namespace/name``, or ``name`` for cluster-scoped objects);
2. the name of an index (e.g. :data:`NAMESPACE_INDEX`);
3. an indexed value, produced by an :data:`IndexFunc` from an object.

Single writer: only the informer's processing task mutates an Indexer, and no
mutation awaits, so coroutine readers on the same loop need no lock.
Objects are shared, read-only raw dicts: never modify what ``get`` returns.

**Stored forms.** An Indexer keeps each object either as the dict itself or,
with ``compact=True``, as its compact JSON (``bytes``, decoded again on every
read): about 1.2x the object's JSON size instead of ~7x for a parsed dict, at
~2-4 us per read of a 1 KB object. A :class:`ListBuffer` receives a LIST's
pages (or WatchList's initial events) one object at a time, transforms,
encodes and indexes each as it arrives, so the parsed page can be dropped at
once and memory stays bounded while a sync runs (client-go applies its
TransformFunc in the DeltaFIFO, before anything is kept). Stored forms are
kept by namespace, then name (:class:`Objects`), which is also the namespace
index.
Pure; no I/O.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import orjson

from webhook.informer.types import KubeObject

IndexFunc = Callable[[KubeObject], list[str]]
#: client-go ``TransformFunc``: called once with every object fresh from the ListerWatcher, before it is
#: kept or notified. It returns the object to keep (it may return a new one, or the same one changed:
#: nothing else holds it yet). It must be cheap and idempotent.
TransformFunc = Callable[[KubeObject], KubeObject]
#: What an Indexer keeps per key: the object itself, or its compact JSON.
Stored = KubeObject | bytes

#: The keys of one indexed value: a dict used as an ordered set (values None). Unlike a ``set``, a dict
#: holding only strings and None is not tracked by the garbage collector, so the full collections that
#: parsing a LIST's pages sets off never walk the index (0.74k instructions per object when syncing 100k
#: ConfigMaps, under callgrind; the walks grow with the store).
KeySet = dict[str, None]

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
    """Default transform: drop ``metadata.managedFields`` (large, never read by policies).

    Copies the top level and ``metadata`` when there is something to drop (the input is never
    changed, so it is safe for ListerWatchers that keep the objects they hand out).
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        meta = meta.copy()
        del meta["managedFields"]
        obj = obj.copy()
        obj["metadata"] = meta
    return obj


#: ``metadata`` fields every projection keeps: the key, labels, resourceVersion and identity.
KEPT_METADATA = ("name", "namespace", "resourceVersion", "uid", "labels", "generation", "deletionTimestamp")

#: The segment of a field path that stands for every list element and every map value.
EACH = "*"

#: A field tree: ``None`` keeps the whole value; a dict keeps the named fields (or :data:`EACH`).
FieldTree = dict[str, "FieldTree | None"]


def field_tree(paths: Iterable[str | tuple[str, ...]]) -> FieldTree:
    """The tree of the field paths a consumer reads, e.g. ``["spec.containers.*.image", "data"]``.

    A path is a dotted string or a tuple of segments; :data:`EACH` (``*``) stands for every
    element of a list or every value of a map. A path keeps its whole subtree; a path that is a
    prefix of another keeps the prefix's whole subtree.
    """
    tree: FieldTree = {}
    for path in paths:
        segments = tuple(path.split(".")) if isinstance(path, str) else tuple(path)
        if not segments or any(not s for s in segments):
            raise ValueError(f"empty segment in field path {path!r}")
        node = tree
        for seg in segments[:-1]:
            child = node.get(seg, {})
            if child is None:  # a shorter path already keeps this whole subtree
                break
            node[seg] = child
            node = child
        else:
            node[segments[-1]] = None
    return tree


def _prune(value: Any, tree: FieldTree) -> Any:
    if isinstance(value, dict):
        if EACH in tree:
            sub = tree[EACH]
            return {k: (v if sub is None else _prune(v, sub)) for k, v in value.items()}
        out = {}
        for k, sub in tree.items():
            if k in value:
                v = value[k]
                out[k] = v if sub is None else _prune(v, sub)
        return out
    if isinstance(value, list):
        # Without EACH, the tree applies to every element ("spec.containers.image").
        sub = tree.get(EACH, tree)
        return [v if sub is None else _prune(v, sub) for v in value]
    return value


def keep_fields(paths: Iterable[str | tuple[str, ...]]) -> TransformFunc:
    """A transform keeping only the fields consumers read, plus what the informer itself needs.

    ``apiVersion``, ``kind`` and the ``metadata`` fields in :data:`KEPT_METADATA` (key, labels,
    resourceVersion, uid, generation, deletionTimestamp) are always kept; ``managedFields`` is
    dropped unless a path names it. The input is never changed: kept subtrees are shared with it.
    Index functions read the transformed object, so the paths must include what they read.

    Args:
        paths: field paths (see :func:`field_tree`), e.g. ``["spec.containers.*.securityContext",
            "metadata.annotations"]``.

    Returns:
        A :data:`TransformFunc`. Objects kept this way are smaller but no longer whole: every
        consumer of the informer must declare what it reads (see
        :meth:`webhook.informer.SharedInformer.set_read_fields`).
    """
    tree = field_tree(paths)
    meta_tree = tree.get("metadata", {})
    if meta_tree is not None:
        for name in KEPT_METADATA:
            meta_tree.setdefault(name, None)
        tree["metadata"] = meta_tree
    tree.setdefault("apiVersion", None)
    tree.setdefault("kind", None)

    def transform(obj: KubeObject) -> KubeObject:
        pruned: KubeObject = _prune(obj, tree)
        return pruned

    return transform


#: Added to orjson's output to copy it to an exact-size ``bytes`` (see :func:`encode`).
_SPACE = b" "
#: A default no JSON value can be.
_MISSING: Any = object()
#: "metadata", "name", "namespace", "managedFields" as orjson's key cache holds them: a dict that orjson
#: built finds its own key object at once; an equal string from elsewhere costs a string comparison per
#: lookup (orjson's keys are not interned). Only a speed-up: any equal string finds the same entries.
_KEYS: tuple[str, str, str, str] = tuple(orjson.loads(b'{"metadata":0,"name":0,"namespace":0,"managedFields":0}'))


def encode(obj: KubeObject) -> bytes:
    """The compact stored form of ``obj``: its JSON without spaces, then one space, allocated to its exact size.

    orjson returns its output in the buffer it grew (4 KiB for a 600-byte object with orjson 3.13, as
    tracemalloc shows); kept as is, that is ~5x the JSON per cached object. The copy is ``out + b" "``: one
    exact-size allocation and memcpy, and the trailing space is JSON whitespace every parser skips. It
    costs 0.3k instructions per object less than ``b"".join((out, b""))`` (no tuple, no buffer protocol;
    callgrind, the compact LIST loop), which was 40 % cheaper than ``memoryview(out).tobytes()``. A join of
    one item, a full slice, ``bytes(out)`` or ``out + b""`` would return ``out`` itself.
    """
    return orjson.dumps(obj) + _SPACE


def decode(stored: Stored) -> KubeObject:
    """The object of a stored form: a dict is returned as is, ``bytes`` are parsed (a new dict)."""
    if type(stored) is bytes:
        out: KubeObject = orjson.loads(stored)
        return out
    return stored  # type: ignore[return-value]


class IndexConflictError(ValueError):
    """``add_indexers`` named an index that already exists."""


class Objects:
    """The stored forms by key, in two levels: a namespace's objects by name in a dict of their own.

    An object whose key is ``namespace/name`` (:func:`meta_namespace_key`) and whose namespace is a string
    without ``/`` is kept in :attr:`by_namespace` ``[namespace][name]``; any other (cluster-scoped objects,
    malformed namespaces, custom key functions) in :attr:`flat` ``[key]``. A key is in one place at most, and
    the place is found from the key alone (its part before the first ``/`` is the namespace, the rest the
    name). The namespaces' dicts are also the namespace index of the objects they hold (client-go keeps a
    separate ``namespace`` index of keys): one dict insert per object and no ``namespace/name`` string is
    made while a LIST is stored, which is what the LIST path's loop saves (callgrind, see
    docs/performance.md, "The LIST path, round 5"); the keys are made when they are listed. An emptied
    namespace's dict is dropped, as client-go drops an emptied index set (kubernetes#84959).
    """

    __slots__ = ("by_namespace", "flat")

    def __init__(self) -> None:
        self.by_namespace: dict[str, dict[str, Stored]] = {}
        self.flat: dict[str, Stored] = {}

    def get(self, key: str) -> Stored | None:
        """The stored form under ``key``, or None."""
        ns, sep, name = key.partition("/")
        if sep:
            objs = self.by_namespace.get(ns)
            if objs is not None:
                found = objs.get(name)
                if found is not None:
                    return found
        return self.flat.get(key)

    def __getitem__(self, key: str) -> Stored:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        return sum(map(len, self.by_namespace.values())) + len(self.flat)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Objects) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def put(self, key: str, stored: Stored, namespace: str | None) -> None:
        """Keep ``stored`` under ``key``: in ``namespace``'s dict (``key`` is ``namespace/name``), or flat (None)."""
        if namespace is not None:
            objs = self.by_namespace.get(namespace)
            if objs is None:
                self.by_namespace[namespace] = objs = {}
            objs[key[len(namespace) + 1:]] = stored
            if self.flat:
                self.flat.pop(key, None)
        else:
            self.flat[key] = stored
            self._pop_namespaced(key)

    def pop(self, key: str) -> Stored | None:
        """Remove and return the stored form under ``key`` (None if absent)."""
        found = self._pop_namespaced(key)
        return found if found is not None else self.flat.pop(key, None)

    def _pop_namespaced(self, key: str) -> Stored | None:
        ns, sep, name = key.partition("/")
        if not sep:
            return None
        objs = self.by_namespace.get(ns)
        if objs is None:
            return None
        found = objs.pop(name, None)
        if not objs:
            del self.by_namespace[ns]
        return found

    def in_namespace_dict(self, key: str) -> bool:
        """Whether ``key`` is kept in its namespace's dict (not flat)."""
        return key not in self.flat and key in self

    def namespace_items(self, namespace: str) -> list[tuple[str, Stored]]:
        """``(key, stored form)`` of the objects in ``namespace``'s dict (a new list)."""
        objs = self.by_namespace.get(namespace)
        if not objs:
            return []
        prefix = namespace + "/"
        return [(prefix + name, v) for name, v in objs.items()]

    def items(self) -> Iterator[tuple[str, Stored]]:
        """Every ``(key, stored form)``: each namespace's in the order they came, then the flat ones."""
        for ns, objs in self.by_namespace.items():
            prefix = ns + "/"
            for name, v in objs.items():
                yield prefix + name, v
        yield from self.flat.items()

    def keys(self) -> Iterator[str]:
        """Every key, in :meth:`items`' order."""
        return (key for key, _ in self.items())

    __iter__ = keys

    def values(self) -> Iterator[Stored]:
        """Every stored form, in :meth:`items`' order (iterated in C: the informer lists them after each sync)."""
        return chain(chain.from_iterable(map(dict.values, self.by_namespace.values())), self.flat.values())


def _namespace_of(ns: Any) -> str | None:
    """The namespace whose dict of :class:`Objects` keeps an object of namespace ``ns`` (None: kept flat).

    Only for objects keyed by :func:`meta_namespace_key`.
    """
    return ns if type(ns) is str and ns and "/" not in ns else None


def _kept_by_namespace_dicts(key_func: Callable[[KubeObject], str], name: str, fn: IndexFunc | None) -> bool:
    """Whether index ``name`` (function ``fn``) of a store keyed by ``key_func`` is :class:`Objects`' namespace dicts.

    It is for the namespace index over the default keys: the objects kept in those dicts have no entries of
    their own in it (the flat ones do).
    """
    return name == NAMESPACE_INDEX and fn is namespace_index and key_func is meta_namespace_key


class ListBuffer:
    """A LIST (or WatchList's initial events) being received: objects kept in stored form as they arrive.

    Each object is transformed, keyed, indexed and encoded on arrival (the caller drops its page
    right after), so a sync holds at most one page of parsed objects besides the stored forms.
    :meth:`Indexer.replace_with` swaps the buffer in as the Indexer's whole content.

    Args:
        indexers: the Indexer's index functions when the buffer was made.
        transform: applied to each object first (None: kept as received).
        compact: keep ``bytes`` (:func:`encode`) instead of dicts.
        key_func: the storage key.
    """

    def __init__(self, indexers: dict[str, IndexFunc], *, transform: TransformFunc | None, compact: bool,
                 key_func: Callable[[KubeObject], str] = meta_namespace_key) -> None:
        self.indexers = dict(indexers)
        self.items = Objects()
        #: The index functions' keys by value; the namespace index holds only the objects kept flat when
        #: it is :func:`namespace_index` over :func:`meta_namespace_key` (see :class:`Objects`).
        self.indices: dict[str, dict[str, KeySet]] = {name: {} for name in indexers}
        self._transform = transform
        self._compact = compact
        self._key_func = key_func

    def __len__(self) -> int:
        return len(self.items)

    def add(self, obj: KubeObject) -> None:
        """Keep ``obj`` (a LIST item, or an ADDED/MODIFIED initial event): transform, index, encode."""
        self._add_page_general((obj,))

    def add_page(self, objs: Iterable[KubeObject], *, handed_over: bool = False) -> None:
        """:meth:`add` for every object of a page (one loop: this is the informer's per-object hot path).

        Args:
            objs: the page's objects, as received.
            handed_over: nothing else holds ``objs`` (:attr:`ListResult.handed_over
                <webhook.informer.types.ListResult.handed_over>`): the common informer's loop takes
                ``managedFields`` out of them for good instead of putting it back.
        """
        if (self._compact and self._transform is drop_managed_fields and self._key_func is meta_namespace_key
                and self.indexers == {NAMESPACE_INDEX: namespace_index}):
            self._add_page_compact(objs, handed_over)
        else:
            self._add_page_general(objs)

    def _add_page_general(self, objs: Iterable[KubeObject]) -> None:
        transform, items, compact = self._transform, self.items, self._compact
        default_key = self._key_func is meta_namespace_key
        indexed = [(_kept_by_namespace_dicts(self._key_func, name, fn), fn, self.indices[name])
                   for name, fn in self.indexers.items()]
        dumps = orjson.dumps
        for received in objs:
            obj = transform(received) if transform is not None else received
            if default_key:
                meta = obj.get("metadata") or {}
                ns = meta.get("namespace")
                key = f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))
                namespace = _namespace_of(ns)
            else:
                key = self._key_func(obj)
                namespace = None
            if key in items:
                self._unindex(key)
            for in_namespace_dict, fn, index in indexed:
                if in_namespace_dict and namespace is not None:
                    continue  # its namespace's dict of items indexes it
                for v in fn(obj):
                    keys = index.get(v)
                    if keys is None:
                        index[v] = {key: None}
                    else:
                        keys[key] = None
            # An exact-size copy (see encode()).
            items.put(key, dumps(obj) + _SPACE if compact else obj, namespace)

    def _add_page_compact(self, objs: Iterable[KubeObject], handed_over: bool) -> None:
        """:meth:`add_page` for the common informer (compact, namespace index only, drop_managed_fields).

        The same store as the general loop for less CPU (callgrind, the bench's client syncing 20k ConfigMaps
        of ~800 B from the fake API server: 15.4k -> 9.1k instructions per object on top of raw
        fetch+parse's 42.8k; see docs/performance.md):

        * ``managedFields`` is taken out of each received object's ``metadata`` only while it is encoded
          and put back right after (no await between), instead of copying the object and its metadata;
          the received objects keep their content (``managedFields`` becomes ``metadata``'s last key: a
          ListerWatcher may keep the objects it returns, as the local directory source does); from a page
          ``handed_over``, it is only taken out (putting it back costs 0.55k instructions per object:
          the dict grows again);
        * each object goes straight into its namespace's dict of :class:`Objects` under its name, which is
          also its namespace index entry: one dict insert per object and no key string made;
        * that dict is found once per run of one namespace (a LIST comes sorted by key); a key seen before
          in this buffer names the same namespace, so nothing is unindexed;
        * the four metadata keys are looked up with orjson's own key objects (:data:`_KEYS`).

        An object without a ``metadata`` mapping or a name, whose name or namespace is not a string, whose
        namespace has a ``/``, or whose key this buffer holds flat, goes through the general loop.
        """
        by_namespace, flat = self.items.by_namespace, self.items.flat
        dumps, space, missing = orjson.dumps, _SPACE, _MISSING
        k_metadata, k_name, k_namespace, k_managed = _KEYS
        last_ns: Any = None
        objs_of_ns: dict[str, Stored] = {}
        for obj in objs:
            try:
                meta = obj[k_metadata]
                key = meta[k_name]  # the name, in the namespace's dict
                ns = meta.get(k_namespace)
                if ns:
                    if ns != last_ns:  # a LIST comes sorted by key: namespaces come in runs
                        if "/" in ns:  # TypeError if ns is not a string
                            raise TypeError("kept flat")
                        found = by_namespace.get(ns)
                        if found is None:
                            by_namespace[ns] = found = {}
                        objs_of_ns, last_ns = found, ns
                    if key.__class__ is not str or (flat and f"{ns}/{key}" in flat):
                        raise TypeError("kept flat")
                    kept = objs_of_ns
                else:
                    key = str(key)
                    if "/" in key:
                        raise TypeError("may be a namespaced key")
                    kept = flat
            except (KeyError, TypeError):  # formatted and kept as the general loop does
                self._add_page_general((obj,))
                last_ns = None  # it may have dropped the run's dict (a key it moved out was the dict's last)
                continue
            if handed_over:
                meta.pop(k_managed, None)
                kept[key] = dumps(obj) + space
                continue
            managed = meta.pop(k_managed, missing)
            if managed is missing:
                kept[key] = dumps(obj) + space
            else:
                try:
                    kept[key] = dumps(obj) + space
                finally:
                    meta[k_managed] = managed

    def delete(self, obj: KubeObject) -> None:
        """Forget ``obj`` (a DELETED event among WatchList's initial events)."""
        if self._transform is not None:
            obj = self._transform(obj)
        key = self._key_func(obj)
        if key in self.items:
            self._unindex(key)
            self.items.pop(key)

    def _unindex(self, key: str) -> None:
        old = decode(self.items[key])
        in_namespace_dict = self.items.in_namespace_dict(key)
        for name, fn in self.indexers.items():
            if in_namespace_dict and _kept_by_namespace_dicts(self._key_func, name, fn):
                continue
            index = self.indices[name]
            for v in fn(old):
                keys = index.get(v)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del index[v]


class Indexer:
    """A Store with secondary indices (client-go ``cache.Indexer`` over ``threadSafeMap``).

    ``get_by_key`` is two dict lookups (the key's namespace, then its name; see :class:`Objects`) plus one
    JSON parse when compact; ``by_index`` one or two dict lookups plus the size of the result. Empty index
    sets are dropped (kubernetes#84959).

    Args:
        indexers: extra index functions (``namespace`` is always there).
        key_func: the storage key (``namespace/name``).
        compact: keep each object as compact JSON ``bytes`` (see the module docstring); every read
            returns a new dict then.
    """

    def __init__(self, indexers: dict[str, IndexFunc] | None = None, *,
                 key_func: Callable[[KubeObject], str] = meta_namespace_key, compact: bool = False) -> None:
        self._key_func = key_func
        self.compact = compact
        self._items = Objects()
        self._indexers: dict[str, IndexFunc] = {NAMESPACE_INDEX: namespace_index}
        self._indexers.update(indexers or {})
        self._indices: dict[str, dict[str, KeySet]] = {name: {} for name in self._indexers}

    # -- reads -------------------------------------------------------------
    def get_by_key(self, key: str) -> KubeObject | None:
        """The object stored under ``key``, or None."""
        v = self._items.get(key)
        if v is None or not self.compact:
            return v  # type: ignore[return-value]
        return decode(v)

    def get(self, obj: KubeObject) -> KubeObject | None:
        """The stored object with the same key as ``obj``."""
        return self.get_by_key(self._key_func(obj))

    def get_stored(self, key: str) -> Stored | None:
        """The stored form under ``key`` (the dict, or its JSON when compact), or None."""
        return self._items.get(key)

    def list_keys(self) -> builtins.list[str]:
        """Every key (a new list)."""
        return list(self._items.keys())

    def list(self) -> builtins.list[KubeObject]:
        """Every object (a new list; O(n): not for the request path)."""
        if self.compact:
            return [decode(v) for v in self._items.values()]
        return list(self._items.values())  # type: ignore[arg-type]

    def list_stored(self) -> builtins.list[tuple[str, Stored]]:
        """Every ``(key, stored form)`` (a new list of references: nothing is decoded)."""
        return list(self._items.items())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def _derived_ns(self) -> bool:
        """Whether the namespace dicts of :class:`Objects` are (with the flat objects' entries) the namespace index."""
        return _kept_by_namespace_dicts(self._key_func, NAMESPACE_INDEX, self._indexers.get(NAMESPACE_INDEX))

    def _index_entries(self, index_name: str, value: str) -> builtins.list[tuple[str, Stored]]:
        keys = self._indices[index_name].get(value, ())
        found = [(k, self._items[k]) for k in keys]
        if index_name == NAMESPACE_INDEX and self._derived_ns() and type(value) is str:
            found[:0] = self._items.namespace_items(value)
        return found

    def index_keys(self, index_name: str, value: str) -> frozenset[str]:
        """Keys whose ``index_name`` values include ``value``.

        Raises:
            KeyError: no such index.
        """
        keys = self._indices[index_name].get(value, ())
        if index_name == NAMESPACE_INDEX and self._derived_ns() and type(value) is str:
            return frozenset(k for k, _ in self._items.namespace_items(value)).union(keys)
        return frozenset(keys)

    def by_index(self, index_name: str, value: str) -> builtins.list[KubeObject]:
        """Objects whose ``index_name`` values include ``value``.

        Raises:
            KeyError: no such index.
        """
        found = self._index_entries(index_name, value)
        if self.compact:
            return [decode(v) for _, v in found]
        return [v for _, v in found]  # type: ignore[misc]

    def index_values(self, index_name: str) -> builtins.list[str]:
        """Every indexed value of ``index_name`` that has at least one object."""
        values = list(self._indices[index_name])
        if index_name == NAMESPACE_INDEX and self._derived_ns():
            values.extend(ns for ns in self._items.by_namespace if ns not in self._indices[index_name])
        return values

    @property
    def indexers(self) -> dict[str, IndexFunc]:
        """The index functions by name (a copy)."""
        return dict(self._indexers)

    # -- writes (single writer) ----------------------------------------------
    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Add indices and index every existing object into them.

        Raises:
            IndexConflictError: a name is already an index.
        """
        clash = set(indexers) & set(self._indexers)
        if clash:
            raise IndexConflictError(f"indexer(s) already exist: {sorted(clash)}")
        objects = [(k, decode(v), k not in self._items.flat) for k, v in self._items.items()]
        computed = {name: [(k, fn(obj)) for k, obj, in_namespace_dict in objects
                           if not (in_namespace_dict and _kept_by_namespace_dicts(self._key_func, name, fn))]
                    for name, fn in indexers.items()}
        for name, pairs in computed.items():
            index: dict[str, KeySet] = {}
            for key, values in pairs:
                for v in values:
                    index.setdefault(v, {})[key] = None
            self._indexers[name] = indexers[name]
            self._indices[name] = index

    def remove_indexer(self, name: str) -> None:
        """Drop the index ``name`` (no-op when absent); objects stay (e.g. a policy stopped using it)."""
        self._indexers.pop(name, None)
        self._indices.pop(name, None)

    def has_index(self, name: str) -> bool:
        """Whether ``name`` is an index."""
        return name in self._indexers

    def _values(self, obj: KubeObject, in_namespace_dict: bool) -> dict[str, builtins.list[str]]:
        # Computed before any mutation, so a failing IndexFunc leaves the store intact. An object in its
        # namespace's dict of items has no separate namespace index entry (see Objects).
        skip = NAMESPACE_INDEX if in_namespace_dict and self._derived_ns() else None
        return {name: fn(obj) for name, fn in self._indexers.items() if name != skip}

    def _namespace_of(self, obj: KubeObject) -> str | None:
        if self._key_func is not meta_namespace_key:
            return None
        return _namespace_of((obj.get("metadata") or {}).get("namespace"))

    def _unindex(self, key: str, values: dict[str, builtins.list[str]]) -> None:
        for name, vals in values.items():
            index = self._indices[name]
            for v in vals:
                keys = index.get(v)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del index[v]

    def _index(self, key: str, values: dict[str, builtins.list[str]]) -> None:
        for name, vals in values.items():
            index = self._indices[name]
            for v in vals:
                index.setdefault(v, {})[key] = None

    def upsert(self, obj: KubeObject) -> Stored | None:
        """Add or replace ``obj``; returns the previous stored form under its key, if any."""
        key = self._key_func(obj)
        namespace = self._namespace_of(obj)
        new_values = self._values(obj, namespace is not None)
        old = self._items.get(key)
        if old is not None:
            old_values = self._values(decode(old), self._items.in_namespace_dict(key))
            if old_values != new_values:
                self._unindex(key, old_values)
                self._index(key, new_values)
        else:
            self._index(key, new_values)
        self._items.put(key, encode(obj) if self.compact else obj, namespace)
        return old

    def delete(self, obj_or_key: KubeObject | str) -> Stored | None:
        """Remove by object or key; returns the removed stored form, or None if absent."""
        key = obj_or_key if isinstance(obj_or_key, str) else self._key_func(obj_or_key)
        in_namespace_dict = self._items.in_namespace_dict(key)
        old = self._items.pop(key)
        if old is not None:
            self._unindex(key, self._values(decode(old), in_namespace_dict))
        return old

    def new_buffer(self, transform: TransformFunc | None = None) -> ListBuffer:
        """An empty :class:`ListBuffer` with this Indexer's index functions and stored form."""
        return ListBuffer(self._indexers, transform=transform, compact=self.compact, key_func=self._key_func)

    def replace_with(self, buffer: ListBuffer) -> None:
        """Make ``buffer`` the whole content in one step (indices built as objects arrived).

        Indices added to this Indexer after the buffer was made are computed here; indices
        removed since are dropped.
        """
        indices = {name: idx for name, idx in buffer.indices.items() if name in self._indexers}
        missing = {name: fn for name, fn in self._indexers.items() if name not in indices}
        if missing:
            for name in missing:
                indices[name] = {}
            for key, stored in buffer.items.items():
                obj = decode(stored)
                in_namespace_dict = key not in buffer.items.flat
                for name, fn in missing.items():
                    if in_namespace_dict and _kept_by_namespace_dicts(self._key_func, name, fn):
                        continue
                    for v in fn(obj):
                        indices[name].setdefault(v, {})[key] = None
        self._items, self._indices = buffer.items, indices

    def replace(self, objs: Iterable[KubeObject]) -> None:
        """Replace the whole content: new items and indices are built aside, then swapped in one step."""
        buffer = self.new_buffer()
        buffer.add_page(objs)
        self.replace_with(buffer)

    def snapshot(self) -> dict[str, Any]:
        """``{key: object}`` copy of the mapping, objects decoded (tests and debugging)."""
        return {k: decode(v) for k, v in self._items.items()}
