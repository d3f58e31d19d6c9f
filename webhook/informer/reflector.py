"""Reflector: keeps a store in step with the API server through LIST and WATCH.

Follows client-go ``tools/cache/reflector.go`` (docs/design/informer.md §A):

* paginated LIST (``limit=500``, ``continue``) at ``resourceVersion="0"``
  first, at the last synced RV on a relist (without ``limit``, which would
  force an Exact read), at ``""`` after an Expired or too-large error; one
  unpaginated LIST when a continue token expires (tools/pager);
* WATCH from the list's RV with ``allowWatchBookmarks`` and a randomized
  ``timeoutSeconds``; after every event the RV advances; a clean end of the
  stream re-watches from the last RV **without relisting**;
* ERROR 410 (or a 410 on opening) → back off, relist; connection refused or
  429 → back off, re-watch; a watch that lasted under 1 s with no event →
  back off, relist (VeryShortWatch guard); broken streams → re-watch;
* backoff 0.8 s doubling to 30 s with full jitter, reset after 2 minutes
  without failure; ``Retry-After`` honoured.

The Reflector only talks to a :class:`ListerWatcher` and a
:class:`ReflectorStore`; it imports neither aiohttp nor kubernetes_asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from webhook.informer.backoff import Backoff
from webhook.informer.errors import ApiStatusError, ConnectError, LineTooLongError, StreamError
from webhook.informer.types import KubeObject, ListerWatcher, ListOptions

log = logging.getLogger("tollgate.informer")

PAGE_SIZE = 500


class ReflectorStore(Protocol):
    """The part of the informer the Reflector writes to (client-go ``ReflectorStore``)."""

    def replace(self, items: list[KubeObject], resource_version: str) -> None:
        """A complete LIST result (relist): apply it, tombstoning what vanished."""

    def add(self, obj: KubeObject) -> None:
        """A watch ADDED event."""

    def update(self, obj: KubeObject) -> None:
        """A watch MODIFIED event."""

    def delete(self, obj: KubeObject) -> None:
        """A watch DELETED event."""

    def bookmark(self, resource_version: str) -> None:
        """A BOOKMARK (or any event): the RV the store is now at."""


class VeryShortWatchError(Exception):
    """The watch closed within 1 s without delivering an event (client-go's guard against hot loops)."""


@dataclass(frozen=True, slots=True)
class ReflectorOptions:
    """Tunables; defaults are client-go's.

    Attributes:
        label_selector / field_selector: sent on LIST and WATCH (TweakListOptions).
        min_watch_timeout: seconds; each WATCH asks ``timeoutSeconds`` uniform in
            ``[min, 2*min]`` (client-go: 300 s).
        page_size: LIST ``limit``.
        short_watch: seconds; a watch ending sooner with no event is "very short".
        backoff_factory: builds the Backoff (tests pass a tiny one).
    """

    label_selector: str | None = None
    field_selector: str | None = None
    min_watch_timeout: int = 300
    page_size: int = PAGE_SIZE
    short_watch: float = 1.0
    backoff_factory: Callable[[], Backoff] = Backoff


class Reflector:
    """Runs LIST+WATCH for one resource until :meth:`stop`.

    Attributes:
        last_sync_resource_version: the RV of the last applied list, event or bookmark.
        last_event_time: ``time.monotonic()`` of the last event or bookmark (or list).
        events: events applied, for metrics and tests.
    """

    def __init__(self, lister_watcher: ListerWatcher, store: ReflectorStore, *, name: str = "",
                 options: ReflectorOptions | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep,
                 watch_error_handler: Callable[[BaseException], None] | None = None) -> None:
        self.name = name
        self._lw = lister_watcher
        self._store = store
        self._options = options or ReflectorOptions()
        self._sleep = sleep
        self._backoff = self._options.backoff_factory()
        self._error_handler = watch_error_handler
        self.last_sync_resource_version = ""
        self._rv_unavailable = False
        self.last_event_time: float | None = None
        self.events = 0

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

    def _report(self, err: BaseException) -> None:
        if self._error_handler is not None:
            try:
                self._error_handler(err)
            except Exception:
                log.exception("watch error handler failed")

    async def _backoff_sleep(self, retry_after: float | None = None) -> None:
        delay = self._backoff.next_delay()
        if retry_after is not None:
            delay = max(delay, retry_after)
        await self._sleep(delay)

    # -- LIST ---------------------------------------------------------------
    async def _list_pages(self, rv: str) -> tuple[list[KubeObject], str]:
        base = self._base_options()
        # Any RV other than ""/"0" with a limit is an Exact read that can 410;
        # without limit it is NotOlderThan, served from the watch cache.
        limit = self._options.page_size if rv in ("", "0") else None
        first = await self._lw.list(replace(base, resource_version=rv, limit=limit))
        items = list(first.items)
        list_rv = first.resource_version
        token = first.continue_token
        while token:
            try:
                page = await self._lw.list(replace(base, continue_token=token, limit=limit))
            except ApiStatusError as e:
                if not e.is_expired:
                    raise
                # tools/pager: the continue token expired: one full list, no limit.
                log.info("%s: continue token expired; listing without pagination", self.name)
                full = await self._lw.list(replace(base, resource_version=rv))
                return list(full.items), full.resource_version
            items.extend(page.items)
            token = page.continue_token
        return items, list_rv

    async def _list(self) -> None:
        rv = self.relist_resource_version()
        try:
            items, list_rv = await self._list_pages(rv)
        except ApiStatusError as e:
            if not (e.is_expired or e.is_too_large_resource_version):
                raise
            # Retry at once with a consistent read (client-go sets
            # isLastSyncResourceVersionUnavailable).
            self._rv_unavailable = True
            items, list_rv = await self._list_pages(self.relist_resource_version())
        self._rv_unavailable = False
        self._store.replace(items, list_rv)
        self.last_sync_resource_version = list_rv
        self.last_event_time = time.monotonic()

    # -- WATCH --------------------------------------------------------------
    async def _watch_once(self) -> None:
        timeout = random.randint(self._options.min_watch_timeout, 2 * self._options.min_watch_timeout)
        opts = replace(self._base_options(), resource_version=self.last_sync_resource_version,
                       allow_watch_bookmarks=True, timeout_seconds=timeout)
        started = time.monotonic()
        count = 0
        stream = self._lw.watch(opts)
        try:
            async for event in stream:
                etype = event.type
                obj = event.object
                if etype == "ERROR":
                    raise ApiStatusError(int(obj.get("code") or 500), str(obj.get("reason") or ""),
                                         str(obj.get("message") or ""))
                if not isinstance(obj, dict):
                    log.warning("%s: skipping watch event with a non-object payload", self.name)
                    continue
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if etype == "ADDED":
                    self._store.add(obj)
                elif etype == "MODIFIED":
                    self._store.update(obj)
                elif etype == "DELETED":
                    self._store.delete(obj)
                elif etype != "BOOKMARK":
                    log.warning("%s: skipping unknown watch event type %r", self.name, etype)
                    continue
                count += 1
                self.events += 1
                if rv:
                    self.last_sync_resource_version = rv
                    self._store.bookmark(rv)
                self.last_event_time = time.monotonic()
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        if count == 0 and time.monotonic() - started < self._options.short_watch:
            raise VeryShortWatchError(f"{self.name}: watch closed immediately with no events")

    async def _watch_loop(self) -> None:
        """Re-watch until an error demands a relist (raised to the caller)."""
        while True:
            try:
                await self._watch_once()
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
                # A cut or garbled stream: the fragment is dropped, re-watch from the last applied RV.
                self._report(e)
                log.info("%s: watch stream broke (%s); re-watching from %s", self.name, e,
                         self.last_sync_resource_version)

    async def _list_and_watch(self) -> None:
        await self._list()
        await self._watch_loop()

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
