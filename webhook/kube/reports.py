"""Write PolicyReports / ClusterPolicyReports: leader only, only on change, batched and rate-limited.

The auditor hands over the desired report of each namespace (``None`` for the
cluster-scoped ClusterPolicyReport key, see ``webhook.audit.reports``) with
:meth:`PolicyReportWriter.submit`; a single task writes them:

* only while ``is_leader()`` is true (checked before every write); on
  gaining leadership it lists the reports labelled
  ``app.kubernetes.io/managed-by=tollgate`` to learn what is on the server,
  rewrites what differs and deletes the ones nobody wants any more;
* only on change: a report whose ``summary`` and ``results`` equal what was
  last written or read is not written again;
* batched: submissions within ``batch_delay`` seconds are written together,
  the latest desired state of a namespace winning;
* rate-limited: a token bucket of ``writes_per_second`` with ``burst``, at
  most ``max_in_flight`` requests at a time;
* create with POST (409 → read and replace), update with PUT carrying the
  last known ``resourceVersion`` (409 Conflict → read and retry), delete
  when a namespace has no results left; failures retry with backoff.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from kubernetes_asyncio import client

from webhook.aio import cancel_and_wait
from webhook.audit.reports import MANAGED_BY, REPORT_API_VERSION, content, report_name
from webhook.informer.backoff import Backoff
from webhook.informer.errors import ApiStatusError
from webhook.kube.api import request_json

log = logging.getLogger("tollgate.reports")

BASE = f"/apis/{REPORT_API_VERSION}"
REQUEST_TIMEOUT = 30.0


def report_path(namespace: str | None, name: str | None = None) -> str:
    """URL path of the reports collection (or one report) for ``namespace`` (None: ClusterPolicyReports)."""
    coll = f"{BASE}/namespaces/{namespace}/policyreports" if namespace else f"{BASE}/clusterpolicyreports"
    return f"{coll}/{name}" if name else coll


async def call_json(api_client: Any, method: str, path: str, body: Any = None,
                    query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """One JSON request with the report writer's timeout (see :func:`webhook.kube.api.request_json`)."""
    return await request_json(api_client, method, path, body=body, query=query, timeout=REQUEST_TIMEOUT)


def digest(report: dict[str, Any]) -> bytes:
    """SHA-256 of a report's owned content (``summary`` + ``results``, keys sorted): what "changed" compares."""
    return hashlib.sha256(orjson.dumps(content(report), option=orjson.OPT_SORT_KEYS)).digest()


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved (client-go's flowcontrol rate limiter)."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()

    def delay(self) -> float:
        """Take one token; returns the seconds to wait before using it (0 when one was saved)."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class PolicyReportWriter:
    """Keeps the server's Tollgate-managed reports equal to the submitted desired reports.

    Args:
        api_client: a configured kubernetes_asyncio ApiClient (not closed here).
        is_leader: whether this replica may write now (e.g. ``LeaderElector.is_leader``).
        batch_delay: seconds to gather submissions before writing.
        writes_per_second, burst: the write rate limit.
        idle_poll: seconds between leadership checks while not leading.
        max_in_flight: concurrent write requests (each still takes a token).
        backoff_factory: backoff after a failed write.

    Attributes:
        writes: count of POST/PUT/DELETE requests made.
        errors: count of failed writes.
    """

    def __init__(self, api_client: client.ApiClient, *, is_leader: Callable[[], bool], batch_delay: float = 0.5,
                 writes_per_second: float = 10.0, burst: int = 20, idle_poll: float = 1.0,
                 max_in_flight: int = 4, backoff_factory: Callable[[], Backoff] = Backoff) -> None:
        self._api = api_client
        self._is_leader = is_leader
        self._batch_delay = batch_delay
        self._bucket = TokenBucket(writes_per_second, burst)
        self._idle_poll = idle_poll
        self._max_in_flight = max(1, max_in_flight)
        self._backoff = backoff_factory()
        #: namespace → desired report as compact JSON (a few times smaller than the dict while it waits).
        self._desired: dict[str | None, bytes] = {}
        #: namespace → (content digest, resourceVersion) of the report on the server, as last written or read.
        self._server: dict[str | None, tuple[bytes, str]] = {}
        self._dirty: set[str | None] = set()
        self._wake = asyncio.Event()
        self._adopted = False
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        self.writes = 0
        self.errors = 0

    # -- input ----------------------------------------------------------------------------------------
    def submit(self, namespace: str | None, report: dict[str, Any] | None) -> None:
        """Set the desired report of ``namespace`` (None: ClusterPolicyReport); ``report`` None deletes it."""
        if report is None:
            self._desired.pop(namespace, None)
        else:
            self._desired[namespace] = orjson.dumps(report)
        self._dirty.add(namespace)
        self._wake.set()

    def desired(self) -> dict[str | None, dict[str, Any]]:
        """The desired reports by namespace (a copy)."""
        return {ns: orjson.loads(raw) for ns, raw in self._desired.items()}

    def idle(self) -> bool:
        """Nothing left to write (as far as this replica knows) and no write in flight."""
        return not self._dirty and not self._busy and self._adopted

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the writing task (returns at once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="policy-report-writer")

    async def stop(self) -> None:
        """Stop the task; unwritten changes are dropped (the next leader rewrites them)."""
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        while True:
            if not self._is_leader():
                # Whatever the server holds may change under another leader: read it again when we lead.
                self._adopted = False
                self._server.clear()
                await asyncio.sleep(self._idle_poll)
                continue
            try:
                if not self._adopted:
                    await self._adopt()
                if not self._dirty:
                    self._wake.clear()
                    try:
                        async with asyncio.timeout(self._idle_poll):
                            await self._wake.wait()
                    except TimeoutError:
                        continue
                    await asyncio.sleep(self._batch_delay)
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep writing; the failed namespaces stay dirty
                self.errors += 1
                log.warning("policy report write failed: %s", e)
                await asyncio.sleep(self._backoff.next_delay())

    async def _adopt(self) -> None:
        """Learn the managed reports on the server; mark the ones nobody wants for deletion."""
        selector = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
        found: dict[str | None, tuple[bytes, str]] = {}
        for kind in ("policyreports", "clusterpolicyreports"):
            data = await call_json(self._api, "GET", f"{BASE}/{kind}", query=[("labelSelector", selector)])
            for item in data.get("items") or ():
                meta = item.get("metadata") or {}
                ns = meta.get("namespace") or None
                if meta.get("name") == report_name(ns):
                    found[ns] = (digest(item), str(meta.get("resourceVersion", "")))
        self._server = found
        self._dirty |= set(found) | set(self._desired)
        self._adopted = True

    async def flush(self) -> None:
        """Write every dirty namespace now (only while leading), ``max_in_flight`` at a time.

        Failed namespaces stay dirty and the first failure is re-raised.
        """
        self._busy = True
        try:
            while self._dirty:
                if not self._is_leader():
                    return
                batch = sorted(self._dirty, key=lambda n: n or "")[: self._max_in_flight]
                self._dirty.difference_update(batch)
                outcomes = await asyncio.gather(*(self._write(ns) for ns in batch), return_exceptions=True)
                failed = [(ns, o) for ns, o in zip(batch, outcomes, strict=True) if isinstance(o, BaseException)]
                self._dirty.update(ns for ns, _ in failed)
                if failed:
                    raise failed[0][1]
        finally:
            self._busy = False

    async def _throttle(self) -> None:
        delay = self._bucket.delay()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _write(self, ns: str | None) -> None:
        raw = self._desired.get(ns)
        want: dict[str, Any] | None = orjson.loads(raw) if raw is not None else None
        have = self._server.get(ns)
        name = report_name(ns)
        if want is None:
            if have is not None:
                await self._throttle()
                try:
                    await call_json(self._api, "DELETE", report_path(ns, name))
                except ApiStatusError as e:
                    if e.code != 404:
                        raise
                self.writes += 1
                self._server.pop(ns, None)
            return
        body_content = digest(want)
        if have is not None and have[0] == body_content:
            return  # unchanged: no write
        await self._throttle()
        body = want
        if have is None:
            try:
                stored = await call_json(self._api, "POST", report_path(ns), body)
            except ApiStatusError as e:
                if e.code != 409:
                    raise
                current = await call_json(self._api, "GET", report_path(ns, name))
                body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
                stored = await call_json(self._api, "PUT", report_path(ns, name), body)
        else:
            body["metadata"]["resourceVersion"] = have[1]
            try:
                stored = await call_json(self._api, "PUT", report_path(ns, name), body)
            except ApiStatusError as e:
                if e.code == 404:
                    del body["metadata"]["resourceVersion"]
                    stored = await call_json(self._api, "POST", report_path(ns), body)
                elif e.code == 409:
                    current = await call_json(self._api, "GET", report_path(ns, name))
                    body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
                    stored = await call_json(self._api, "PUT", report_path(ns, name), body)
                else:
                    raise
        self.writes += 1
        self._server[ns] = (body_content, str((stored.get("metadata") or {}).get("resourceVersion", "")))
