"""Event handlers and their registrations: client-go's ``ResourceEventHandler`` and ``processorListener``.

A :class:`HandlerRegistration` is what :meth:`SharedInformer.add_event_handler
<webhook.informer.informer.SharedInformer.add_event_handler>` returns: one handler's bounded queue of
notifications and the task that delivers them, in order, in time slices, with the synchronous-call
rule. The delivery contract as a whole is :mod:`webhook.informer.informer`'s docstring.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from webhook.aio import cancel_and_wait, yield_to_loop
from webhook.informer.store import DeletedFinalStateUnknown, Stored, decode
from webhook.informer.types import KubeObject

log = logging.getLogger("tollgate.informer")

#: Where a synchronous handler's calls run: a worker thread or the event loop.
SyncCalls = Literal["thread", "loop"]


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

    Callables may be sync or async; async ones are awaited in the handler's own task. With any
    synchronous callable, ``sync_calls`` says where they run (see the module docstring).
    """

    add: Callable[[KubeObject, bool], Any] | None = None
    update: Callable[[KubeObject, KubeObject], Any] | None = None
    delete: Callable[[KubeObject | DeletedFinalStateUnknown], Any] | None = None
    sync_calls: SyncCalls | None = None

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

#: Notifications a registration may hold queued before the informer waits for room.
HANDLER_QUEUE_SIZE = 10_000

#: Seconds a synchronous call on the loop (``sync_calls="loop"``) may take before it is logged as slow.
SYNC_CALL_BUDGET = 0.005

class SyncHandlerError(TypeError):
    """A handler with synchronous methods did not say where they run (``sync_calls``)."""


def _is_async(fn: Callable[..., Any] | None) -> bool:
    return fn is not None and (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)))  # noqa: B004 - an object with an async __call__


def _callables(handler: ResourceEventHandler) -> dict[type, tuple[Callable[..., Any] | None, bool]]:
    """Per notification type, the function to call and whether it is a coroutine function."""
    if isinstance(handler, ResourceEventHandlerFuncs):
        fns: tuple[Callable[..., Any] | None, ...] = (handler.add, handler.update, handler.delete)
    else:
        fns = (handler.on_add, handler.on_update, handler.on_delete)
    return {kind: (fn, _is_async(fn)) for kind, fn in zip(
        (AddNotification, UpdateNotification, DeleteNotification), fns, strict=True)}


def _decoded(n: Notification) -> tuple[Any, ...]:
    """The arguments of a notification's call, stored forms decoded."""
    if isinstance(n, AddNotification):
        return (decode(n.obj), n.is_in_initial_list)
    if isinstance(n, UpdateNotification):
        new = decode(n.new)
        return (new if n.old is n.new else decode(n.old), new)
    obj = n.obj
    if isinstance(obj, DeletedFinalStateUnknown):
        return (DeletedFinalStateUnknown(obj.key, decode(obj.obj)),)
    return (decode(obj),)


class HandlerRegistration:
    """One handler's bounded queue and task (client-go ``processorListener``).

    Args:
        handler: what is called.
        resync_period: seconds between resyncs for this handler (None: never).
        name: for logs and the queue-depth metric.
        queue_size: notifications queued at most; :meth:`put` waits beyond.
        sync_calls: where synchronous calls run (see :data:`SyncCalls`); None: the handler's own
            ``sync_calls`` attribute.

    Raises:
        SyncHandlerError: a method is synchronous and neither says where it runs.
        ValueError: ``sync_calls`` is not ``"thread"`` or ``"loop"``.

    Attributes:
        slow_calls: synchronous calls on the loop that took longer than :data:`SYNC_CALL_BUDGET` (logged as
            warnings, but for the initial list's adds: start-up work, logged at debug level).
        failures: calls that raised (each logged).
    """

    def __init__(self, handler: ResourceEventHandler, *, resync_period: float | None, name: str,
                 queue_size: int = HANDLER_QUEUE_SIZE, sync_calls: SyncCalls | None = None) -> None:
        self._calls = _callables(handler)
        where = sync_calls or getattr(handler, "sync_calls", None)
        if where is None and any(fn is not None and not is_async for fn, is_async in self._calls.values()):
            raise SyncHandlerError(
                f"{name}: a synchronous event handler must say where its calls run: sync_calls='thread' (off the "
                "event loop, in order; it must be thread-safe) or sync_calls='loop' (cheap calls touching "
                "loop-owned state); or make its methods async")
        if where not in (None, "thread", "loop"):
            raise ValueError(f"sync_calls must be 'thread' or 'loop', not {where!r}")
        self.handler = handler
        self.name = name
        self.resync_period = resync_period
        self.next_resync = time.monotonic() + resync_period if resync_period else None
        self.sync_calls: SyncCalls = "loop" if where == "loop" else "thread"
        self._queue: asyncio.Queue[Notification] = asyncio.Queue(maxsize=queue_size)
        self._initial: list[Stored] | None = None
        self._initial_pos = 0
        self._busy = False
        self._wake = asyncio.Event()
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self.slow_calls = 0
        self._slow_after_sync = 0
        self.failures = 0

    def start(self) -> None:
        """Start the consumer task (on the running loop); idempotent."""
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"informer-handler-{self.name}")

    def has_synced(self) -> bool:
        """True once every initial add (the store when the handler joined or first synced) was delivered."""
        return self._initial is not None and self._initial_pos >= len(self._initial)

    @property
    def stopped(self) -> bool:
        """Removed or stopped: nothing is queued any more."""
        return self._stopped

    def set_initial(self, stored: list[Stored]) -> None:
        """The store's content to deliver first, as ``on_add(obj, True)`` (once)."""
        if self._initial is None:
            self._initial = stored
            self._wake.set()

    async def put(self, notification: Notification) -> None:
        """Queue a notification, waiting while the queue is full; dropped once stopped."""
        if self._stopped:
            return
        if self._queue.full():
            started = time.monotonic()
            await self._queue.put(notification)
            waited = time.monotonic() - started
            if waited > 1.0:  # pragma: no mutate (only whether a warning is logged)
                log.warning("%s: the informer waited %.1f s for this handler's full queue", self.name, waited)
        else:
            self._queue.put_nowait(notification)
        self._wake.set()

    def queue_depth(self) -> int:
        """Notifications waiting for this handler: queued, initial adds not yet delivered, and one in progress."""
        # An initial add being delivered is still counted among the initial ones (its position advances after).
        initial = len(self._initial) - self._initial_pos if self._initial is not None else 0
        return self._queue.qsize() + initial + (1 if self._busy and not initial else 0)

    @property
    def undelivered(self) -> int:
        """Same as :meth:`queue_depth` (0 when the handler has caught up)."""
        return self.queue_depth()

    async def _call(self, n: Notification) -> None:
        fn, is_async = self._calls[type(n)]
        if fn is None:
            return
        args = _decoded(n)
        if is_async:
            await fn(*args)
        elif self.sync_calls == "thread":
            result = await asyncio.get_running_loop().run_in_executor(None, fn, *args)
            if result is not None and inspect.isawaitable(result):
                await result
        else:
            started = time.perf_counter()
            result = fn(*args)
            took = time.perf_counter() - started
            if took > SYNC_CALL_BUDGET:
                self.slow_calls += 1
                if isinstance(n, AddNotification) and n.is_in_initial_list:
                    # Start-up work (the first list, before the caches count as synced): not a stall of traffic.
                    log.debug("%s: an initial add held the event loop %.0f ms", self.name, took * 1000)
                else:
                    self._slow_after_sync += 1
                    if self._slow_after_sync in (1, 10, 100) or self._slow_after_sync % 1000 == 0:  # pragma: no mutate
                        log.warning("%s: a synchronous handler held the event loop %.0f ms (%d slow calls); make it "
                                    "async, or register it with sync_calls='thread'", self.name, took * 1000,
                                    self.slow_calls)
            if result is not None and inspect.isawaitable(result):
                await result

    async def _deliver(self, n: Notification) -> None:
        self._busy = True
        try:
            await self._call(n)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.failures += 1
            log.exception("%s: event handler failed on %s", self.name, type(n).__name__)
        finally:
            self._busy = False

    async def _initial_adds_on_loop(self, fn: Callable[..., Any], initial: list[Stored], slice_started: float) -> None:
        """Initial adds to a synchronous ``add`` on the loop, in order, until the time slice is spent.

        The same calls, counts and logs as :meth:`_deliver` of one ``AddNotification(obj, True)`` at a time, for
        about a third less CPU per add, its decode included (callgrind, 20k stored ConfigMaps to a cheap handler:
        28.4k -> 19.5k instructions; see docs/performance.md): no notification object and no coroutine per add,
        and the clock read that ends a call's timing also decides whether the slice is spent. Returns after at
        least one add; the caller yields the loop when the slice is spent. A call that returns an awaitable is
        awaited, as :meth:`_call` does.
        """
        clock = time.perf_counter
        end = len(initial)
        pos = self._initial_pos
        while pos < end:
            try:
                obj = decode(initial[pos])
                started = clock()
                result = fn(obj, True)
                now = clock()
                if now - started > SYNC_CALL_BUDGET:
                    # Start-up work (the first list, before the caches count as synced): not a stall of traffic.
                    self.slow_calls += 1
                    log.debug("%s: an initial add held the event loop %.0f ms", self.name, (now - started) * 1000)
                if result is not None and inspect.isawaitable(result):
                    await result
                    now = clock()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                log.exception("%s: event handler failed on %s", self.name, AddNotification.__name__)
                now = clock()
            pos += 1
            self._initial_pos = pos
            if now - slice_started > HANDLER_TIME_SLICE:
                return

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
            initial = self._initial
            if initial is not None and self._initial_pos < len(initial):
                fn, is_async = self._calls[AddNotification]
                if fn is not None and not is_async and self.sync_calls == "loop":
                    await self._initial_adds_on_loop(fn, initial, slice_started)
                else:
                    stored = initial[self._initial_pos]
                    await self._deliver(AddNotification(stored, True))
                    self._initial_pos += 1
                if self._initial_pos >= len(initial):
                    self._initial = []  # delivered: drop the references
                    self._initial_pos = 0
                continue
            if not self._queue.empty():
                await self._deliver(self._queue.get_nowait())
                continue
            self._wake.clear()
            await self._wake.wait()  # a notification or the initial snapshot
            slice_started = clock()  # waited for it: a new slice starts now

    async def stop(self) -> None:
        """Stop queueing, cancel the consumer task and wait for it (pending notifications are dropped)."""
        self._stopped = True
        while not self._queue.empty():
            self._queue.get_nowait()
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
