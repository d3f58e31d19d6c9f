"""Writes policy ``status`` (the ``Ready`` condition) to the API server, off the request path.

Callers (the policy index, when a ClusterAdmissionPolicy or AdmissionPolicy is
compiled) hand the policy object *as cached by the informer* and the desired
condition to :meth:`StatusWriter.enqueue`, which returns at once. A single
worker task then writes ``status`` through the ``/status`` subresource.

Contract:

* **Only on change.** Nothing is queued when the cached object already carries
  an equal condition (``type``, ``status``, ``reason``, ``message``,
  ``observedGeneration``) and ``status.observedGeneration``, when present, equals
  ``metadata.generation``. ``lastTransitionTime`` moves only when ``status``
  flips, as ``meta.SetStatusCondition`` does in apimachinery.
* **Coalescing.** At most one pending write per policy (key = kind, namespace,
  name); a newer :meth:`enqueue` replaces the pending one. The queue is thus
  bounded by the number of policies.
* **Optimistic concurrency.** A ``PUT .../status`` carrying the cached
  ``resourceVersion``. On 409 Conflict the worker re-reads the object and
  retries if the write is still needed (and is not for an older generation
  than the object now has: a newer compile result is then on its way).
* **Bounded retries.** Other failures (5xx, network) are retried with
  exponential backoff up to :attr:`Backoff.max_attempts`, scheduled with
  ``loop.call_later`` so one failing policy does not hold up the others; then
  dropped with a log line until the next :meth:`enqueue` for that policy.
* **Leader only.** With ``is_leader`` given, writes are parked while this
  replica does not lead. :meth:`resync` (wire it to the elector's
  ``on_started_leading``) queues everything parked at once; without that
  wiring, parked writes are still rechecked every ``leader_recheck`` seconds.

Only this module and ``webhook.kube.leader`` write to the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

__all__ = [
    "Backoff",
    "Condition",
    "PolicyKey",
    "StatusWriter",
    "StatusWriterStats",
    "condition_is_current",
    "set_condition",
    "status_path",
]

_log = logging.getLogger(__name__)

#: kind -> plural of the policy kinds (group ``tollgate.dev``); see manifests/crds/.
_PLURALS = {
    "ClusterAdmissionPolicy": "clusteradmissionpolicies",
    "AdmissionPolicy": "admissionpolicies",
}
_DEFAULT_API_VERSION = "tollgate.dev/v1alpha1"


class Condition(TypedDict):
    """``metav1.Condition`` on the wire (camelCase)."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    observedGeneration: NotRequired[int]
    lastTransitionTime: NotRequired[str]


@dataclass(frozen=True, slots=True)
class PolicyKey:
    """Identity of a policy object: ``kind``, ``namespace`` (``""`` when cluster-scoped), ``name``."""

    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> PolicyKey:
        """The key of a policy object as decoded from JSON."""
        meta = obj.get("metadata") or {}
        return cls(obj.get("kind", ""), meta.get("namespace") or "", meta.get("name", ""))


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry schedule for failed writes: ``initial * factor**(attempt-1)``, capped.

    Attributes:
        initial: seconds before the first retry.
        factor: multiplier per further retry.
        cap: the longest wait, seconds.
        max_attempts: writes tried per enqueued status before giving up
            (409 conflicts count too).
    """

    initial: float = 0.2
    factor: float = 2.0
    cap: float = 10.0
    max_attempts: int = 6

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.cap, self.initial * self.factor ** max(0, attempt - 1)))


@dataclass(frozen=True, slots=True)
class StatusWriterStats:
    """Counters since start, for metrics and tests.

    Attributes:
        writes: successful ``PUT .../status`` calls.
        skipped: enqueues or queued writes found already current.
        conflicts: 409 answers.
        errors: other failed attempts.
        dropped: writes given up after ``max_attempts``.
    """

    writes: int = 0
    skipped: int = 0
    conflicts: int = 0
    errors: int = 0
    dropped: int = 0


def status_path(obj: dict[str, Any]) -> str:
    """API path of a policy object's ``/status`` subresource.

    Args:
        obj: a ClusterAdmissionPolicy or AdmissionPolicy as decoded from JSON.

    Returns:
        e.g. ``/apis/tollgate.dev/v1alpha1/namespaces/team-a/admissionpolicies/p/status``.

    Raises:
        ValueError: unknown kind, or no name.
    """
    key = PolicyKey.of(obj)
    plural = _PLURALS.get(key.kind)
    if plural is None or not key.name:
        raise ValueError(f"not a policy object: kind={key.kind!r} name={key.name!r}")
    api_version = obj.get("apiVersion") or _DEFAULT_API_VERSION
    scope = f"/namespaces/{key.namespace}" if key.namespace else ""
    return f"/apis/{api_version}{scope}/{plural}/{key.name}/status"


def _same_condition(a: dict[str, Any], b: Condition) -> bool:
    return all(a.get(f) == b.get(f) for f in ("type", "status", "reason", "message", "observedGeneration"))


def condition_is_current(obj: dict[str, Any], condition: Condition) -> bool:
    """Whether ``obj.status`` already says what ``condition`` would write.

    Args:
        obj: the policy object as cached.
        condition: the desired condition; its ``observedGeneration`` defaults
            to ``metadata.generation``.

    Returns:
        ``True`` when a condition of the same ``type`` matches field by field
        (``lastTransitionTime`` ignored) and ``status.observedGeneration``, if
        present, equals the condition's ``observedGeneration``.
    """
    wanted = _with_generation(obj, condition)
    status = obj.get("status") or {}
    # An absent status.observedGeneration counts as matching: were the CRD schema
    # to prune it, every write would otherwise look unfinished and the informer's
    # update event would trigger the next write, forever.
    if status.get("observedGeneration", wanted.get("observedGeneration")) != wanted.get("observedGeneration"):
        return False
    return any(_same_condition(c, wanted) for c in status.get("conditions") or [] if c.get("type") == wanted["type"])


def set_condition(
    status: dict[str, Any],
    condition: Condition,
    *,
    now: datetime,
) -> dict[str, Any]:
    """A copy of ``status`` with ``condition`` set, as apimachinery's ``meta.SetStatusCondition``.

    Other condition types are kept in order. ``lastTransitionTime`` is kept
    when ``status`` ("True"/"False"/"Unknown") did not change, else set to
    ``now`` (RFC 3339, seconds). ``status.observedGeneration`` is set to the
    condition's ``observedGeneration`` when present.

    Args:
        status: the object's current ``status`` (may be empty); not modified.
        condition: the condition to set.
        now: the time to record on a transition.

    Returns:
        The new ``status`` dict.
    """
    new_status = copy.deepcopy(status)
    conditions: list[dict[str, Any]] = list(new_status.get("conditions") or [])
    entry: dict[str, Any] = dict(condition)
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for i, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            same_status = existing.get("status") == condition["status"]
            entry["lastTransitionTime"] = (existing.get("lastTransitionTime") or stamp) if same_status else stamp
            conditions[i] = entry
            break
    else:
        entry["lastTransitionTime"] = condition.get("lastTransitionTime") or stamp
        conditions.append(entry)
    new_status["conditions"] = conditions
    if "observedGeneration" in condition:
        new_status["observedGeneration"] = condition["observedGeneration"]
    return new_status


def _with_generation(obj: dict[str, Any], condition: Condition) -> Condition:
    if "observedGeneration" in condition:
        return condition
    generation = (obj.get("metadata") or {}).get("generation")
    if generation is None:
        return condition
    return Condition(**condition, observedGeneration=int(generation))


@dataclass(frozen=True, slots=True)
class _Desired:
    obj: dict[str, Any]  # the object as last cached (carries resourceVersion)
    condition: Condition


class StatusWriter:
    """Queue + worker that writes policy ``status`` through the ``/status`` subresource.

    Lifecycle: :meth:`start` creates the worker task, :meth:`stop` cancels it
    and any scheduled retries (pending writes are dropped; the next leader
    writes them). Everything runs on one event loop; :meth:`enqueue` never
    blocks and never does I/O, so it is safe to call from informer handlers and
    the admission path.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient``; not closed here.
        is_leader: returns whether this replica may write now (e.g.
            ``LeaderElector.is_leader``); default: always.
        backoff: retry schedule.
        request_timeout: seconds per API request.
        leader_recheck: seconds between checks of ``is_leader`` while writes
            are parked (a fallback for when :meth:`resync` is not wired to
            the elector).
        wall_clock: UTC now, for ``lastTransitionTime``.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        backoff: Backoff = Backoff(),
        request_timeout: float = 10.0,
        leader_recheck: float = 2.0,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = api_client
        self._is_leader = is_leader
        self._backoff = backoff
        self._request_timeout = request_timeout
        self._wall_clock = wall_clock
        self._pending: dict[PolicyKey, _Desired] = {}
        self._attempts: dict[PolicyKey, int] = {}
        self._queued: set[PolicyKey] = set()
        self._queue: asyncio.Queue[PolicyKey] = asyncio.Queue()
        self._retries: dict[PolicyKey, asyncio.TimerHandle] = {}
        self._leader_recheck = leader_recheck
        self._recheck: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._stats = StatusWriterStats()

    # -- public API -------------------------------------------------------

    @property
    def stats(self) -> StatusWriterStats:
        """Counters since construction."""
        return self._stats

    def enqueue(self, obj: dict[str, Any], condition: Condition) -> bool:
        """Ask for ``condition`` to be written to ``obj``'s status, unless it is already there.

        Args:
            obj: the policy object as cached by the informer (not modified; a
                reference is kept until the write, so do not mutate it).
            condition: the desired condition, usually ``type: Ready``. Without
                ``observedGeneration``, ``metadata.generation`` is used.

        Returns:
            ``True`` if a write was queued (or replaced a pending one),
            ``False`` if the cached status is already current.

        Raises:
            ValueError: ``obj`` is not a ClusterAdmissionPolicy/AdmissionPolicy.
        """
        status_path(obj)  # validate early, on the caller's stack
        key = PolicyKey.of(obj)
        wanted = _with_generation(obj, condition)
        if condition_is_current(obj, wanted):
            pending = self._pending.pop(key, None)
            if pending is not None:
                # The object already says it (another writer did it): nothing to do.
                self._attempts.pop(key, None)
            self._bump(skipped=1)
            return False
        self._pending[key] = _Desired(obj, wanted)
        self._attempts.pop(key, None)
        self._schedule(key)
        return True

    def forget(self, obj: dict[str, Any]) -> None:
        """Drop any pending write for ``obj`` (call on the informer's delete)."""
        key = PolicyKey.of(obj)
        self._pending.pop(key, None)
        self._attempts.pop(key, None)
        handle = self._retries.pop(key, None)
        if handle is not None:
            handle.cancel()
            if self._queue.empty() and not self._retries:
                self._idle.set()

    def resync(self) -> None:
        """Queue every pending write again, e.g. right after becoming leader."""
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        for key in list(self._pending):
            self._schedule(key)

    async def start(self) -> None:
        """Start the worker task. Idempotent."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._worker(), name="policy-status-writer")

    async def stop(self) -> None:
        """Cancel the worker and scheduled retries; wait for the worker to end."""
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_idle(self) -> None:
        """Wait until nothing is queued, being written or waiting for a retry (for tests and shutdown)."""
        while True:
            await self._idle.wait()
            if self._queue.empty() and not self._retries:
                return
            self._idle.clear()

    # -- worker -----------------------------------------------------------

    def _schedule(self, key: PolicyKey) -> None:
        if key in self._queued:
            return  # coalesced: the queued key will pick up the newest _pending entry
        handle = self._retries.pop(key, None)
        if handle is not None:
            handle.cancel()
        self._queued.add(key)
        self._idle.clear()
        self._queue.put_nowait(key)

    def _retry_later(self, key: PolicyKey) -> None:
        attempt = self._attempts.get(key, 0)
        if attempt >= self._backoff.max_attempts:
            _log.error("status writer: giving up on %s after %d attempts", key, attempt)
            self._pending.pop(key, None)
            self._attempts.pop(key, None)
            self._bump(dropped=1)
            return
        delay = self._backoff.delay(attempt)
        loop = asyncio.get_running_loop()
        self._retries[key] = loop.call_later(delay, self._retry_due, key)

    def _recheck_parked(self) -> None:
        self._recheck = None
        if self._is_leader():
            self.resync()
        elif self._pending:
            self._recheck = asyncio.get_running_loop().call_later(self._leader_recheck, self._recheck_parked)

    def _retry_due(self, key: PolicyKey) -> None:
        self._retries.pop(key, None)
        if key in self._pending:
            self._schedule(key)
        elif self._queue.empty() and not self._retries:
            self._idle.set()

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            try:
                await self._process(key)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 — the worker must outlive any one bad write
                _log.exception("status writer: unexpected error for %s", key)
                self._attempts[key] = self._attempts.get(key, 0) + 1
                self._bump(errors=1)
                self._retry_later(key)
            finally:
                self._queue.task_done()
                if self._queue.empty() and not self._retries:
                    self._idle.set()

    async def _process(self, key: PolicyKey) -> None:
        desired = self._pending.get(key)
        if desired is None:
            return
        if not self._is_leader():
            # Parked: stays in _pending until resync() after we become leader,
            # or until the periodic recheck finds we lead.
            if self._recheck is None:
                self._recheck = asyncio.get_running_loop().call_later(self._leader_recheck, self._recheck_parked)
            return
        self._attempts[key] = self._attempts.get(key, 0) + 1
        try:
            await self._write(desired)
        except ApiException as exc:
            if exc.status == 404:
                # Deleted meanwhile: there is no status to write.
                self._finish(key, desired)
                return
            if exc.status == 409:
                self._bump(conflicts=1)
                refreshed = await self._refresh(key, desired)
                if refreshed is None:
                    return
                # Retry at once with the fresh resourceVersion, still bounded by
                # max_attempts; conflicts resolve on the next try almost always.
                if self._attempts[key] < self._backoff.max_attempts:
                    self._schedule(key)
                else:
                    self._retry_later(key)
                return
            _log.warning("status writer: %s: HTTP %s %s", key, exc.status, exc.reason)
            self._bump(errors=1)
            self._retry_later(key)
            return
        except (TimeoutError, OSError) as exc:
            _log.warning("status writer: %s: %r", key, exc)
            self._bump(errors=1)
            self._retry_later(key)
            return
        self._bump(writes=1)
        self._finish(key, desired)

    def _finish(self, key: PolicyKey, desired: _Desired) -> None:
        # Only clear what we wrote: an enqueue during the write left a newer entry.
        if self._pending.get(key) is desired:
            del self._pending[key]
            self._attempts.pop(key, None)

    async def _refresh(self, key: PolicyKey, desired: _Desired) -> _Desired | None:
        """After a 409: re-read the object; return the write to retry, or ``None`` if done."""
        path = status_path(desired.obj).removesuffix("/status")
        try:
            fresh = await self._call("GET", path)
        except ApiException as exc:
            if exc.status == 404:
                self._finish(key, desired)
                return None
            raise
        if self._pending.get(key) is not desired:
            return None  # a newer enqueue superseded this write
        generation = (fresh.get("metadata") or {}).get("generation")
        wanted_generation = desired.condition.get("observedGeneration")
        if generation is not None and wanted_generation is not None and int(generation) > int(wanted_generation):
            # The spec changed since this condition was computed; writing it would
            # claim a stale compile result. The informer's update brings a new one.
            self._finish(key, desired)
            self._bump(skipped=1)
            return None
        if condition_is_current(fresh, desired.condition):
            self._finish(key, desired)
            self._bump(skipped=1)
            return None
        refreshed = _Desired(fresh, desired.condition)
        self._pending[key] = refreshed
        return refreshed

    async def _write(self, desired: _Desired) -> None:
        obj = desired.obj
        status = set_condition(obj.get("status") or {}, desired.condition, now=self._wall_clock())
        # PUT the object with its cached resourceVersion: the API server ignores
        # everything but status on the /status subresource and answers 409 if
        # the object changed since it was cached.
        body = {
            "apiVersion": obj.get("apiVersion") or _DEFAULT_API_VERSION,
            "kind": obj.get("kind"),
            "metadata": obj.get("metadata") or {},
            "spec": obj.get("spec") or {},
            "status": status,
        }
        await self._call("PUT", status_path(obj), body=body)

    async def _call(self, method: str, path: str, *, body: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self._api.call_api(
            path,
            method,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            response_types_map={200: "object", 201: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=self._request_timeout,
        )
        return result if isinstance(result, dict) else {}

    def _bump(self, **deltas: int) -> None:
        s = self._stats
        self._stats = StatusWriterStats(
            writes=s.writes + deltas.get("writes", 0),
            skipped=s.skipped + deltas.get("skipped", 0),
            conflicts=s.conflicts + deltas.get("conflicts", 0),
            errors=s.errors + deltas.get("errors", 0),
            dropped=s.dropped + deltas.get("dropped", 0),
        )
