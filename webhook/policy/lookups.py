"""How the engine reads the informer caches: a Protocol, plus an in-memory version.

The engine never talks to the API server; it reads Namespaces and ConfigMaps
through :class:`Lookups`. The server implements it over the informers'
Indexers (O(1) ``get_by_key``/``by_index``); ``tollgate test`` and unit tests
use :class:`InMemoryLookups`. Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

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

    def is_synced(self, cache: str) -> bool:
        """Whether the named cache (``namespaces``, ``configmaps``, ``policies``) has synced."""
        ...


class InMemoryLookups:
    """A :class:`Lookups` over plain lists, always synced unless told otherwise."""

    def __init__(
        self,
        *,
        namespaces: Iterable[dict[str, Any]] = (),
        configmaps: Iterable[dict[str, Any]] = (),
        unsynced: Iterable[str] = (),
    ) -> None:
        self._namespaces = {ns["metadata"]["name"]: ns for ns in namespaces}
        self._configmaps = {
            (cm["metadata"].get("namespace", "default"), cm["metadata"]["name"]): cm for cm in configmaps
        }
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

    def is_synced(self, cache: str) -> bool:
        """See :meth:`Lookups.is_synced`."""
        return cache not in self._unsynced
