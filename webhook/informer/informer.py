"""SharedInformer: Reflector + Indexer + event handlers (client-go ``sharedIndexInformer``).

Contract, as client-go's SharedInformer doc states it:

* eventual consistency with the API server; per-object order of
  notifications is kept for each handler;
* the Indexer is updated **before** handlers are told (``processDeltas``);
* every handler registration has its own unbounded queue and task, so a slow
  or raising handler blocks nothing else (exceptions are logged);
* a relist notifies only real changes (an unchanged resourceVersion is a
  sync, delivered only as resync) and delivers ``DeletedFinalStateUnknown``
  tombstones for objects deleted while disconnected;
* resync re-delivers ``on_update(obj, obj)`` to handlers that asked for it,
  without any API call;
* :meth:`has_synced` turns true once the first LIST is applied and never
  reverts; a registration's ``has_synced`` also waits until its initial adds
  were delivered; handlers added after start get synthetic adds;
* objects are shared and read-only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from webhook.aio import cancel_and_wait, yield_to_loop
from webhook.informer.reflector import Reflector, ReflectorOptions
from webhook.informer.store import (
    DeletedFinalStateUnknown,
    Indexer,
    IndexFunc,
    TransformFunc,
    drop_managed_fields,
    meta_namespace_key,
)
from webhook.informer.types import KubeObject, ListerWatcher

log = logging.getLogger("tollgate.informer")


class ResourceEventHandler(Protocol):
    """What an informer notifies (client-go ``ResourceEventHandler``)."""

    def on_add(self, obj: KubeObject, is_in_initial_list: bool) -> Any:
        """An object appeared (``is_in_initial_list`` for the first LIST and synthetic adds)."""

    def on_update(self, old: KubeObject, new: KubeObject) -> Any:
        """An object changed (or a resync: ``old is new``)."""

    def on_delete(self, obj: KubeObject | DeletedFinalStateUnknown) -> Any:
        """An object was deleted; a tombstone if the deletion was missed."""


@dataclass(frozen=True, slots=True)
class ResourceEventHandlerFuncs:
    """Adapter from plain callables (client-go ``ResourceEventHandlerFuncs``); None means ignore.

    Callables may be sync or async; async ones are awaited in the handler's own task.
    """

    add: Callable[[KubeObject, bool], Any] | None = None
    update: Callable[[KubeObject, KubeObject], Any] | None = None
    delete: Callable[[KubeObject | DeletedFinalStateUnknown], Any] | None = None

    def on_add(self, obj: KubeObject, is_in_initial_list: bool) -> Any:
        """See :class:`ResourceEventHandler`."""
        return self.add(obj, is_in_initial_list) if self.add else None

    def on_update(self, old: KubeObject, new: KubeObject) -> Any:
        """See :class:`ResourceEventHandler`."""
        return self.update(old, new) if self.update else None

    def on_delete(self, obj: KubeObject | DeletedFinalStateUnknown) -> Any:
        """See :class:`ResourceEventHandler`."""
        return self.delete(obj) if self.delete else None


@dataclass(frozen=True, slots=True)
class AddNotification:
    """client-go ``addNotification``: ``obj`` appeared (``is_in_initial_list`` during the first sync)."""

    obj: Any
    is_in_initial_list: bool = False


@dataclass(frozen=True, slots=True)
class UpdateNotification:
    """client-go ``updateNotification``: ``old`` became ``new`` (equal objects on a resync)."""

    old: Any
    new: Any


@dataclass(frozen=True, slots=True)
class DeleteNotification:
    """client-go ``deleteNotification``: ``obj`` was deleted (a tombstone when its final state is unknown)."""

    obj: Any


Notification = AddNotification | UpdateNotification | DeleteNotification


#: Seconds a handler may run notifications back to back before its task yields the event loop.
HANDLER_TIME_SLICE = 0.002


class HandlerRegistration:
    """One handler's queue and task (client-go ``processorListener``)."""

    def __init__(self, handler: ResourceEventHandler, *, resync_period: float | None, name: str) -> None:
        self.handler = handler
        self.resync_period = resync_period
        self.next_resync = time.monotonic() + resync_period if resync_period else None
        self._queue: asyncio.Queue[Notification | None] = asyncio.Queue()
        self._pending_initial = 0
        self._undelivered = 0
        self._initial_done = False
        self._name = name
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the consumer task (on the running loop); idempotent."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"informer-handler-{self._name}")

    def has_synced(self) -> bool:
        """True once every initial add queued for this handler was delivered."""
        return self._initial_done and self._pending_initial == 0

    def push(self, notification: Notification) -> None:
        """Queue a notification for the handler (delivered in order by its task)."""
        if isinstance(notification, AddNotification) and notification.is_in_initial_list:
            self._pending_initial += 1
        self._undelivered += 1
        self._queue.put_nowait(notification)

    @property
    def undelivered(self) -> int:
        """Notifications queued or being handled right now (0 when the handler has caught up)."""
        return self._undelivered

    def mark_initial_queued(self) -> None:
        """Every initial add has been queued; ``has_synced`` turns true once they are delivered."""
        self._initial_done = True

    async def _run(self) -> None:
        # time.perf_counter, not loop.time(): uvloop's clock is cached per loop iteration and would not advance.
        clock = time.perf_counter
        slice_started = clock()
        while True:
            if clock() - slice_started > HANDLER_TIME_SLICE:
                # ``queue.get()`` does not suspend while notifications are queued: without this, a burst of
                # costly notifications (50 policy edits, milliseconds of compiling each) would hold the event
                # loop for their sum. Cheap ones are still delivered in one turn.
                await yield_to_loop()
                slice_started = clock()
            idle = self._queue.empty()
            item = await self._queue.get()
            if idle:  # waited for it: a new slice starts now
                slice_started = clock()
            if item is None:
                return
            try:
                if isinstance(item, AddNotification):
                    result = self.handler.on_add(item.obj, item.is_in_initial_list)
                elif isinstance(item, UpdateNotification):
                    result = self.handler.on_update(item.old, item.new)
                else:
                    result = self.handler.on_delete(item.obj)
                if asyncio.iscoroutine(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: event handler failed on %s", self._name, type(item).__name__)
            finally:
                self._undelivered -= 1
                if isinstance(item, AddNotification) and item.is_in_initial_list:
                    self._pending_initial -= 1

    async def stop(self) -> None:
        """Cancel the consumer task and wait for it (pending notifications are dropped)."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None


class SharedInformer:
    """List/watch one resource into an :class:`Indexer` and fan events out to handlers.

    Args:
        lister_watcher: where objects come from.
        name: for logs and metrics, e.g. ``"v1/configmaps"``.
        indexers: extra index functions (``namespace`` is always there).
        transform: applied to every object on ingest (default drops ``managedFields``).
        resync_check_period: seconds between resync checks (0 disables resync).
        reflector_options: selectors, watch timeout, backoff.
    """

    def __init__(self, lister_watcher: ListerWatcher, *, name: str = "",
                 indexers: dict[str, IndexFunc] | None = None,
                 transform: TransformFunc | None = drop_managed_fields,
                 resync_check_period: float = 0.0,
                 reflector_options: ReflectorOptions | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        self.name = name
        self.indexer = Indexer(indexers)
        self._transform = transform
        self._handlers: list[HandlerRegistration] = []
        self._synced = asyncio.Event()
        self._initial_list_done = False
        self._resync_check_period = resync_check_period
        self.reflector = Reflector(lister_watcher, self, name=name, options=reflector_options, sleep=sleep)
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self.events_applied = 0

    # -- public ---------------------------------------------------------------
    def add_event_handler(self, handler: ResourceEventHandler, *,
                          resync_period: float | None = None) -> HandlerRegistration:
        """Register a handler; after start it first receives synthetic adds for the whole store."""
        reg = HandlerRegistration(handler, resync_period=resync_period, name=self.name)
        self._handlers.append(reg)
        if self._started:
            reg.start()
        if self._initial_list_done:
            for obj in self.indexer.list():
                reg.push(AddNotification(obj, True))
            reg.mark_initial_queued()
        return reg

    def has_synced(self) -> bool:
        """True once the first complete LIST was applied to the store (never reverts)."""
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> bool:
        """Wait until synced; returns False on timeout (seconds)."""
        try:
            async with asyncio.timeout(timeout):
                await self._synced.wait()
        except TimeoutError:
            return False
        return True

    @property
    def last_sync_resource_version(self) -> str:
        """The resourceVersion the cache reflects."""
        return self.reflector.last_sync_resource_version

    def cache_age(self) -> float | None:
        """Seconds since the last list, event or bookmark; None before the first list."""
        t = self.reflector.last_event_time
        return None if t is None else time.monotonic() - t

    async def start(self) -> None:
        """Start the reflector, handler tasks and resync loop (returns at once)."""
        if self._started:
            return
        self._started = True
        for reg in self._handlers:
            reg.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.reflector.run(), name=f"reflector-{self.name}"))
        if self._resync_check_period > 0:
            self._tasks.append(loop.create_task(self._resync_loop(), name=f"resync-{self.name}"))

    async def stop(self) -> None:
        """Stop every task; the watch connection is closed by cancelling the reflector."""
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks.clear()
        for reg in self._handlers:
            await reg.stop()
        self._started = False

    # -- ReflectorStore ---------------------------------------------------------
    def _ingest(self, obj: KubeObject) -> KubeObject:
        return self._transform(obj) if self._transform is not None else obj

    def _notify(self, notification: Notification) -> None:
        for reg in self._handlers:
            reg.push(notification)

    def replace(self, items: list[KubeObject], resource_version: str) -> None:
        """Apply a full LIST: adds, real updates, and tombstones for vanished keys."""
        new_items = [self._ingest(o) for o in items]
        old_items = self.indexer.snapshot()
        initial = not self._initial_list_done
        self.indexer.replace(new_items)
        new_keys = set()
        for obj in new_items:
            key = meta_namespace_key(obj)
            new_keys.add(key)
            old = old_items.get(key)
            if old is None:
                self._notify(AddNotification(obj, initial))
            elif _rv(old) != _rv(obj):
                self._notify(UpdateNotification(old, obj))
            # An unchanged resourceVersion is a sync: handlers hear of it only on resync.
        for key, old in old_items.items():
            if key not in new_keys:
                self._notify(DeleteNotification(DeletedFinalStateUnknown(key, old)))
        self.events_applied += 1
        if initial:
            self._initial_list_done = True
            for reg in self._handlers:
                reg.mark_initial_queued()
            self._synced.set()

    def add(self, obj: KubeObject) -> None:
        """Watch ADDED (an update if the key is already known)."""
        obj = self._ingest(obj)
        old = self.indexer.upsert(obj)
        self.events_applied += 1
        if old is None:
            self._notify(AddNotification(obj, False))
        else:
            self._notify(UpdateNotification(old, obj))

    def update(self, obj: KubeObject) -> None:
        """Watch MODIFIED."""
        self.add(obj)

    def delete(self, obj: KubeObject) -> None:
        """Watch DELETED (the last state, stamped with the deletion RV)."""
        obj = self._ingest(obj)
        self.indexer.delete(obj)
        self.events_applied += 1
        self._notify(DeleteNotification(obj))

    def bookmark(self, resource_version: str) -> None:
        """RV progress only; nothing to notify."""

    def handlers_idle(self) -> bool:
        """True when every handler has been told of everything applied to the store so far."""
        return all(r.undelivered == 0 for r in self._handlers)

    # -- resync ------------------------------------------------------------------
    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self._resync_check_period)
            now = time.monotonic()
            due = [r for r in self._handlers if r.next_resync is not None and now >= r.next_resync]
            if not due or not self.has_synced():
                continue
            for obj in self.indexer.list():
                for reg in due:
                    reg.push(UpdateNotification(obj, obj))
            for reg in due:
                assert reg.resync_period is not None
                reg.next_resync = now + reg.resync_period


def _rv(obj: KubeObject) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


@dataclass(frozen=True, slots=True)
class InformerKey:
    """Identity of a shared informer: one LIST/WATCH per distinct key."""

    resource: str
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


class SharedInformerFactory:
    """Hands out one SharedInformer per :class:`InformerKey` (client-go ``SharedInformerFactory``).

    Args:
        lister_watcher_for: builds the ListerWatcher for a key.
        reflector_options: defaults for every informer (selectors come from the key).
    """

    def __init__(self, lister_watcher_for: Callable[[InformerKey], ListerWatcher], *,
                 reflector_options: ReflectorOptions | None = None, resync_check_period: float = 0.0) -> None:
        self._lw_for = lister_watcher_for
        self._options = reflector_options or ReflectorOptions()
        self._resync = resync_check_period
        self._informers: dict[InformerKey, SharedInformer] = {}

    def informer(self, key: InformerKey) -> SharedInformer:
        """The shared informer for ``key`` (created on first request, not started)."""
        inf = self._informers.get(key)
        if inf is None:
            opts = replace(self._options, label_selector=key.label_selector, field_selector=key.field_selector)
            inf = SharedInformer(self._lw_for(key), name=key.resource, reflector_options=opts,
                                 resync_check_period=self._resync)
            self._informers[key] = inf
        return inf

    @property
    def informers(self) -> dict[InformerKey, SharedInformer]:
        """Every informer handed out so far."""
        return dict(self._informers)

    async def start(self) -> None:
        """Start every informer not yet started."""
        for inf in self._informers.values():
            await inf.start()

    async def stop(self) -> None:
        """Stop every informer."""
        for inf in self._informers.values():
            await inf.stop()
