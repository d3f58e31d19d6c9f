"""Kubernetes Events for denials and warnings, correlated as client-go's EventRecorder does.

The admission server hands each denied or warned review to :meth:`EventRecorder.record`, which
turns it into small :class:`EventRecord` s and puts them on a bounded queue without waiting (a
full queue drops the record and counts it): nothing on the request path talks to the API server.
A background task (:meth:`EventRecorder.run`) passes each record through an
:class:`EventCorrelator` and writes the resulting core/v1 Event through an :class:`EventSink`
(``webhook.kube.events`` in a cluster, :class:`LogEventSink` with ``--local``).

The correlator follows client-go ``tools/record/events_cache.go`` (``EventCorrelator``):

* the aggregator: events that differ only by message (same object, type, reason) are combined once
  10 distinct messages were seen within 10 minutes of each other; the combined Event's message is
  ``(combined from similar events): <message>``;
* the logger: an Event seen again (same key, message included) is PATCHed (``count`` + 1,
  ``lastTimestamp``, ``message``) instead of created anew;
* the spam filter: a token bucket per source + object, burst 25, refilled 1 per 5 minutes; an
  event with no token left is not written (client-go ``EventSourceObjectSpamFilter``; as there,
  the logger has already counted it, so the next written PATCH carries the true count).

Pure apart from the queue: no I/O, the clock is injected.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from webhook.policy.vocabulary import Action, PolicyResult, Result

log = logging.getLogger("tollgate.events")

__all__ = [
    "EventCorrelator",
    "EventRecord",
    "EventRecorder",
    "EventSink",
    "LogEventSink",
    "Write",
    "records_for",
]

#: ``reason`` of an Event for a denied request / a warned one.
VIOLATION = "PolicyViolation"
WARNING = "PolicyWarning"
#: ``reportingComponent`` and ``source.component``.
COMPONENT = "tollgate"
#: An Event's message is cut to this many UTF-8 bytes.
MAX_MESSAGE_BYTES = 1024
#: client-go events_cache.go: maxLruCacheEntries, defaultAggregateMaxEvents, defaultAggregateIntervalInSeconds,
#: defaultSpamBurst, defaultSpamQPS.
CACHE_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
COMBINED_PREFIX = "(combined from similar events): "
#: Records waiting for the writer; more are dropped (``tollgate_events_total{outcome="dropped"}``).
DEFAULT_QUEUE_SIZE = 1024


def bounded(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``message`` cut to ``limit`` UTF-8 bytes, never inside a character."""
    data = message.encode()
    return message if len(data) <= limit else data[:limit].decode(errors="ignore")


@dataclass(frozen=True, slots=True)
class EventRecord:
    """What the request path hands over: one policy's denial or warning of one object.

    Attributes:
        reason: :data:`VIOLATION` or :data:`WARNING`.
        message: ``<policy>: <message>``, at most :data:`MAX_MESSAGE_BYTES` bytes.
        kind, api_version: the request's ``kind`` (``apps/v1``, ``v1``).
        name, namespace: the object's (``""`` for a cluster-scoped object; the name may be ``""`` on a
            CREATE with ``generateName``).
        uid: the existing object's uid (UPDATE, DELETE), else ``""``.
    """

    reason: str
    message: str
    kind: str
    api_version: str
    name: str
    namespace: str
    uid: str = ""


def records_for(request: Mapping[str, Any], results: Iterable[PolicyResult]) -> list[EventRecord]:
    """The Events one review calls for: one per denying policy and one per warning policy.

    A result denies when it fails or errs under ``Deny`` (:attr:`PolicyResult.denies`); it warns when
    it fails or errs under ``Warn`` (an error ``failurePolicy: Ignore`` swallowed is a warning too).
    ``Audit`` alone makes no Event. A ``dryRun`` request makes none (the webhook configurations say
    ``sideEffects: NoneOnDryRun``).

    Args:
        request: the AdmissionReview's ``request``.
        results: the policies' results.
    """
    if request.get("dryRun"):
        return []
    chosen = []
    for r in results:
        if r.result not in (Result.FAIL, Result.ERROR):
            continue
        if r.denies:
            chosen.append((VIOLATION, r))
        elif Action.WARN in r.actions:
            chosen.append((WARNING, r))
    if not chosen:
        return []
    gvk = request.get("kind") or {}
    group, version = str(gvk.get("group") or ""), str(gvk.get("version") or "")
    name = str(request.get("name") or "")
    if not name:
        meta = (request.get("object") or {}).get("metadata") if isinstance(request.get("object"), dict) else None
        name = str(meta.get("generateName") or "") if isinstance(meta, dict) else ""
    uid = ""
    if request.get("operation") in ("UPDATE", "DELETE") and isinstance(request.get("oldObject"), dict):
        meta = request["oldObject"].get("metadata")
        uid = str(meta.get("uid") or "") if isinstance(meta, dict) else ""
    return [EventRecord(reason=reason, message=bounded(f"{r.policy}: {r.message}"), kind=str(gvk.get("kind") or ""),
                        api_version=f"{group}/{version}" if group else version, name=name,
                        namespace=str(request.get("namespace") or ""), uid=uid) for reason, r in chosen]


@dataclass(frozen=True, slots=True)
class Write:
    """What the correlator asks the sink to do.

    Attributes:
        namespace: the Event's namespace (the object's, ``default`` for a cluster-scoped one).
        event: the whole core/v1 Event (for a create, or a re-create when the PATCH finds it gone).
        patch: None to create ``event``; else the JSON merge patch of a repeated Event
            (``count``, ``lastTimestamp``, ``message``) to send to ``event``'s name.
    """

    namespace: str
    event: dict[str, Any]
    patch: dict[str, Any] | None = None


class _Lru(OrderedDict[Any, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_recent(self, key: Any) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventCorrelator:
    """client-go's ``EventCorrelator``: aggregate, count and rate-limit Events (see the module docstring).

    Args:
        instance: ``reportingInstance`` (the pod name).
        clock: wall-clock seconds (tests pass a fake).
        burst, qps: the spam filter's token bucket per object: at most ``burst`` Events at once,
            refilled ``qps`` per second.
        max_events, interval: aggregate after ``max_events`` distinct messages, each within
            ``interval`` seconds of the last.
        cache_entries: size of each LRU cache.
    """

    def __init__(self, *, instance: str = "", clock: Callable[[], float] = time.time, burst: int = SPAM_BURST,
                 qps: float = SPAM_QPS, max_events: int = AGGREGATE_MAX_EVENTS, interval: float = AGGREGATE_INTERVAL,
                 cache_entries: int = CACHE_ENTRIES) -> None:
        self.instance = instance
        self._clock = clock
        self._burst, self._qps = burst, qps
        self._max_events, self._interval = max_events, interval
        self._buckets = _Lru(cache_entries)  # spam key -> [tokens, last refill]
        self._aggregates = _Lru(cache_entries)  # aggregate key -> [set of messages, last seen]
        self._observed = _Lru(cache_entries)  # event key -> (count, firstTimestamp, name)
        self._last_ns = 0

    def correlate(self, record: EventRecord) -> Write | None:
        """The write ``record`` calls for, or None when the spam filter holds it back."""
        now = self._clock()
        ns = max(int(now * 1e9), self._last_ns + 1)  # names stay unique under a coarse clock
        self._last_ns = ns
        obj = (record.kind, record.namespace, record.name, record.uid, record.api_version)
        # The aggregator (EventAggregate): the same object, type and reason with a new message.
        aggregate_key = (*obj, record.reason)
        entry = self._aggregates.get_recent(aggregate_key)
        if entry is None or now - entry[1] > self._interval:
            entry = [set(), now]
        entry[0].add(record.message)
        entry[1] = now
        self._aggregates.put(aggregate_key, entry)
        message = record.message
        key: tuple[str, ...] = (*aggregate_key, record.message)
        if len(entry[0]) >= self._max_events:
            entry[0].pop()  # never grows past max_events
            message, key = bounded(COMBINED_PREFIX + record.message), aggregate_key
        # The logger (eventObserve): a repeat is a PATCH of the first occurrence.
        stamp = _timestamp(now)
        seen = self._observed.get_recent(key)
        count, first, name = (seen[0] + 1, seen[1], seen[2]) if seen else (
            1, stamp, f"{_name_base(record)}.{ns:x}")
        self._observed.put(key, (count, first, name))
        # The spam filter (EventSourceObjectSpamFilter): a token bucket per source + object.
        bucket = self._buckets.get_recent(obj) or [float(self._burst), now]
        bucket[0] = min(float(self._burst), bucket[0] + (now - bucket[1]) * self._qps)
        bucket[1] = now
        self._buckets.put(obj, bucket)
        if bucket[0] < 1.0:
            return None
        bucket[0] -= 1.0
        namespace = record.namespace or "default"
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {k: v for k, v in (("kind", record.kind), ("apiVersion", record.api_version),
                                                 ("name", record.name), ("namespace", record.namespace),
                                                 ("uid", record.uid)) if v},
            "reason": record.reason, "message": message, "type": "Warning",
            "count": count, "firstTimestamp": first, "lastTimestamp": stamp,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self.instance,
        }
        patch = {"count": count, "lastTimestamp": stamp, "message": message} if seen else None
        return Write(namespace, event, patch)


def _name_base(record: EventRecord) -> str:
    """client-go names an Event ``<object name>.<unix nanoseconds in hex>``; a nameless object gets its kind."""
    base = record.name.rstrip("-.") or record.kind.lower() or "object"
    return base[:200]


class EventSink(Protocol):
    """Where Events go: the API server (``webhook.kube.events``) or the log."""

    async def create(self, namespace: str, event: dict[str, Any]) -> None:
        """Create ``event`` (an Event that already exists is not an error)."""

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        """Merge ``patch`` into Event ``name``; False when it does not exist (expired by the API server's TTL)."""


class LogEventSink:
    """``--local``: there is no API server, so each Event is a log line (``tollgate.events``)."""

    async def create(self, namespace: str, event: dict[str, Any]) -> None:
        """Log ``event``."""
        self._log(namespace, event["metadata"]["name"], event["reason"], event["message"], event["count"],
                  event["involvedObject"])

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        """Log the repeat of Event ``name``."""
        self._log(namespace, name, None, patch["message"], patch["count"], None)
        return True

    @staticmethod
    def _log(namespace: str, name: str, reason: str | None, message: str, count: int,
             involved: dict[str, Any] | None) -> None:
        log.info("event", extra={"event": f"{namespace}/{name}", "reason": reason, "event_message": message,
                                 "count": count, "involvedObject": involved})


class EventRecorder:
    """The bounded hand-off between the request path and the Event writer.

    Args:
        sink: where Events are written.
        correlator: aggregation, counting and rate limits.
        max_queue: records waiting at most; more are dropped.
        on_outcome: told ``created``, ``patched``, ``throttled`` (spam filter), ``dropped`` (queue full) or
            ``failed`` (the write failed; logged) for each record (the metric).
    """

    def __init__(self, sink: EventSink, correlator: EventCorrelator, *, max_queue: int = DEFAULT_QUEUE_SIZE,
                 on_outcome: Callable[[str], None] = lambda _outcome: None) -> None:
        self.sink = sink
        self.correlator = correlator
        self.queue: asyncio.Queue[EventRecord] = asyncio.Queue(max_queue)
        self.on_outcome = on_outcome

    def record(self, request: Mapping[str, Any], results: Iterable[PolicyResult]) -> None:
        """Queue the Events of one answered review (:func:`records_for`); never blocks, never raises."""
        try:
            records = records_for(request, results)
        except Exception:  # an odd request shape costs its Event, never the review
            log.debug("no event for an odd request", exc_info=True)
            return
        for rec in records:
            try:
                self.queue.put_nowait(rec)
            except asyncio.QueueFull:
                self.on_outcome("dropped")

    async def run(self) -> None:
        """Write queued records until cancelled (a background task)."""
        while True:
            rec = await self.queue.get()
            try:
                await self.write(rec)
            finally:
                self.queue.task_done()

    async def write(self, rec: EventRecord) -> None:
        """Correlate one record and write it; a failure is logged and counted, never raised."""
        write = self.correlator.correlate(rec)
        if write is None:
            self.on_outcome("throttled")
            return
        try:
            # client-go recordEvent: a repeat whose Event expired (PATCH 404) is created again.
            if write.patch is not None and await self.sink.patch(write.namespace, write.event["metadata"]["name"],
                                                                 write.patch):
                self.on_outcome("patched")
                return
            await self.sink.create(write.namespace, write.event)
            self.on_outcome("created")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - an Event is best effort; the next one tries again
            self.on_outcome("failed")
            text = str(exc).strip().splitlines()
            why = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
            log.warning("could not write an event: %s", why,
                        extra={"event": f"{write.namespace}/{write.event['metadata']['name']}"})
