"""Writes policy ``status`` (the ``Ready`` condition) to the API server, off the request path.

Callers (the policy informer's handler, when a ClusterAdmissionPolicy or
AdmissionPolicy is compiled) hand the policy object *as cached by the
informer* and the condition built by ``webhook.policy.status.ready_condition``
to :meth:`StatusWriter.enqueue`, which returns at once without I/O. One worker
task writes it with a JSON merge patch of the ``/status`` subresource::

    PATCH /apis/tollgate.dev/v1alpha1/clusteradmissionpolicies/p/status
    Content-Type: application/merge-patch+json
    {"status": {"observedGeneration": 3, "conditions": [{"type": "Ready", ..., "observedGeneration": 3}]}}

Contract:

* **Only on change.** Nothing is queued when the cached object already carries
  an equal condition (``type``, ``status``, ``reason``, ``message``,
  ``observedGeneration``); an enqueue that finds the object current drops any
  write still pending for it. ``lastTransitionTime`` moves only when
  ``status`` flips, as apimachinery's ``meta.SetStatusCondition``.
* **No optimistic concurrency needed.** The patch carries no
  ``resourceVersion``: the API server applies it to whatever is stored, so
  there is no 409 to handle. Staleness is stated instead of prevented: the
  condition's ``observedGeneration`` says which spec it describes (the
  Kubernetes API conventions' answer); when the spec changed meanwhile, the
  informer's update brings a newer condition right after.
* **Coalescing.** At most one pending write per policy (key = kind,
  namespace, name); a newer :meth:`enqueue` replaces it. The backlog is
  bounded by the number of policies.
* **Retries.** 5xx and network errors are retried per policy with
  ``webhook.informer.Backoff`` (a failing policy never delays another) up to
  ``max_attempts``, then dropped until the next enqueue. 404 (deleted
  meanwhile) drops the write.
* **Leader only.** While ``is_leader()`` is false writes stay pending;
  :meth:`resync` (wire it to the elector's ``on_started_leading``) wakes the
  worker, which otherwise rechecks every ``leader_recheck`` seconds.
* **Metrics.** ``tollgate_status_writes_total{result}`` and
  ``tollgate_status_pending`` (``webhook.metrics.StatusMetrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

from kubernetes_asyncio.client import ApiClient

from webhook.aio import cancel_and_wait
from webhook.informer import Backoff
from webhook.kube.api import MERGE_PATCH, ApiException, call_json
from webhook.metrics import StatusMetrics
from webhook.policy.resources import (
    CLUSTER_POLICIES,
    CLUSTER_POLICY_EXCEPTIONS,
    NAMESPACED_POLICIES,
    POLICY_EXCEPTIONS,
)
from webhook.policy.vocabulary import API_VERSION

__all__ = [
    "Condition",
    "PolicyKey",
    "StatusWriter",
    "condition_is_current",
    "set_condition",
    "status_patch",
    "status_path",
]

_log = logging.getLogger(__name__)

#: kind -> plural of the policy kinds and the exception kinds (the one static kind table; see manifests/crds/).
_PLURALS = {r.kind: r.plural for r in (CLUSTER_POLICIES, NAMESPACED_POLICIES, POLICY_EXCEPTIONS,
                                       CLUSTER_POLICY_EXCEPTIONS)}


class Condition(TypedDict):
    """``metav1.Condition`` on the wire (camelCase), as ``webhook.policy.status.ready_condition`` builds it."""

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
    def of(cls, obj: Mapping[str, Any]) -> PolicyKey:
        """The key of a policy object as decoded from JSON."""
        meta = obj.get("metadata") or {}
        return cls(obj.get("kind", ""), meta.get("namespace") or "", meta.get("name", ""))


def status_path(obj: Mapping[str, Any]) -> str:
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
    api_version = obj.get("apiVersion") or API_VERSION
    scope = f"/namespaces/{key.namespace}" if key.namespace else ""
    return f"/apis/{api_version}{scope}/{plural}/{key.name}/status"


def _same_condition(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(f) == b.get(f) for f in ("type", "status", "reason", "message", "observedGeneration"))


def condition_is_current(obj: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
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
    status: Mapping[str, Any],
    condition: Mapping[str, Any],
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
    new_status: dict[str, Any] = copy.deepcopy(dict(status))
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


def _with_generation(obj: Mapping[str, Any], condition: Mapping[str, Any]) -> dict[str, Any]:
    wanted = dict(condition)
    generation = (obj.get("metadata") or {}).get("generation")
    if "observedGeneration" not in wanted and generation is not None:
        wanted["observedGeneration"] = int(generation)
    return wanted


def status_patch(obj: Mapping[str, Any], condition: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """The merge patch that sets ``condition`` on ``obj``'s status (pure).

    Args:
        obj: the policy object as cached (its current ``status`` is the base,
            so other condition types survive; a merge patch replaces lists
            whole).
        condition: the condition to set; ``observedGeneration`` defaults to
            ``metadata.generation``.
        now: the time recorded as ``lastTransitionTime`` on a transition.

    Returns:
        ``{"status": {"conditions": [...], "observedGeneration": g}}``, the
        body of ``PATCH .../status`` with ``application/merge-patch+json``.
    """
    wanted = _with_generation(obj, condition)
    status = set_condition(obj.get("status") or {}, wanted, now=now)
    patch: dict[str, Any] = {"conditions": status["conditions"]}
    if "observedGeneration" in status:
        patch["observedGeneration"] = status["observedGeneration"]
    return {"status": patch}


@dataclass(slots=True)
class _Pending:
    # Mutable on purpose: attempts and not_before advance on each failure.
    obj: Mapping[str, Any]  # the object as last cached (base for the patch)
    condition: dict[str, Any]
    backoff: Backoff
    attempts: int = 0
    not_before: float = 0.0


class StatusWriter:
    """Coalescing queue + one worker that patches policy ``status`` (see the module docstring).

    Lifecycle: :meth:`start` creates the worker task, :meth:`stop` cancels it
    (pending writes are dropped; the next leader writes them). Everything runs
    on one event loop; :meth:`enqueue` never blocks and never does I/O, so it is
    safe to call from informer handlers.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient``; not closed here.
        is_leader: whether this replica may write now (e.g.
            ``LeaderElector.is_leader``); default: always.
        metrics: where to count writes (``webhook.metrics.StatusMetrics``,
            e.g. ``Metrics().status``); default: a private registry.
        backoff_factory: a fresh retry schedule per failing policy; default
            ``webhook.informer.Backoff(initial=0.2, cap=10)``.
        max_attempts: writes tried per enqueued condition before giving up.
        request_timeout: seconds per API request.
        leader_recheck: seconds between checks of ``is_leader`` while writes
            wait for leadership (a fallback for when :meth:`resync` is not
            wired to the elector).
        clock: monotonic seconds, for retry times; default ``time.monotonic``.
        wall_clock: UTC now, for ``lastTransitionTime``.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        metrics: StatusMetrics | None = None,
        backoff_factory: Callable[[], Backoff] = lambda: Backoff(initial=0.2, cap=10.0),
        max_attempts: int = 6,
        request_timeout: float = 10.0,
        leader_recheck: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = api_client
        self._is_leader = is_leader
        self.metrics = metrics if metrics is not None else StatusMetrics()
        self._backoff_factory = backoff_factory
        self._max_attempts = max_attempts
        self._request_timeout = request_timeout
        self._leader_recheck = leader_recheck
        self._clock = clock
        self._wall_clock = wall_clock
        self._pending: dict[PolicyKey, _Pending] = {}
        self._wakeup = asyncio.Event()  # set by enqueue/resync: the worker looks again
        self._idle = asyncio.Event()  # set while the worker has nothing it may do now
        self._task: asyncio.Task[None] | None = None

    # -- public API -------------------------------------------------------

    @property
    def pending(self) -> int:
        """Policies with a write not yet done (waiting for leadership, a retry, or the worker)."""
        return len(self._pending)

    def enqueue(self, obj: Mapping[str, Any], condition: Mapping[str, Any]) -> bool:
        """Ask for ``condition`` to be written to ``obj``'s status, unless it is already there.

        Args:
            obj: the policy object as cached by the informer (not modified; a
                reference is kept until the write, so do not mutate it).
            condition: the desired condition (``type: Ready``). Without
                ``observedGeneration``, ``metadata.generation`` is used.

        Returns:
            ``True`` if a write was queued (or replaced a pending one),
            ``False`` if the cached status is already current (any pending
            write for ``obj`` is then dropped: another writer did it).

        Raises:
            ValueError: ``obj`` is not a ClusterAdmissionPolicy/AdmissionPolicy.
        """
        status_path(obj)  # validate early, on the caller's stack
        key = PolicyKey.of(obj)
        wanted = _with_generation(obj, condition)
        if condition_is_current(obj, wanted):
            self._pending.pop(key, None)
            self.metrics.writes.labels("skipped").inc()
            self._changed()
            return False
        self._pending[key] = _Pending(obj, wanted, self._backoff_factory())
        self._changed()
        return True

    def forget(self, obj: Mapping[str, Any]) -> None:
        """Drop any pending write for ``obj`` (call on the informer's delete)."""
        self._pending.pop(PolicyKey.of(obj), None)
        self._changed()

    def resync(self) -> None:
        """Wake the worker to write everything pending now, e.g. right after becoming leader."""
        self._changed()

    async def start(self) -> None:
        """Start the worker task. Idempotent."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._worker(), name="policy-status-writer")

    async def stop(self) -> None:
        """Cancel the worker and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def wait_idle(self) -> None:
        """Wait until the worker has nothing it may do now: no pending write, or not the leader.

        For tests and shutdown; writes waiting for a retry count as work.
        """
        while True:
            await self._idle.wait()
            if not self._wakeup.is_set():
                return
            await asyncio.sleep(0)  # the worker has not looked at the latest change yet

    # -- worker -----------------------------------------------------------

    def _changed(self) -> None:
        self.metrics.pending.set(len(self._pending))
        self._idle.clear()
        self._wakeup.set()

    async def _worker(self) -> None:
        while True:
            self._wakeup.clear()
            timeout = await self._write_due()
            if timeout is None:
                self._idle.set()
            # Wait for an enqueue/resync, the next retry, or the leader recheck.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()

    async def _write_due(self) -> float | None:
        """Write every due policy; return seconds until the next thing to do (``None``: idle)."""
        if not self._pending:
            return None
        if not self._is_leader():
            self._idle.set()
            return self._leader_recheck
        now = self._clock()
        for key, item in list(self._pending.items()):
            if item.not_before <= now and self._pending.get(key) is item:
                await self._write(key, item)
        self.metrics.pending.set(len(self._pending))
        if not self._pending:
            return None
        return max(0.0, min(item.not_before for item in self._pending.values()) - self._clock())

    async def _write(self, key: PolicyKey, item: _Pending) -> None:
        item.attempts += 1
        body = status_patch(item.obj, item.condition, now=self._wall_clock())
        try:
            await call_json(self._api, "PATCH", status_path(item.obj), body=body, content_type=MERGE_PATCH,
                            timeout=self._request_timeout)
        except asyncio.CancelledError:
            raise
        except ApiException as exc:
            if exc.status == 404:
                self._done(key, item, "gone")  # deleted meanwhile: no status to write
                return
            _log.warning("status writer: %s: HTTP %s %s", key, exc.status, exc.reason)
            self._failed(key, item)
            return
        except Exception as exc:  # noqa: BLE001 — network errors; the worker must outlive any one write
            _log.warning("status writer: %s: %r", key, exc)
            self._failed(key, item)
            return
        self._done(key, item, "written")

    def _done(self, key: PolicyKey, item: _Pending, result: str) -> None:
        self.metrics.writes.labels(result).inc()
        # Only clear what we wrote: an enqueue during the write left a newer entry.
        if self._pending.get(key) is item:
            del self._pending[key]

    def _failed(self, key: PolicyKey, item: _Pending) -> None:
        if item.attempts >= self._max_attempts:
            _log.error("status writer: giving up on %s after %d attempts", key, item.attempts)
            self._done(key, item, "dropped")
            return
        self.metrics.writes.labels("error").inc()
        item.not_before = self._clock() + item.backoff.next_delay()
