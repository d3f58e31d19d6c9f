"""The policy engine's :class:`~webhook.policy.lookups.Lookups` over informer Indexers.

Every read is a dict lookup on the informers' caches (``get_by_key`` or the
``namespace`` index): the request path never calls the API server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.informer import NAMESPACE_INDEX, SharedInformer
from webhook.policy.selectors import LabelSelector


class InformerLookups:
    """Lookups backed by the Namespace and ConfigMap informers.

    Args:
        namespaces: the Namespace informer.
        configmaps: the ConfigMap informer (label-filtered, e.g. ``tollgate.dev/params=true``).
        policies_synced: whether every policy informer has synced.
    """

    def __init__(self, namespaces: SharedInformer, configmaps: SharedInformer,
                 policies_synced: Callable[[], bool]) -> None:
        self._namespaces = namespaces
        self._configmaps = configmaps
        self._policies_synced = policies_synced

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        """The cached Namespace ``name``."""
        return self._namespaces.indexer.get_by_key(name)

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached ConfigMap ``namespace/name``."""
        return self._configmaps.indexer.get_by_key(f"{namespace}/{name}")

    def list_configmaps(self, namespace: str | None, selector: LabelSelector) -> list[dict[str, Any]]:
        """Cached ConfigMaps matching ``selector`` (via the namespace index when ``namespace`` is set)."""
        idx = self._configmaps.indexer
        objs = idx.by_index(NAMESPACE_INDEX, namespace) if namespace is not None else idx.list()
        found = [o for o in objs if selector.matches_object(o)]
        found.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return found

    def is_synced(self, cache: str) -> bool:
        """``namespaces`` | ``configmaps`` | ``policies``."""
        if cache == "namespaces":
            return self._namespaces.has_synced()
        if cache == "configmaps":
            return self._configmaps.has_synced()
        return self._policies_synced()
