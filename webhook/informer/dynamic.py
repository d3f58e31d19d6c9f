"""Dynamic informers: one SharedInformer per GVR, reference-counted by owner, within a budget.

As client-go's ``dynamicinformer.DynamicSharedInformerFactory``: :class:`DynamicInformerFactory` hands
out one :class:`SharedInformer` per :class:`~webhook.informer.gvr.GVR`, started when its first owner
acquires it and stopped when its last owner releases it (reference counting by owner name, so
acquiring twice is idempotent). It keeps a per-GVR count of cached objects and of their JSON bytes
(``managedFields`` are dropped on ingest, as for every informer), and enforces a :class:`Budget`: an
informer is refused while the budget is spent, and an informer whose initial LIST pushes the total
past the budget is stopped again; either way the reason is recorded in
:attr:`DynamicInformerFactory.refused`. Which GVRs to hold is :mod:`webhook.informer.discovered`'s job.

Pure of transports: the ListerWatcher per GVR is injected (``webhook.kube.listwatch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from webhook.informer.gvr import GVR
from webhook.informer.handlers import ResourceEventHandlerFuncs
from webhook.informer.informer import SharedInformer, wait_for_cache_sync
from webhook.informer.reflector import ReflectorOptions
from webhook.informer.store import DeletedFinalStateUnknown, TransformFunc, drop_managed_fields
from webhook.informer.types import KubeObject, ListerWatcher

log = logging.getLogger("tollgate.informer.dynamic")

def json_size(obj: KubeObject) -> int:
    """Bytes of ``obj`` as compact JSON: the byte measure of the budget and metrics (not RSS)."""
    return len(orjson.dumps(obj))


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits over every dynamic informer together; None means unlimited.

    Attributes:
        max_objects: cached objects.
        max_bytes: cached bytes, measured as compact JSON (:func:`json_size`).
    """

    max_objects: int | None = None
    max_bytes: int | None = None

    def exceeded(self, objects: int, nbytes: int) -> str | None:
        """Why ``objects``/``nbytes`` are over the budget, or None."""
        if self.max_objects is not None and objects > self.max_objects:
            return f"{objects} objects > budget of {self.max_objects}"
        if self.max_bytes is not None and nbytes > self.max_bytes:
            return f"{nbytes} bytes > budget of {self.max_bytes}"
        return None

    def spent(self, objects: int, nbytes: int) -> str | None:
        """Why nothing more may start at ``objects``/``nbytes``, or None."""
        if self.max_objects is not None and objects >= self.max_objects:
            return f"{objects} objects cached, budget is {self.max_objects}"
        if self.max_bytes is not None and nbytes >= self.max_bytes:
            return f"{nbytes} bytes cached, budget is {self.max_bytes}"
        return None


@dataclass(slots=True)
class Usage:
    """Objects and JSON bytes cached for one GVR."""

    objects: int = 0
    bytes: int = 0


class BudgetExceededError(Exception):
    """An informer was refused because of the :class:`Budget`; the message says why."""

    def __init__(self, gvr: GVR, reason: str) -> None:
        super().__init__(f"{gvr}: refused: {reason}")
        self.gvr = gvr
        self.reason = reason


class _SizeTracker:
    """Handler keeping a GVR's :class:`Usage` in step with its cache."""

    def __init__(self, usage: Usage, measure: Callable[[KubeObject], int], on_change: Callable[[], None]) -> None:
        self.usage = usage
        self._measure = measure
        self._on_change = on_change

    def funcs(self) -> ResourceEventHandlerFuncs:
        return ResourceEventHandlerFuncs(add=self._add, update=self._update, delete=self._delete)

    def _add(self, obj: KubeObject, _initial: bool) -> None:
        self.usage.objects += 1
        self.usage.bytes += self._measure(obj)
        self._on_change()

    def _update(self, old: KubeObject, new: KubeObject) -> None:
        if old is not new:
            self.usage.bytes += self._measure(new) - self._measure(old)
            self._on_change()

    def _delete(self, obj: KubeObject | DeletedFinalStateUnknown) -> None:
        last = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        self.usage.objects -= 1
        self.usage.bytes -= self._measure(last)
        self._on_change()


InformerListener = Callable[[GVR, SharedInformer], object]
StopListener = Callable[[GVR], object]


class DynamicInformerFactory:
    """One SharedInformer per GVR, started on first acquire and stopped on last release.

    Args:
        lister_watcher_for: builds the ListerWatcher of a GVR (e.g. a
            ``KubeListerWatcher(api, group=..., version=..., plural=...)``).
        reflector_options: defaults for every informer.
        budget: limits over all informers of this factory.
        measure: byte size of one object (default :func:`json_size`).
        transform: every informer's transform (client-go ``WithTransform``; default drops
            ``managedFields``).
        compact: keep objects as compact JSON (default: these caches grow with the cluster; a read
            costs a JSON parse, ~2-4 us for 1 KB).

    Listeners added with :meth:`add_listener` hear ``on_start(gvr, informer)``
    *before* the informer starts (so a handler registered there receives the
    initial LIST as adds) and ``on_stop(gvr)`` after it stopped.
    """

    def __init__(self, lister_watcher_for: Callable[[GVR], ListerWatcher], *,
                 reflector_options: ReflectorOptions | None = None, budget: Budget | None = None,
                 measure: Callable[[KubeObject], int] = json_size,
                 transform: TransformFunc | None = drop_managed_fields, compact: bool = True) -> None:
        self._lw_for = lister_watcher_for
        self._transform = transform
        self._compact = compact
        self._options = reflector_options or ReflectorOptions()
        self.budget = budget or Budget()
        self._measure = measure
        self._informers: dict[GVR, SharedInformer] = {}
        self._owners: dict[GVR, set[str]] = {}
        self._usage: dict[GVR, Usage] = {}
        self._started_order: list[GVR] = []
        self._last_size: dict[GVR, Usage] = {}
        #: GVR → why it is not running although owners want it.
        self.refused: dict[GVR, str] = {}
        self._start_listeners: list[InformerListener] = []
        self._stop_listeners: list[StopListener] = []
        self._over_budget = asyncio.Event()
        self._lock = asyncio.Lock()

    def add_listener(self, on_start: InformerListener | None = None, on_stop: StopListener | None = None) -> None:
        """Hear about informers starting (before ``start()``) and stopping (after ``stop()``)."""
        if on_start is not None:
            self._start_listeners.append(on_start)
        if on_stop is not None:
            self._stop_listeners.append(on_stop)

    # -- reads --------------------------------------------------------------------------------------
    def informer(self, gvr: GVR) -> SharedInformer | None:
        """The running informer of ``gvr``, or None."""
        return self._informers.get(gvr)

    @property
    def informers(self) -> dict[GVR, SharedInformer]:
        """Every running informer."""
        return dict(self._informers)

    async def wait_for_cache_sync(self, timeout: float | None = None) -> dict[GVR, bool]:
        """Wait until every running informer synced (client-go ``WaitForCacheSync``).

        Args:
            timeout: seconds for all of them together (None: no limit).

        Returns:
            GVR → whether its informer synced in time.
        """
        return await wait_for_cache_sync(self._informers, timeout)

    def owners(self, gvr: GVR) -> frozenset[str]:
        """Who holds ``gvr`` (running or refused)."""
        return frozenset(self._owners.get(gvr, ()))

    def usage(self) -> dict[GVR, Usage]:
        """Objects and bytes per running informer (copies)."""
        return {g: Usage(u.objects, u.bytes) for g, u in self._usage.items()}

    def total(self) -> Usage:
        """Objects and bytes over every running informer."""
        return Usage(sum(u.objects for u in self._usage.values()), sum(u.bytes for u in self._usage.values()))

    # -- lifecycle ----------------------------------------------------------------------------------
    async def acquire(self, gvr: GVR, owner: str) -> SharedInformer:
        """Hold ``gvr`` for ``owner``; start its informer if it is the first holder.

        Raises:
            BudgetExceededError: the budget is spent (the holder is still
                recorded, so a later :meth:`retry_refused` may start it).
        """
        async with self._lock:
            self._owners.setdefault(gvr, set()).add(owner)
            inf = self._informers.get(gvr)
            if inf is not None:
                return inf
            total = self.total()
            last = self._last_size.get(gvr)
            reason = self.budget.spent(total.objects, total.bytes)
            if reason is None and last is not None:
                reason = self.budget.exceeded(total.objects + last.objects, total.bytes + last.bytes)
                if reason is not None:
                    reason = f"its last LIST would make {reason}"
            if reason is not None:
                self.refused[gvr] = reason
                log.warning("dynamic informer %s refused: %s", gvr, reason)
                raise BudgetExceededError(gvr, reason)
            self.refused.pop(gvr, None)
            return await self._start(gvr)

    async def _start(self, gvr: GVR) -> SharedInformer:
        inf = SharedInformer(self._lw_for(gvr), name=str(gvr), reflector_options=self._options,
                             transform=self._transform, compact=self._compact)
        usage = self._usage[gvr] = Usage()
        inf.add_event_handler(_SizeTracker(usage, self._measure, self._check_budget).funcs(),
                              name=f"{gvr}#usage", sync_calls="loop")
        for listener in self._start_listeners:
            listener(gvr, inf)
        self._informers[gvr] = inf
        self._started_order.append(gvr)
        await inf.start()
        log.info("dynamic informer %s started", gvr)
        return inf

    def _check_budget(self) -> None:
        total = self.total()
        if self.budget.exceeded(total.objects, total.bytes) is not None:
            self._over_budget.set()

    async def enforce_budget(self) -> list[GVR]:
        """Stop the most recently started informers until the total is within budget.

        Returns:
            The GVRs stopped (each recorded in :attr:`refused` with the reason).
        """
        stopped: list[GVR] = []
        async with self._lock:
            self._over_budget.clear()
            while self._started_order:
                total = self.total()
                reason = self.budget.exceeded(total.objects, total.bytes)
                if reason is None:
                    break
                gvr = self._started_order[-1]
                self._last_size[gvr] = self._usage.get(gvr, Usage())
                self.refused[gvr] = f"stopped after its LIST: {reason}"
                log.warning("dynamic informer %s stopped: %s", gvr, reason)
                await self._stop(gvr)
                stopped.append(gvr)
        return stopped

    async def wait_over_budget(self) -> None:
        """Return once the total went over budget (for a task that calls :meth:`enforce_budget`)."""
        await self._over_budget.wait()

    async def release(self, gvr: GVR, owner: str) -> None:
        """Drop ``owner``'s hold on ``gvr``; stop its informer when nobody holds it any more."""
        async with self._lock:
            owners = self._owners.get(gvr)
            if owners is None:
                return
            owners.discard(owner)
            if owners:
                return
            del self._owners[gvr]
            self.refused.pop(gvr, None)
            self._last_size.pop(gvr, None)
            if gvr in self._informers:
                await self._stop(gvr)

    async def _stop(self, gvr: GVR) -> None:
        inf = self._informers.pop(gvr)
        self._usage.pop(gvr, None)
        self._started_order.remove(gvr)
        await inf.stop()
        log.info("dynamic informer %s stopped", gvr)
        for listener in self._stop_listeners:
            listener(gvr)

    async def retry_refused(self) -> dict[GVR, str]:
        """Try again to start every refused GVR that still has holders; returns those still refused."""
        for gvr in list(self.refused):
            owners = sorted(self._owners.get(gvr, ()))
            if owners:
                with contextlib.suppress(BudgetExceededError):
                    await self.acquire(gvr, owners[0])
        return dict(self.refused)

    async def stop(self) -> None:
        """Stop every informer (holders are forgotten)."""
        async with self._lock:
            for gvr in list(self._informers):
                await self._stop(gvr)
            self._owners.clear()
            self.refused.clear()

