"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``tools/leaderelection``.

Only the leader writes policy status (``webhook.kube.status.StatusWriter``);
admission is answered by every replica regardless of who leads, so nothing on
the request path waits on this module.

The protocol is client-go's ``LeaderElector`` with a ``LeaseLock``:

* **Acquire** when the Lease does not exist (create it), has an empty
  ``holderIdentity`` (released), or has not changed for ``lease_duration``
  seconds *as observed on this replica's own monotonic clock* (client-go's
  ``observedTime``): expiry is never computed from the ``renewTime`` written by
  another machine, so clock skew between nodes cannot cause two leaders.
* **Renew** every ``retry_period`` seconds. If no renewal succeeds for
  ``renew_deadline`` seconds, or the Lease shows another holder, stop leading.
  Because ``renew_deadline < lease_duration``, the old leader stops before any
  candidate can consider the Lease expired.
* Every write is an optimistic-concurrency ``PUT`` carrying the
  ``resourceVersion`` that was read; a 409 Conflict means someone else wrote
  first and counts as a failed attempt.
* **Release** on :meth:`LeaderElector.stop` (client-go's
  ``ReleaseOnCancel``): write an empty ``holderIdentity`` so a successor can
  take over at once instead of after ``lease_duration``.

Unlike client-go's ``Run``, which returns after losing the lease (the process
is then expected to exit), a :class:`LeaderElector` that lost the lease goes
back to being a candidate: the webhook keeps serving admission and need not be
restarted.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client import ApiClient

from webhook.aio import cancel_and_wait
from webhook.kube.api import ApiException, call_json, describe

__all__ = [
    "JITTER_FACTOR",
    "LeaderElectionConfig",
    "LeaderElectionRecord",
    "LeaderElector",
    "lease_is_held_by_other",
]

_log = logging.getLogger(__name__)

#: client-go's ``JitterFactor``: a candidate waits ``retry_period * (1 + rand * 1.2)``
#: between acquire attempts, so candidates that started together spread out.
JITTER_FACTOR = 1.2

#: Format of ``metav1.MicroTime`` on the wire (``renewTime``, ``acquireTime``).
_MICRO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Settings of one election, named and defaulted as client-go's ``LeaderElectionConfig``.

    Attributes:
        lease_name: ``metadata.name`` of the Lease, e.g. ``"tollgate-status-writer"``.
        lease_namespace: namespace of the Lease, e.g. ``"tollgate-system"``.
        identity: ``holderIdentity`` written by this replica; the pod name.
        lease_duration: seconds a candidate waits, after it last saw the Lease
            change, before taking it over (client-go default 15).
        renew_deadline: seconds the leader keeps retrying a failed renewal
            before it stops leading (default 10). Must be below
            ``lease_duration``.
        retry_period: seconds between acquire or renew attempts (default 2).
            ``renew_deadline`` must exceed ``retry_period * JITTER_FACTOR``.
        release_on_stop: on :meth:`LeaderElector.stop`, clear
            ``holderIdentity`` so another replica takes over at once.

    Raises:
        ValueError: the durations violate client-go's ordering
            ``lease_duration > renew_deadline > retry_period * JITTER_FACTOR``,
            or a name is empty.
    """

    lease_name: str
    lease_namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_stop: bool = True

    def __post_init__(self) -> None:
        if not (self.lease_name and self.lease_namespace and self.identity):
            raise ValueError("lease_name, lease_namespace and identity must be non-empty")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= self.retry_period * JITTER_FACTOR:
            raise ValueError("renew_deadline must be greater than retry_period * JITTER_FACTOR")
        if self.retry_period <= 0:
            raise ValueError("retry_period must be positive")


@dataclass(frozen=True, slots=True)
class LeaderElectionRecord:
    """The election state stored in a Lease's ``spec`` (client-go ``resourcelock.LeaderElectionRecord``).

    Attributes:
        holder_identity: ``holderIdentity``; ``""`` when free or released.
        lease_duration_seconds: ``leaseDurationSeconds`` (integer seconds on the wire).
        acquire_time: ``acquireTime`` as sent (``metav1.MicroTime`` string) or ``None``.
        renew_time: ``renewTime`` as sent or ``None``.
        lease_transitions: ``leaseTransitions``, incremented on each change of holder.
    """

    holder_identity: str = ""
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: dict[str, Any]) -> LeaderElectionRecord:
        """Read the record from a Lease object as decoded from JSON."""
        spec = lease.get("spec") or {}
        return cls(
            holder_identity=spec.get("holderIdentity") or "",
            lease_duration_seconds=spec.get("leaseDurationSeconds"),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            lease_transitions=spec.get("leaseTransitions") or 0,
        )

    def to_spec(self) -> dict[str, Any]:
        """The Lease ``spec`` for this record, camelCase, ``None`` fields left out."""
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.lease_transitions,
        }
        return {k: v for k, v in spec.items() if v is not None}


def lease_is_held_by_other(
    observed: LeaderElectionRecord,
    identity: str,
    *,
    observed_time: float,
    now: float,
    lease_duration: float,
) -> bool:
    """Whether another replica holds a still-valid Lease, so ``identity`` must not take it.

    Pure; the decision of client-go's ``tryAcquireOrRenew``.

    Args:
        observed: the record last read from the Lease.
        identity: this replica's ``holderIdentity``.
        observed_time: this replica's monotonic clock (seconds) when it first
            saw ``observed`` (i.e. when the record last changed).
        now: the same monotonic clock now.
        lease_duration: seconds a record stays valid after it was observed.

    Returns:
        ``True`` while someone else's non-empty ``holderIdentity`` was seen
        change less than ``lease_duration`` seconds ago.
    """
    if not observed.holder_identity or observed.holder_identity == identity:
        return False
    return observed_time + lease_duration > now


def _micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_MICRO_TIME_FORMAT)


@dataclass(slots=True)
class _Observation:
    # Mutable on purpose: the elector's view of the Lease, updated on every read.
    record: LeaderElectionRecord = field(default_factory=LeaderElectionRecord)
    time: float = 0.0
    lease: dict[str, Any] | None = None


class LeaderElector:
    """Campaigns for one Lease and tells the caller when it leads.

    Lifecycle: :meth:`start` spawns the election task; :meth:`stop` cancels it,
    releases the Lease if held (``release_on_stop``) and calls
    ``on_stopped_leading``. Both run on the event loop; callbacks are plain
    functions called on the loop and must return quickly (start a task for
    slow work), as client-go asks of its ``LeaderCallbacks``.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient`` (in-cluster or
            kubeconfig); not closed by the elector.
        config: names and durations.
        on_started_leading: called when this replica becomes leader.
        on_stopped_leading: called when it stops leading (lost the Lease, or
            :meth:`stop` while leading).
        on_new_leader: called with the ``holderIdentity`` whenever the observed
            holder changes (including to this replica); optional.
        clock: monotonic clock in seconds, for expiry and deadlines; injectable
            for tests. Defaults to the event loop's clock.
        sleep: ``await sleep(seconds)`` between attempts; defaults to
            ``asyncio.sleep``. Tests pass a fake clock's ``sleep`` together
            with its ``clock`` so that time is virtual.
        wall_clock: returns the current UTC time for ``acquireTime``/``renewTime``
            (informational on the wire; never used for expiry).
        rng: source of jitter in ``[0, 1)``; injectable for deterministic tests.
    """

    def __init__(
        self,
        api_client: ApiClient,
        config: LeaderElectionConfig,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._api = api_client
        self._failures = 0  # consecutive failed attempts (see _failed)
        self._config = config
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._clock = clock
        self._sleep = sleep
        self._wall_clock = wall_clock
        self._rng = rng
        self._observed = _Observation()
        self._leading = False
        self._reported_leader: str | None = None
        self._task: asyncio.Task[None] | None = None
        base = f"/apis/coordination.k8s.io/v1/namespaces/{config.lease_namespace}/leases"
        self._collection_path = base
        self._lease_path = f"{base}/{config.lease_name}"

    @property
    def config(self) -> LeaderElectionConfig:
        """The election's settings."""
        return self._config

    def is_leader(self) -> bool:
        """Whether this replica currently leads (as of its last successful renewal)."""
        return self._leading

    def leader_identity(self) -> str:
        """``holderIdentity`` last observed on the Lease; ``""`` if none yet."""
        return self._observed.record.holder_identity

    async def start(self) -> None:
        """Start campaigning in a background task. Idempotent."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"leader-election:{self._config.lease_name}")

    async def stop(self, *, release: bool | None = None) -> None:
        """Stop campaigning; release the Lease if held, then call ``on_stopped_leading``.

        Args:
            release: override ``config.release_on_stop``. ``False`` leaves the
                Lease to expire, as a crashed replica would.
        """
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        if not self._leading:
            return
        do_release = self._config.release_on_stop if release is None else release
        if do_release:
            await self._release()
        self._set_leading(False)

    # -- the loop -------------------------------------------------------

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def _run(self) -> None:
        cfg = self._config
        while True:
            # Acquire: poll with jitter until we hold the Lease.
            while not await self._try_acquire_or_renew(deadline=cfg.renew_deadline):
                await self._sleep(cfg.retry_period * (1.0 + JITTER_FACTOR * self._rng()))
            self._set_leading(True)
            await self._renew_until_lost()
            self._set_leading(False)

    async def _renew_until_lost(self) -> None:
        cfg = self._config
        last_renewed = self._now()
        while True:
            await self._sleep(cfg.retry_period)
            remaining = cfg.renew_deadline - (self._now() - last_renewed)
            if remaining > 0 and await self._try_acquire_or_renew(deadline=remaining):
                last_renewed = self._now()
                continue
            if self._observed.record.holder_identity not in ("", cfg.identity):
                # Someone else holds it now: we certainly lost; retrying would only
                # prolong a window with two replicas believing they lead.
                _log.warning("leader election: lease %s taken by %s", cfg.lease_name, self.leader_identity())
                return
            if self._now() - last_renewed >= cfg.renew_deadline:
                _log.warning(
                    "leader election: failed to renew lease %s within %.3gs", cfg.lease_name, cfg.renew_deadline
                )
                return

    async def _try_acquire_or_renew(self, *, deadline: float) -> bool:
        """One attempt of client-go's ``tryAcquireOrRenew``; never raises (except cancellation).

        A failure is one log line, never a traceback; while the API server stays unreachable only the
        first failure of a run is a warning, the rest are debug, and the next success says how many failed.
        """
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
            # cancellation that arrives as the inner call completes, and stop()
            # would then wait forever for a loop that never ends.
            async with asyncio.timeout(deadline):
                held = await self._acquire_or_renew_once()
        except TimeoutError:
            self._failed(f"attempt timed out after {deadline:.3g}s", logging.INFO)
        except ApiException as exc:
            # 409: another replica wrote between our GET and PUT; just a lost race.
            self._failed(describe(exc), logging.DEBUG if exc.status == 409 else logging.WARNING)
        except Exception as exc:  # noqa: BLE001 — a network error must not end the election
            self._failed(describe(exc), logging.WARNING)
        else:
            if self._failures:
                _log.info("leader election: lease %s reachable again after %d failed attempt(s)",
                          self._config.lease_name, self._failures)
                self._failures = 0
            return held
        return False

    def _failed(self, why: str, level: int) -> None:
        """Log a failed attempt in one line: the first of a run at ``level``, the following ones at debug."""
        self._failures += 1
        if self._failures > 1:
            level = logging.DEBUG
        _log.log(level, "leader election: lease %s: %s", self._config.lease_name, why)

    async def _acquire_or_renew_once(self) -> bool:
        cfg = self._config
        now_wall = _micro_time(self._wall_clock())
        desired = LeaderElectionRecord(
            holder_identity=cfg.identity,
            # The wire field is whole seconds; round up so other tools never see
            # a shorter lease than we honour. Expiry itself uses our own
            # configured duration (all holders are replicas of one Deployment).
            lease_duration_seconds=max(1, math.ceil(cfg.lease_duration)),
            acquire_time=now_wall,
            renew_time=now_wall,
            lease_transitions=0,
        )
        try:
            lease = await call_json(self._api, "GET", self._lease_path)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.lease_name, "namespace": cfg.lease_namespace},
                "spec": desired.to_spec(),
            }
            created = await call_json(self._api, "POST", self._collection_path, body=body)
            self._observe(created)
            return True

        self._observe(lease)
        observed = self._observed.record
        if lease_is_held_by_other(
            observed,
            cfg.identity,
            observed_time=self._observed.time,
            now=self._now(),
            lease_duration=cfg.lease_duration,
        ):
            return False
        if observed.holder_identity == cfg.identity:
            # Renewal: keep the original acquireTime and transition count.
            desired = LeaderElectionRecord(
                holder_identity=cfg.identity,
                lease_duration_seconds=desired.lease_duration_seconds,
                acquire_time=observed.acquire_time or now_wall,
                renew_time=now_wall,
                lease_transitions=observed.lease_transitions,
            )
        else:
            desired = LeaderElectionRecord(
                holder_identity=cfg.identity,
                lease_duration_seconds=desired.lease_duration_seconds,
                acquire_time=now_wall,
                renew_time=now_wall,
                lease_transitions=observed.lease_transitions + 1,
            )
        updated = await call_json(self._api, "PUT", self._lease_path, body=self._with_spec(lease, desired))
        self._observe(updated)
        return True

    async def _release(self) -> None:
        """Clear ``holderIdentity`` (client-go ``release``) if we still hold the Lease."""
        lease = self._observed.lease
        if lease is None or self._observed.record.holder_identity != self._config.identity:
            return
        now_wall = _micro_time(self._wall_clock())
        released = LeaderElectionRecord(
            holder_identity="",
            lease_duration_seconds=1,
            acquire_time=now_wall,
            renew_time=now_wall,
            lease_transitions=self._observed.record.lease_transitions,
        )
        try:
            async with asyncio.timeout(self._config.renew_deadline):
                await call_json(self._api, "PUT", self._lease_path, body=self._with_spec(lease, released))
        except Exception:  # noqa: BLE001 — releasing is best effort; the Lease expires anyway
            _log.warning("leader election: could not release lease %s", self._config.lease_name, exc_info=True)

    # -- helpers --------------------------------------------------------

    @staticmethod
    def _with_spec(lease: dict[str, Any], record: LeaderElectionRecord) -> dict[str, Any]:
        # Send back the metadata we read, resourceVersion included: that makes the
        # PUT conditional (409 Conflict if anyone wrote in between).
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": dict(lease.get("metadata") or {}),
            "spec": record.to_spec(),
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        record = LeaderElectionRecord.from_lease(lease)
        if record != self._observed.record or self._observed.lease is None:
            # observedTime moves only when the record changes: a holder that stops
            # renewing leaves it frozen, and expiry counts from here.
            self._observed.record = record
            self._observed.time = self._now()
        self._observed.lease = lease
        if record.holder_identity and record.holder_identity != self._reported_leader:
            self._reported_leader = record.holder_identity
            if self._on_new_leader is not None:
                self._on_new_leader(record.holder_identity)

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        _log.info(
            "leader election: %s %s lease %s/%s",
            self._config.identity,
            "acquired" if leading else "lost",
            self._config.lease_namespace,
            self._config.lease_name,
        )
        callback = self._on_started if leading else self._on_stopped
        if callback is not None:
            callback()
