"""How the engine reads the informer caches: a Protocol, plus an in-memory version.

The engine never talks to the API server; it reads Namespaces, ConfigMaps and
the objects of ``spec.references`` through :class:`Lookups`. The server implements it over the informers'
Indexers (O(1) ``get_by_key``/``by_index``); ``tollgate test`` and unit tests
use :class:`InMemoryLookups`. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from webhook.policy.model import Reference, ReferenceIndex
from webhook.policy.reference_indexes import index_values
from webhook.policy.selectors import LabelSelector

#: Cache names ``is_synced`` is asked about.
NAMESPACES = "namespaces"
CONFIGMAPS = "configmaps"
POLICIES = "policies"


class Lookups(Protocol):
    """Read-only access to the cached objects a policy may read.

    Returned objects are shared with the cache: callers must not mutate them.
    """

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        """The Namespace named ``name``, or None."""
        ...

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap ``namespace/name``, or None."""
        ...

    def list_configmaps(self, namespace: str | None, selector: LabelSelector) -> list[dict[str, Any]]:
        """ConfigMaps selected by ``selector``, in ``namespace`` or (None) all namespaces."""
        ...

    def get_object(self, reference: Reference, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached object ``namespace/name`` (``namespace`` ``""`` for cluster-scoped) of ``reference``, or None."""
        ...

    def list_objects(self, reference: Reference, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Objects of ``reference`` in ``namespace`` (``""``: all) with every ``labels`` pair, by namespace/name."""
        ...

    def by_index(self, reference: Reference, index: ReferenceIndex, value: str) -> list[dict[str, Any]]:
        """Objects of ``reference`` whose ``index`` values include ``value``, sorted by namespace/name.

        Raises:
            LookupError: the index is not installed on the cache (yet).
        """
        ...

    def is_synced(self, cache: str) -> bool:
        """Whether a cache has synced: ``namespaces``, ``configmaps``, ``policies`` or a :attr:`Reference.cache`.

        A reference cache that does not run has not synced.
        """
        ...


def _meta_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def has_labels(obj: dict[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether ``obj``'s ``metadata.labels`` hold every ``labels`` pair (a matchLabels selector)."""
    if not labels:
        return True
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


class InMemoryLookups:
    """A :class:`Lookups` over plain lists, always synced unless told otherwise.

    Args:
        namespaces: Namespace objects.
        configmaps: ConfigMap objects (namespace ``default`` when unset).
        objects: reference → its objects (``tollgate test``'s ``references`` files).
        unsynced: cache names that answer not synced.
    """

    def __init__(
        self,
        *,
        namespaces: Iterable[dict[str, Any]] = (),
        configmaps: Iterable[dict[str, Any]] = (),
        objects: Mapping[Reference, Iterable[dict[str, Any]]] | None = None,
        unsynced: Iterable[str] = (),
    ) -> None:
        self._namespaces = {ns["metadata"]["name"]: ns for ns in namespaces}
        self._configmaps = {
            (cm["metadata"].get("namespace", "default"), cm["metadata"]["name"]): cm for cm in configmaps
        }
        self._objects = {ref: {_meta_key(o): o for o in objs} for ref, objs in (objects or {}).items()}
        self._unsynced = frozenset(unsynced)

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        """See :meth:`Lookups.get_namespace`."""
        return self._namespaces.get(name)

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`Lookups.get_configmap`."""
        return self._configmaps.get((namespace, name))

    def list_configmaps(self, namespace: str | None, selector: LabelSelector) -> list[dict[str, Any]]:
        """See :meth:`Lookups.list_configmaps`; sorted by namespace/name."""
        return [
            cm
            for (ns, _), cm in sorted(self._configmaps.items())
            if (namespace is None or ns == namespace) and selector.matches_object(cm)
        ]

    def get_object(self, reference: Reference, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`Lookups.get_object`."""
        return self._objects.get(reference, {}).get((namespace, name))

    def list_objects(self, reference: Reference, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """See :meth:`Lookups.list_objects`."""
        return [o for (ns, _), o in sorted(self._objects.get(reference, {}).items())
                if (not namespace or ns == namespace) and has_labels(o, labels)]

    def by_index(self, reference: Reference, index: ReferenceIndex, value: str) -> list[dict[str, Any]]:
        """See :meth:`Lookups.by_index`; index values computed per call (:func:`index_values`)."""
        return [o for _, o in sorted(self._objects.get(reference, {}).items()) if value in index_values(index, o)]

    def is_synced(self, cache: str) -> bool:
        """See :meth:`Lookups.is_synced`; every reference given (even with no objects) is synced."""
        return cache not in self._unsynced
