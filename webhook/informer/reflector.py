"""Reflector: keeps a store in step with the API server through LIST and WATCH.

Follows client-go ``tools/cache/reflector.go`` (docs/design/informer.md §A):

* **WatchList first** (KEP-3157, client-go's ``watchList``): one WATCH with
  ``sendInitialEvents=true``, ``resourceVersionMatch=NotOlderThan`` and
  ``allowWatchBookmarks=true`` at the last synced RV (``""`` before the first
  sync or after an Expired/too-large error) streams the current state as
  ADDED events into a :class:`~webhook.informer.store.ListBuffer`; the store
  is replaced at the BOOKMARK annotated ``k8s.io/initial-events-end: "true"``
  (its RV is the synced RV) and the **same stream** goes on as the watch.
  Falls back to the paginated LIST for this attempt when the server refuses
  (400/422, e.g. a 1.20 server: "resourceVersionMatch is forbidden for
  watch"), on any other error that is not 429/refused/Expired (those retry
  WatchList, as client-go does), when the stream ends before the bookmark, and
  for good when the server shows it ignored the request: a BOOKMARK without
  the annotation, or no event for ``initial_events_timeout`` seconds (client-go
  only warns there; without the annotation it would wait for ever). A
  ListerWatcher whose ``is_watch_list_semantics_unsupported()`` returns True
  (client-go's ``DoesClientNotSupportWatchListSemantics``) is never asked.
* paginated LIST (``limit=500``, ``continue``) at ``resourceVersion="0"``
  first, at the last synced RV on a relist (without ``limit``, which would
  force an Exact read), at ``""`` after an Expired or too-large error; one
  unpaginated LIST when a continue token expires (tools/pager). Each page is
  transformed and stored as it arrives; a page that fails leaves the store
  untouched (nothing of the partial list is applied);
* WATCH from the list's RV with ``allowWatchBookmarks`` and ``timeoutSeconds``
  uniform in ``[min_watch_timeout, 2*min_watch_timeout)``; after every event
  the RV advances; a clean end of the stream re-watches from the last RV
  **without relisting**;
* **every failure path backs off** (issue 21 item 7): ERROR 410 (or a 410 on
  opening) → back off, relist; refused connection or 429 → back off
  (``Retry-After`` honoured), re-watch; a stream that broke before delivering
  any event (decode error or dropped connection as it opened, read timeout)
  → back off, re-watch; a stream that broke after events → re-watch at once
  (as client-go treats a closed result channel); a watch that lasted under
  1 s with no event → back off, relist (VeryShortWatch); anything else →
  back off, relist;
* backoff 0.8 s doubling, jittered, at most 8 s (:class:`Backoff`), so
  recovery after an outage is prompt (issue 20); reset by a watch that
  delivered events (not by a LIST alone: a watch that keeps closing at once
  after successful relists must still back off further each time).

The Reflector only talks to a :class:`ListerWatcher` and a
:class:`ReflectorStore`; it imports neither aiohttp nor kubernetes_asyncio.
One module of ~500 lines, as client-go's ``reflector.go`` is one file: the three
paths above share one state (last synced RV, WatchList support, backoff) and one
loop; what stands alone lives apart (backoff.py, errors.py, store.py's ListBuffer).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from webhook.informer.backoff import Backoff
from webhook.informer.errors import ApiStatusError, ConnectError, LineTooLongError, StreamError
from webhook.informer.store import ListBuffer
from webhook.informer.types import KubeObject, ListerWatcher, ListOptions, WatchEvent

log = logging.getLogger("tollgate.informer")

PAGE_SIZE = 500

#: The annotation on the BOOKMARK that ends WatchList's initial events (``metav1.InitialEventsAnnotationKey``).
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


class ReflectorStore(Protocol):
    """The part of the informer the Reflector writes to (client-go ``ReflectorStore``)."""

    def new_buffer(self) -> ListBuffer:
        """An empty buffer for a LIST or WatchList's initial events (transforms as objects arrive)."""
        ...

    async def replace(self, buffer: ListBuffer, resource_version: str) -> None:
        """A complete LIST result (relist): apply it, tombstoning what vanished."""

    async def add(self, obj: KubeObject) -> None:
        """A watch ADDED event."""

    async def update(self, obj: KubeObject) -> None:
        """A watch MODIFIED event."""

    async def delete(self, obj: KubeObject) -> None:
        """A watch DELETED event."""

    def bookmark(self, resource_version: str) -> None:
        """A BOOKMARK (or any event): the RV the store is now at."""


class VeryShortWatchError(Exception):
    """The watch closed within 1 s without delivering an event (client-go's guard against hot loops)."""


class WatchListIgnoredError(Exception):
    """The server answered a WatchList request as a plain watch (no ``k8s.io/initial-events-end`` bookmark)."""


@dataclass(frozen=True, slots=True)
class ReflectorOptions:
    """Tunables; defaults are client-go's unless said otherwise.

    Attributes:
        label_selector / field_selector: sent on LIST and WATCH (TweakListOptions).
        min_watch_timeout: seconds; each WATCH asks ``timeoutSeconds`` uniform in
            ``[min, 2*min)`` (client-go: 300 s).
        page_size: LIST ``limit``.
        short_watch: seconds; a watch ending sooner with no event is "very short".
        backoff_factory: builds the Backoff (tests pass a tiny one).
        use_watch_list: try WatchList before LIST (client-go's ``WatchListClient`` gate, on by
            default since 1.35).
        initial_events_timeout: seconds without any event while waiting for the end of
            WatchList's initial events before falling back to LIST for good (client-go warns
            after 10 s).
    """

    label_selector: str | None = None
    field_selector: str | None = None
    min_watch_timeout: int = 300
    page_size: int = PAGE_SIZE
    short_watch: float = 1.0
    backoff_factory: Callable[[], Backoff] = Backoff
    use_watch_list: bool = True
    initial_events_timeout: float = 10.0


class Reflector:
    """Runs LIST+WATCH (or WatchList) for one resource until cancelled.

    Args:
        lister_watcher: where objects come from.
        store: where they go.
        name: for logs.
        options: see :class:`ReflectorOptions`.
        sleep: awaited for every backoff delay (tests inject one that records).
        watch_error_handler: called with every list/watch failure (client-go
            ``WatchErrorHandler``); exceptions it raises are logged.
        clock: monotonic seconds (contact times, very-short watches).
        rng: uniform in ``[0, 1)`` (the watch timeout).

    Attributes:
        last_sync_resource_version: the RV of the last applied list, event or bookmark.
        last_event_time: ``time.monotonic()`` of the last event or bookmark (or list).
        events: events applied, for metrics and tests.
        used_watch_list: whether the last sync came from WatchList (False: LIST).
    """

    def __init__(self, lister_watcher: ListerWatcher, store: ReflectorStore, *, name: str = "",
                 options: ReflectorOptions | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep,
                 watch_error_handler: Callable[[BaseException], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 rng: Callable[[], float] = random.random) -> None:
        self.name = name
        self._lw = lister_watcher
        self._store = store
        self._options = options or ReflectorOptions()
        self._sleep = sleep
        self._clock = clock
        self._rng = rng
        self._backoff = self._options.backoff_factory()
        self.watch_error_handler = watch_error_handler
        self.last_sync_resource_version = ""
        self._rv_unavailable = False
        self._watch_list_ignored = False
        self.last_event_time: float | None = None
        self.events = 0
        self.used_watch_list = False
        self._contact: float | None = None
        self._watching = False
        self._watch_events = 0

    # -- helpers -------------------------------------------------------------
    def _base_options(self) -> ListOptions:
        return ListOptions(label_selector=self._options.label_selector, field_selector=self._options.field_selector)

    def relist_resource_version(self) -> str:
        """client-go ``relistResourceVersion``: ``""`` after expiry, ``"0"`` first, else the last RV."""
        if self._rv_unavailable:
            # A consistent read from etcd to re-establish a valid RV.
            return ""
        if self.last_sync_resource_version == "":
            # First list: may be served from the watch cache.
            return "0"
        return self.last_sync_resource_version

    def rewatch_resource_version(self) -> str:
        """client-go ``rewatchResourceVersion``: where WatchList starts (``""``: most recent, consistent)."""
        return "" if self._rv_unavailable else self.last_sync_resource_version

    def watch_timeout(self) -> int:
        """``timeoutSeconds`` for the next WATCH: uniform in ``[min, 2*min)`` (client-go)."""
        low = self._options.min_watch_timeout
        return int(low + self._rng() * low)

    def last_contact(self) -> float | None:
        """Clock time the cache was last known current: a LIST page, a watch event, a watch's clean end.

        None before any contact. While a watch is open it is current by definition: see :meth:`staleness`.
        """
        return self._contact

    def staleness(self) -> float | None:
        """Seconds the cache may be behind the API server: 0 while a watch is open, else since the last contact.

        None before any contact. A half-open connection counts as open until the watch's deadline.
        """
        if self._contact is None:
            return None
        if self._watching:
            return 0.0
        return max(0.0, self._clock() - self._contact)

    def watch_list_supported(self) -> bool:
        """Whether the next sync will try WatchList (options, the ListerWatcher and the server allow it)."""
        if not self._options.use_watch_list or self._watch_list_ignored:
            return False
        unsupported = getattr(self._lw, "is_watch_list_semantics_unsupported", None)
        return not (callable(unsupported) and unsupported())

    def _touch(self) -> None:
        now = self._clock()
        self._contact = now
        self.last_event_time = time.monotonic()

    def _report(self, err: BaseException) -> None:
        if self.watch_error_handler is not None:
            try:
                self.watch_error_handler(err)
            except Exception:
                log.exception("watch error handler failed")

    async def _backoff_sleep(self, retry_after: float | None = None) -> None:
        delay = self._backoff.next_delay()
        if retry_after is not None:
            delay = max(delay, retry_after)
        await self._sleep(delay)

    # -- LIST ---------------------------------------------------------------
    async def _list_pages(self, rv: str) -> tuple[ListBuffer, str]:
        base = self._base_options()
        # Any RV other than ""/"0" with a limit is an Exact read that can 410;
        # without limit it is NotOlderThan, served from the watch cache.
        limit = self._options.page_size if rv in ("", "0") else None
        buffer = self._store.new_buffer()
        first = await self._lw.list(replace(base, resource_version=rv, limit=limit))
        self._touch()
        buffer.add_page(first.items, handed_over=first.handed_over)
        list_rv = first.resource_version
        token = first.continue_token
        del first
        while token:
            try:
                page = await self._lw.list(replace(base, continue_token=token, limit=limit))
            except ApiStatusError as e:
                if not e.is_expired:
                    raise
                # tools/pager: the continue token expired: one full list, no limit.
                log.info("%s: continue token expired; listing without pagination", self.name)
                full = await self._lw.list(replace(base, resource_version=rv))
                self._touch()
                buffer = self._store.new_buffer()
                buffer.add_page(full.items, handed_over=full.handed_over)
                return buffer, full.resource_version
            self._touch()
            buffer.add_page(page.items, handed_over=page.handed_over)
            token = page.continue_token
            del page
        return buffer, list_rv

    async def _list(self) -> None:
        rv = self.relist_resource_version()
        try:
            buffer, list_rv = await self._list_pages(rv)
        except ApiStatusError as e:
            if not (e.is_expired or e.is_too_large_resource_version):
                raise
            # Retry at once with a consistent read (client-go sets
            # isLastSyncResourceVersionUnavailable).
            self._rv_unavailable = True
            buffer, list_rv = await self._list_pages(self.relist_resource_version())
        self._rv_unavailable = False
        await self._store.replace(buffer, list_rv)
        self.last_sync_resource_version = list_rv
        self.used_watch_list = False

    # -- WatchList ----------------------------------------------------------
    async def _initial_events(self, stream: AsyncIterator[WatchEvent], buffer: ListBuffer) -> str | None:
        """Consume initial events into ``buffer``; the end bookmark's RV, or None if the stream ended first.

        Raises:
            ApiStatusError: an ERROR event.
            WatchListIgnoredError: a BOOKMARK without the end annotation, or no event for
                ``initial_events_timeout`` seconds.
            VeryShortWatchError: the stream closed within ``short_watch`` seconds with no event.
        """
        started = self._clock()
        empty = True
        loop = asyncio.get_running_loop()
        stall = self._options.initial_events_timeout
        try:
            # One deadline, pushed back at most every 0.1 s: the stall is detected within ``stall + 0.1`` s
            # without a timer per event (a timeout context per event cost more than parsing it).
            async with asyncio.timeout(stall) as deadline:
                pushed = loop.time()
                while True:
                    now = loop.time()
                    if now - pushed > 0.1:
                        deadline.reschedule(now + stall)
                        pushed = now
                    try:
                        event = await anext(stream)
                    except StopAsyncIteration:
                        if empty and self._clock() - started < self._options.short_watch:
                            raise VeryShortWatchError(
                                f"{self.name}: watch-list closed immediately with no events") from None
                        return None
                    empty = False
                    end = self._initial_event(event, buffer)
                    if end is not None:
                        self._touch()
                        return end
        except TimeoutError:
            raise WatchListIgnoredError(
                f"{self.name}: no event for {stall:g} s while waiting for the end of the initial events") from None

    def _initial_event(self, event: WatchEvent, buffer: ListBuffer) -> str | None:
        """Apply one initial event to ``buffer``; the end bookmark's RV when it is that bookmark."""
        obj = event.object
        etype = event.type
        if etype == "ADDED" or etype == "MODIFIED":
            buffer.add(obj)
        elif etype == "DELETED":
            buffer.delete(obj)
        elif etype == "BOOKMARK":
            meta = obj.get("metadata") or {}
            if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                return str(meta.get("resourceVersion") or "")
            raise WatchListIgnoredError(f"{self.name}: a bookmark without {INITIAL_EVENTS_END} before the "
                                        "initial events ended: the server ignored sendInitialEvents")
        elif etype == "ERROR":
            raise _status_from_event(obj)
        else:
            log.warning("%s: skipping unknown watch event type %r", self.name, etype)
        return None

    async def _watch_list(self) -> AsyncIterator[WatchEvent] | None:
        """Sync through WatchList; the open stream to go on watching, or None to fall back to LIST."""
        while True:
            opts = replace(self._base_options(), resource_version=self.rewatch_resource_version(),
                           resource_version_match="NotOlderThan", send_initial_events=True,
                           allow_watch_bookmarks=True, timeout_seconds=self.watch_timeout())
            buffer = self._store.new_buffer()
            stream = self._lw.watch(opts)
            try:
                end_rv = await self._initial_events(stream, buffer)
            except ApiStatusError as e:
                await _aclose(stream)
                self._report(e)
                if e.code == 429:
                    await self._backoff_sleep(e.retry_after)
                    continue
                if e.is_expired or e.is_too_large_resource_version:
                    self._rv_unavailable = True
                    continue
                log.info("%s: WatchList refused (%s); falling back to LIST", self.name, e)
                return None
            except ConnectError as e:
                await _aclose(stream)
                self._report(e)
                await self._backoff_sleep()
                continue
            except WatchListIgnoredError as e:
                await _aclose(stream)
                self._report(e)
                self._watch_list_ignored = True
                log.warning("%s; using LIST from now on", e)
                return None
            except (StreamError, LineTooLongError, VeryShortWatchError) as e:
                await _aclose(stream)
                self._report(e)
                log.info("%s: WatchList failed (%s); falling back to LIST", self.name, e)
                return None
            except BaseException:
                await _aclose(stream)
                raise
            if end_rv is None:
                await _aclose(stream)
                log.info("%s: WatchList stream ended before its initial events did; falling back to LIST", self.name)
                return None
            self._rv_unavailable = False
            await self._store.replace(buffer, end_rv)
            self.last_sync_resource_version = end_rv
            self.used_watch_list = True
            return stream

    # -- WATCH --------------------------------------------------------------
    async def _watch_once(self, stream: AsyncIterator[WatchEvent] | None = None) -> None:
        if stream is None:
            opts = replace(self._base_options(), resource_version=self.last_sync_resource_version,
                           allow_watch_bookmarks=True, timeout_seconds=self.watch_timeout())
            stream = self._lw.watch(opts)
        started = self._clock()
        self._watch_events = 0
        self._watching = True
        clean = False
        try:
            async for event in stream:
                etype = event.type
                obj = event.object
                if etype == "ERROR":
                    raise _status_from_event(obj)
                if not isinstance(obj, dict):
                    log.warning("%s: skipping watch event with a non-object payload", self.name)
                    continue
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if etype == "ADDED":
                    await self._store.add(obj)
                elif etype == "MODIFIED":
                    await self._store.update(obj)
                elif etype == "DELETED":
                    await self._store.delete(obj)
                elif etype != "BOOKMARK":
                    log.warning("%s: skipping unknown watch event type %r", self.name, etype)
                    continue
                self._watch_events += 1
                self.events += 1
                if rv:
                    self.last_sync_resource_version = rv
                    self._store.bookmark(rv)
                self._touch()
                self._backoff.reset()
            clean = True
        finally:
            self._watching = False
            if clean or self._watch_events:
                self._touch()
            await _aclose(stream)
        if self._watch_events == 0 and self._clock() - started < self._options.short_watch:
            raise VeryShortWatchError(f"{self.name}: watch closed immediately with no events")

    async def _watch_loop(self, stream: AsyncIterator[WatchEvent] | None = None) -> None:
        """Re-watch until an error demands a relist (raised to the caller)."""
        while True:
            try:
                await self._watch_once(stream)
            except ApiStatusError as e:
                self._report(e)
                if e.code == 429:
                    # Throttled: back off and re-watch from the same RV.
                    await self._backoff_sleep(e.retry_after)
                    continue
                raise
            except ConnectError as e:
                # Refused: re-listing everything would not help (isWatchErrorRetriable).
                self._report(e)
                await self._backoff_sleep()
                continue
            except StreamError as e:
                # A cut or garbled stream: the fragment is dropped, re-watch from the last applied RV. One that
                # broke before any event (garbage or a dropped connection as it opened) backs off first.
                self._report(e)
                log.info("%s: watch stream broke (%s); re-watching from %s", self.name, e,
                         self.last_sync_resource_version)
                if self._watch_events == 0:
                    await self._backoff_sleep()
            finally:
                stream = None

    async def _list_and_watch(self) -> None:
        stream = await self._watch_list() if self.watch_list_supported() else None
        if stream is None:
            await self._list()
        await self._watch_loop(stream)

    async def run(self) -> None:
        """List and watch until cancelled; every failure is followed by a backoff delay."""
        while True:
            retry_after: float | None = None
            try:
                await self._list_and_watch()
            except asyncio.CancelledError:
                raise
            except ApiStatusError as e:
                retry_after = e.retry_after
                self._report(e)
                if e.is_expired:
                    log.info("%s: %s; relisting from %s", self.name, e, self.last_sync_resource_version)
                else:
                    log.warning("%s: list/watch failed: %s", self.name, e)
            except (LineTooLongError, VeryShortWatchError, ConnectError, StreamError) as e:
                self._report(e)
                log.warning("%s: %s; backing off, then relisting", self.name, e)
            except Exception as e:
                self._report(e)
                log.exception("%s: unexpected list/watch failure", self.name)
            await self._backoff_sleep(retry_after)


def _status_from_event(obj: Any) -> ApiStatusError:
    """The error an ERROR watch event carries (its object is a ``metav1.Status``)."""
    if not isinstance(obj, dict):
        return ApiStatusError(500, "InternalError", f"ERROR event with a non-Status object: {obj!r:.80}")
    details = obj.get("details") or {}
    retry = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return ApiStatusError(int(obj.get("code") or 500), str(obj.get("reason") or ""), str(obj.get("message") or ""),
                          retry_after=float(retry) if isinstance(retry, (int, float)) else None)


async def _aclose(stream: AsyncIterator[WatchEvent]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
