"""An in-process stand-in for the API server at the ListerWatcher seam.

One resourceVersion counter shared by every resource, as etcd has; LIST
returns the current objects at the current RV; WATCH yields every change with
an RV above the requested one, then waits for more. It exercises the real
Reflector, Indexer and handlers without sockets. (It is not the HTTP fake API
server of docs/design/informer.md §D: no pagination, compaction or fault injection.)
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

from webhook.informer.store import meta_namespace_key
from webhook.informer.types import ListOptions, ListResult, WatchEvent


class MemoryCluster:
    """Objects by resource name, with a change history for watches."""

    def __init__(self) -> None:
        self.rv = 0
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        self._changed = asyncio.Condition()
        self.requests: list[tuple[str, str, ListOptions]] = []

    async def _bump(self, resource: str, etype: str, obj: dict[str, Any]) -> None:
        async with self._changed:
            self.history.append((self.rv, resource, etype, obj))
            self._changed.notify_all()

    async def apply(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace ``obj``; bumps the RV (and ``generation`` when ``spec`` changed)."""
        self.rv += 1
        obj = copy.deepcopy(obj)
        store = self.objects.setdefault(resource, {})
        key = meta_namespace_key(obj)
        old = store.get(key)
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        old_gen = (old or {}).get("metadata", {}).get("generation", 0)
        meta["generation"] = old_gen + 1 if old is None or old.get("spec") != obj.get("spec") else old_gen
        store[key] = obj
        await self._bump(resource, "MODIFIED" if old else "ADDED", obj)
        return obj

    async def delete(self, resource: str, key: str) -> None:
        """Delete; the DELETED event carries the last state stamped with the deletion RV."""
        self.rv += 1
        obj = copy.deepcopy(self.objects[resource].pop(key))
        obj["metadata"]["resourceVersion"] = str(self.rv)
        await self._bump(resource, "DELETED", obj)

    def lister_watcher(self, resource: str) -> MemoryListerWatcher:
        """A ListerWatcher for one resource."""
        return MemoryListerWatcher(self, resource)


class MemoryListerWatcher:
    """:class:`~webhook.informer.types.ListerWatcher` over a :class:`MemoryCluster`."""

    def __init__(self, cluster: MemoryCluster, resource: str) -> None:
        self.cluster = cluster
        self.resource = resource

    async def list(self, options: ListOptions) -> ListResult:
        self.cluster.requests.append(("list", self.resource, options))
        items = list(self.cluster.objects.get(self.resource, {}).values())
        return ListResult(items=items, resource_version=str(self.cluster.rv))

    async def watch(self, options: ListOptions) -> AsyncIterator[WatchEvent]:  # type: ignore[override]
        self.cluster.requests.append(("watch", self.resource, options))
        since = int(options.resource_version or 0)
        while True:
            for rv, resource, etype, obj in list(self.cluster.history):
                if rv > since:
                    since = rv
                    if resource == self.resource:
                        yield WatchEvent(etype, obj)
            async with self.cluster._changed:
                await self.cluster._changed.wait_for(lambda: self.cluster.rv > since)
