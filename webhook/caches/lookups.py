"""The policy engine's :class:`~webhook.policy.lookups.Lookups` over informer Indexers.

Every read is a dict lookup on the informers' caches (``get_by_key`` or the
``namespace`` index): the request path never calls the API server.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from webhook.caches.decoded import DecodedMemo
from webhook.informer import NAMESPACE_INDEX, SharedInformer
from webhook.policy import lookups as caches
from webhook.policy.lookups import has_labels
from webhook.policy.model import Reference, ReferenceIndex
from webhook.policy.selectors import LabelSelector


def _by_name(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    objs.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    return objs


class InformerLookups:
    """Lookups backed by the Namespace, ConfigMap and reference informers.

    Args:
        namespaces: the Namespace informer.
        configmaps: the ConfigMap informer (label-filtered, e.g. ``tollgate.dev/params=true``).
        policies_synced: whether every policy informer has synced.
        references: the running informer of a ``spec.references`` entry, or None
            (e.g. :meth:`webhook.caches.references.ReferenceInformers.informer`).
    """

    def __init__(self, namespaces: SharedInformer, configmaps: SharedInformer,
                 policies_synced: Callable[[], bool],
                 references: Callable[[Reference], SharedInformer | None] = lambda _ref: None) -> None:
        self._namespaces = namespaces
        self._configmaps = configmaps
        self._policies_synced = policies_synced
        self._references = references
        #: Reference objects are handed to CEL's Python functions: one dict per stored version
        #: (:mod:`webhook.caches.decoded`: the binding keeps a reference to each).
        self.decoded = DecodedMemo()

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
        return _by_name([o for o in objs if selector.matches_object(o)])

    def get_object(self, reference: Reference, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached object of a reference (key ``namespace/name``, or ``name`` when cluster-scoped)."""
        inf = self._references(reference)
        if inf is None:
            return None
        stored = inf.indexer.get_stored(f"{namespace}/{name}" if namespace else name)
        return None if stored is None else self.decoded.decode(stored)

    def list_objects(self, reference: Reference, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Cached objects of a reference with ``labels`` (via the namespace index when ``namespace`` is set)."""
        inf = self._references(reference)
        if inf is None:
            return []
        idx = inf.indexer
        keys = idx.index_keys(NAMESPACE_INDEX, namespace) if namespace else idx.list_keys()
        return _by_name([o for o in self._decoded(idx, keys) if has_labels(o, labels)])

    def by_index(self, reference: Reference, index: ReferenceIndex, value: str) -> list[dict[str, Any]]:
        """The Indexer's ``ByIndex`` on the index ``webhook.caches.references`` installed for ``index``.

        Raises:
            LookupError: the cache does not run, or the index is not installed yet.
        """
        inf = self._references(reference)
        if inf is None or not inf.indexer.has_index(index.indexer_name):
            raise LookupError(f"index {index.name} of {reference.cache} is not ready")
        return _by_name(self._decoded(inf.indexer, inf.indexer.index_keys(index.indexer_name, value)))

    def _decoded(self, indexer: Any, keys: Iterable[str]) -> list[dict[str, Any]]:
        found = (indexer.get_stored(k) for k in keys)
        return [self.decoded.decode(s) for s in found if s is not None]

    def is_synced(self, cache: str) -> bool:
        """``namespaces`` | ``configmaps`` | ``policies`` | a reference's ``apiVersion/resource``."""
        if cache == caches.NAMESPACES:
            return self._namespaces.has_synced()
        if cache == caches.CONFIGMAPS:
            return self._configmaps.has_synced()
        if cache == caches.POLICIES:
            return self._policies_synced()
        inf = self._references(_reference_of(cache))
        return inf is not None and inf.has_synced()


@functools.lru_cache(maxsize=4096)
def _reference_of(cache: str) -> Reference:
    """The reference a cache name (``apiVersion/resource``) stands for (asked per policy per request)."""
    api_version, _, resource = cache.rpartition("/")
    return Reference(api_version, resource)
