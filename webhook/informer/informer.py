"""SharedInformer: Reflector + Indexer + event handlers (client-go ``sharedIndexInformer``).

Contract, as client-go's SharedInformer doc states it:

* eventual consistency with the API server; per-object order of
  notifications is kept for each handler;
* the Indexer is updated **before** handlers are told (``processDeltas``);
* the transform runs once per object as it arrives (per LIST page, per
  WatchList or watch event), before anything is kept; with ``compact`` the
  Indexer keeps compact JSON and every read decodes it;
* every handler registration has its own **bounded** queue and task
  (``handler_queue_size``, default 10,000 notifications): a slow or raising
  handler blocks no other handler and loses nothing; when its queue is full
  the informer waits for room before applying more events (backpressure on
  the watch, instead of client-go's unbounded buffer). Exceptions are logged
  and the task goes on. :meth:`SharedInformer.handler_queue_depths` reports
  the depths;
* a synchronous handler must say where its calls run, or it is **refused**
  (``TypeError`` at registration): ``sync_calls="thread"`` runs them off the
  event loop in a worker thread, one call at a time in order (as a Go
  handler runs on its own goroutine; it must then be thread-safe and must
  not touch asyncio objects); ``sync_calls="loop"`` runs them on the loop,
  in time slices, for handlers that touch loop-owned state and are cheap
  (a call longer than :data:`SYNC_CALL_BUDGET` is logged and counted in
  ``slow_calls``). The choice is the registration's ``sync_calls`` or the
  handler's own ``sync_calls`` attribute. Async handlers need neither: they
  are awaited on the loop in the registration's task;
* the initial LIST (or WatchList) is delivered to each handler from a
  snapshot of the store by its own task, as ``on_add(obj, True)``, so a sync
  never waits for handlers; a handler added later gets the same synthetic
  adds;
* a relist notifies real changes (a new resourceVersion), delivers
  ``DeletedFinalStateUnknown`` tombstones (with the last known object) for
  objects deleted while disconnected, and delivers unchanged objects as
  ``on_update(old, new)`` to the handlers due a resync at the last resync
  check only (client-go's Replaced deltas with an unchanged RV, distributed
  as a sync to ``syncingListeners``);
* resync re-delivers ``on_update(obj, obj)`` to handlers that asked for it,
  without any API call, each object in its state when queued;
* :meth:`SharedInformer.has_synced` turns true once the first LIST is
  applied and never reverts; a registration's ``has_synced`` also waits
  until its initial adds were delivered;
* a removed registration (:meth:`SharedInformer.remove_event_handler`)
  queues nothing more and its task ends;
* objects are shared and read-only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from webhook.aio import cancel_and_wait
from webhook.informer.handlers import (
    HANDLER_QUEUE_SIZE,
    AddNotification,
    DeleteNotification,
    HandlerRegistration,
    Notification,
    ResourceEventHandler,
    SyncCalls,
    UpdateNotification,
)
from webhook.informer.reflector import Reflector, ReflectorOptions
from webhook.informer.store import (
    DeletedFinalStateUnknown,
    Indexer,
    IndexFunc,
    ListBuffer,
    TransformFunc,
    decode,
    drop_managed_fields,
    keep_fields,
)
from webhook.informer.types import KubeObject, ListerWatcher

#: A key of an informer map (InformerKey, GVR).
K = TypeVar("K")


class SharedInformer:
    """List/watch one resource into an :class:`Indexer` and fan events out to handlers.

    Args:
        lister_watcher: where objects come from.
        name: for logs and metrics, e.g. ``"v1/configmaps"``.
        indexers: extra index functions (``namespace`` is always there); they read transformed objects.
        transform: applied to every object as it arrives, before it is kept (default drops
            ``managedFields``); see :meth:`set_transform` and :meth:`set_read_fields`.
        resync_check_period: seconds between resync checks (0 disables resync).
        reflector_options: selectors, watch timeout, backoff, WatchList.
        sleep: awaited for backoff delays (tests).
        compact: keep objects as compact JSON (about 1.2x their JSON size) and decode on read.
        handler_queue_size: notifications each registration may hold queued.
        clock: monotonic seconds for contact times (tests).
    """

    def __init__(self, lister_watcher: ListerWatcher, *, name: str = "",
                 indexers: dict[str, IndexFunc] | None = None,
                 transform: TransformFunc | None = drop_managed_fields,
                 resync_check_period: float = 0.0,
                 reflector_options: ReflectorOptions | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep,
                 compact: bool = False,
                 handler_queue_size: int = HANDLER_QUEUE_SIZE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.indexer = Indexer(indexers, compact=compact)
        self._transform = transform
        self._read_fields: dict[str, tuple[str, ...]] = {}
        self._handlers: list[HandlerRegistration] = []
        self._syncing: list[HandlerRegistration] = []
        self._queue_size = handler_queue_size
        self._synced = asyncio.Event()
        self._initial_list_done = False
        self._resync_check_period = resync_check_period
        self.reflector = Reflector(lister_watcher, self, name=name, options=reflector_options, sleep=sleep,
                                   clock=clock)
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._registered = 0
        self.events_applied = 0

    # -- public ---------------------------------------------------------------
    def add_event_handler(self, handler: ResourceEventHandler, *, resync_period: float | None = None,
                          name: str | None = None, sync_calls: SyncCalls | None = None,
                          queue_size: int | None = None) -> HandlerRegistration:
        """Register a handler; once the store is synced it first receives synthetic adds for all of it.

        Args:
            handler: a :class:`ResourceEventHandler`; its methods may be sync or async.
            resync_period: seconds between ``on_update(obj, obj)`` for every object (None: never).
            name: for logs and :meth:`handler_queue_depths` (default ``<informer>#<n>``).
            sync_calls: where synchronous calls run (``"thread"``: a worker thread, in order;
                ``"loop"``: on the event loop, for handlers touching loop-owned state); None: the
                handler's ``sync_calls`` attribute.
            queue_size: notifications queued at most (default the informer's).

        Raises:
            SyncHandlerError: the handler has synchronous methods and neither says where they run.
            ValueError: ``sync_calls`` is neither ``"thread"`` nor ``"loop"``.
        """
        self._registered += 1
        reg = HandlerRegistration(handler, resync_period=resync_period, name=name or f"{self.name}#{self._registered}",
                                  queue_size=queue_size or self._queue_size, sync_calls=sync_calls)
        self._handlers.append(reg)
        if self._initial_list_done:
            reg.set_initial([v for _, v in self.indexer.list_stored()])
        if self._started:
            reg.start()
        return reg

    async def remove_event_handler(self, registration: HandlerRegistration) -> None:
        """Unregister: nothing more is queued for it, its queue is dropped and its task ends (idempotent)."""
        if registration in self._handlers:
            self._handlers.remove(registration)
        if registration in self._syncing:
            self._syncing.remove(registration)
        await registration.stop()

    @property
    def registrations(self) -> list[HandlerRegistration]:
        """Every registration, in registration order (a copy)."""
        return list(self._handlers)

    def handler_queue_depths(self) -> dict[str, int]:
        """Registration name → notifications waiting for it (for a gauge, read at scrape time)."""
        return {reg.name: reg.queue_depth() for reg in self._handlers}

    def set_watch_error_handler(self, handler: Callable[[BaseException], None] | None) -> None:
        """Call ``handler`` with every list/watch failure (client-go ``SetWatchErrorHandler``)."""
        self.reflector.watch_error_handler = handler

    def set_transform(self, transform: TransformFunc | None) -> None:
        """Replace the transform (client-go ``SetTransform``).

        Raises:
            RuntimeError: the informer was started (kept objects would not match the new transform).
        """
        if self._started:
            raise RuntimeError(f"{self.name}: the transform can only be set before start")
        self._transform = transform

    def set_read_fields(self, owner: str, paths: Iterable[str | tuple[str, ...]] | None) -> None:
        """Declare the fields ``owner`` reads; the informer keeps only the union of every owner's.

        Each owner (a policy, a lookup) declares its field paths (see
        :func:`webhook.informer.store.keep_fields`); ``None`` forgets the owner. The transform becomes
        :func:`~webhook.informer.store.keep_fields` of the union, always with the metadata the
        informer needs. Until the first owner declares, the transform given at construction applies.

        Raises:
            RuntimeError: the informer was started (objects already kept lack fields a wider
                projection would need; start a new informer).
            ValueError: a path has an empty segment.
        """
        if self._started:
            raise RuntimeError(f"{self.name}: read fields can only be declared before start")
        if paths is None:
            self._read_fields.pop(owner, None)
        else:
            self._read_fields[owner] = tuple(".".join(p) if isinstance(p, tuple) else p for p in paths)
        union = sorted({p for ps in self._read_fields.values() for p in ps})
        self._transform = keep_fields(union) if self._read_fields else drop_managed_fields

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

    def last_contact(self) -> float | None:
        """Monotonic time the cache was last known current (a LIST page, a watch event or clean end); None before."""
        return self.reflector.last_contact()

    def staleness(self) -> float | None:
        """Seconds the cache may be behind: 0 while a watch is open, else since :meth:`last_contact`; None before."""
        return self.reflector.staleness()

    def healthy(self, max_staleness: float = 60.0) -> bool:
        """Synced, and a watch is open or the last contact is at most ``max_staleness`` seconds old."""
        stale = self.staleness()
        return self.has_synced() and stale is not None and stale <= max_staleness

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

    async def _notify(self, notification: Notification, handlers: tuple[HandlerRegistration, ...] | None = None
                      ) -> None:
        # A tuple: put() may wait, and a registration added or removed meanwhile must not shift the loop
        # (one added later got a store snapshot that already holds this change).
        for reg in handlers if handlers is not None else tuple(self._handlers):
            await reg.put(notification)

    def new_buffer(self) -> ListBuffer:
        """A buffer that transforms, indexes and stores each object of a LIST as it arrives."""
        return self.indexer.new_buffer(self._transform)

    async def replace(self, buffer: ListBuffer, resource_version: str) -> None:
        """Apply a full LIST: the store swapped in one step, then adds, updates, syncs and tombstones."""
        old_items = dict(self.indexer.list_stored()) if self._initial_list_done else {}
        self.indexer.replace_with(buffer)
        self.events_applied += 1
        if not self._initial_list_done:
            self._initial_list_done = True
            snapshot = list(buffer.items.values())
            # Synced first: whoever waits for the sync resumes before the handlers' first time slice of initial adds.
            self._synced.set()
            for reg in self._handlers:
                reg.set_initial(snapshot)
            return
        syncing = list(self._syncing)
        handlers = tuple(self._handlers)  # one set of handlers for the whole relist
        for key, new in list(buffer.items.items()):
            old = old_items.pop(key, None)
            if old is None:
                await self._notify(AddNotification(new, False), handlers)
            elif old != new and _rv(decode(old)) != _rv(decode(new)):
                await self._notify(UpdateNotification(old, new), handlers)
            else:
                # An unchanged resourceVersion is a sync (client-go's Replaced delta): only handlers due a
                # resync hear of it.
                for reg in syncing:
                    await reg.put(UpdateNotification(old, new))
        for key, old in old_items.items():
            await self._notify(DeleteNotification(DeletedFinalStateUnknown(key, old)), handlers)  # type: ignore[arg-type]

    async def add(self, obj: KubeObject) -> None:
        """Watch ADDED (an update if the key is already known)."""
        obj = self._ingest(obj)
        old = self.indexer.upsert(obj)
        self.events_applied += 1
        if old is None:
            await self._notify(AddNotification(obj, False))
        else:
            await self._notify(UpdateNotification(old, obj))

    async def update(self, obj: KubeObject) -> None:
        """Watch MODIFIED."""
        await self.add(obj)

    async def delete(self, obj: KubeObject) -> None:
        """Watch DELETED (the last state, stamped with the deletion RV)."""
        obj = self._ingest(obj)
        self.indexer.delete(obj)
        self.events_applied += 1
        await self._notify(DeleteNotification(obj))

    def bookmark(self, resource_version: str) -> None:
        """RV progress only; nothing to notify."""

    def handlers_idle(self) -> bool:
        """True when every handler has been told of everything applied to the store so far."""
        return all(r.queue_depth() == 0 for r in self._handlers)

    # -- resync ------------------------------------------------------------------
    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self._resync_check_period)
            now = time.monotonic()
            due = [r for r in self._handlers if r.next_resync is not None and now >= r.next_resync]
            # client-go's syncingListeners: the handlers due at this check, until the next one.
            self._syncing = due
            if not due or not self.has_synced():
                continue
            for reg in due:
                assert reg.resync_period is not None
                reg.next_resync = now + reg.resync_period
            for key in self.indexer.list_keys():
                # Each object in its state as it is queued, so a resync never overtakes a newer event.
                stored = self.indexer.get_stored(key)
                if stored is None:
                    continue
                for reg in due:
                    await reg.put(UpdateNotification(stored, stored))


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
        resync_check_period: seconds between resync checks of every informer.
        transform: the transform of every informer (client-go ``WithTransform``); default drops
            ``managedFields``.
        compact: keep objects as compact JSON in every informer.
    """

    def __init__(self, lister_watcher_for: Callable[[InformerKey], ListerWatcher], *,
                 reflector_options: ReflectorOptions | None = None, resync_check_period: float = 0.0,
                 transform: TransformFunc | None = drop_managed_fields, compact: bool = False) -> None:
        self._lw_for = lister_watcher_for
        self._options = reflector_options or ReflectorOptions()
        self._resync = resync_check_period
        self._transform = transform
        self._compact = compact
        self._informers: dict[InformerKey, SharedInformer] = {}

    def informer(self, key: InformerKey) -> SharedInformer:
        """The shared informer for ``key`` (created on first request, not started)."""
        inf = self._informers.get(key)
        if inf is None:
            opts = replace(self._options, label_selector=key.label_selector, field_selector=key.field_selector)
            inf = SharedInformer(self._lw_for(key), name=key.resource, reflector_options=opts,
                                 resync_check_period=self._resync, transform=self._transform,
                                 compact=self._compact)
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

    async def wait_for_cache_sync(self, timeout: float | None = None) -> dict[InformerKey, bool]:
        """Wait until every informer handed out so far synced (client-go ``WaitForCacheSync``).

        Args:
            timeout: seconds for all of them together (None: no limit).

        Returns:
            Key → whether that informer synced in time.
        """
        return await wait_for_cache_sync(self._informers, timeout)

    async def stop(self) -> None:
        """Stop every informer."""
        for inf in self._informers.values():
            await inf.stop()


async def wait_for_cache_sync(informers: Mapping[K, SharedInformer], timeout: float | None = None) -> dict[K, bool]:
    """Wait until every informer of ``informers`` synced (client-go ``cache.WaitForCacheSync``).

    Args:
        informers: key → informer (a snapshot is taken: informers added meanwhile are not waited for).
        timeout: seconds for all of them together (None: no limit).

    Returns:
        Key → whether that informer synced in time.
    """
    snapshot = dict(informers)
    try:
        async with asyncio.timeout(timeout):
            for inf in snapshot.values():
                await inf.wait_for_sync()
    except TimeoutError:
        pass
    return {key: inf.has_synced() for key, inf in snapshot.items()}
