"""LeaderElector against a fake API server over HTTP, with sub-second durations."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kubernetes_asyncio.client import ApiClient

from tests.component.kube.conftest import FaultyAPI
from webhook.kube.leader import LeaderElectionConfig, LeaderElector

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/tollgate-system/leases/tollgate-status-writer"
LEASE = 0.3
RENEW = 0.2
RETRY = 0.05


def _config(identity: str) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        lease_name="tollgate-status-writer",
        lease_namespace="tollgate-system",
        identity=identity,
        lease_duration=LEASE,
        renew_deadline=RENEW,
        retry_period=RETRY,
    )


def _elector(api: ApiClient, identity: str, events: list[tuple[str, str]]) -> LeaderElector:
    return LeaderElector(
        api,
        _config(identity),
        on_started_leading=lambda: events.append(("started", identity)),
        on_stopped_leading=lambda: events.append(("stopped", identity)),
        rng=lambda: 0.0,  # no jitter: deterministic polling every RETRY
    )


async def _until(predicate: Callable[[], bool], timeout: float = 3.0) -> float:
    """Poll ``predicate`` every 5 ms; return the seconds it took. Fails after ``timeout``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        assert loop.time() - start < timeout, "condition not reached in time"
        await asyncio.sleep(0.005)
    return loop.time() - start


async def test_exactly_one_of_two_leads(faulty_api: tuple[FaultyAPI, ApiClient]) -> None:
    fake, api = faulty_api
    events: list[tuple[str, str]] = []
    a, b = _elector(api, "pod-a", events), _elector(api, "pod-b", events)
    await a.start()
    await b.start()
    try:
        await _until(lambda: a.is_leader() or b.is_leader())
        # Several lease durations: the follower must never take over from a renewing leader.
        for _ in range(12):
            await asyncio.sleep(LEASE / 4)
            assert a.is_leader() != b.is_leader()
        leader = "pod-a" if a.is_leader() else "pod-b"
        assert fake.objects[LEASE_PATH]["spec"]["holderIdentity"] == leader
        assert events == [("started", leader)]
        assert fake.count("PUT", "/tollgate-status-writer") >= 10, "leader must renew every retry period"
        assert a.leader_identity() == b.leader_identity() == leader
    finally:
        await a.stop()
        await b.stop()


async def test_other_takes_over_within_lease_duration_after_leader_dies(
    faulty_api: tuple[FaultyAPI, ApiClient],
) -> None:
    fake, api = faulty_api
    events: list[tuple[str, str]] = []
    a = _elector(api, "pod-a", events)
    await a.start()
    await _until(a.is_leader)
    b = _elector(api, "pod-b", events)
    await b.start()
    try:
        await asyncio.sleep(LEASE * 1.5)  # b has observed several renewals
        assert not b.is_leader()
        # Crash: stop renewing without releasing the Lease.
        await a.stop(release=False)
        assert fake.objects[LEASE_PATH]["spec"]["holderIdentity"] == "pod-a"
        took = await _until(b.is_leader)
        # b waits for expiry measured from when it last saw the record change
        # (at most one RETRY after the last renewal), then acquires on its next poll.
        assert LEASE - RETRY - 0.02 <= took <= LEASE + 2 * RETRY + 0.15, took
        spec = fake.objects[LEASE_PATH]["spec"]
        assert spec["holderIdentity"] == "pod-b"
        assert spec["leaseTransitions"] == 1
        assert ("started", "pod-b") in events
    finally:
        await b.stop()


async def test_release_on_stop_hands_over_without_waiting_for_expiry(
    faulty_api: tuple[FaultyAPI, ApiClient],
) -> None:
    fake, api = faulty_api
    events: list[tuple[str, str]] = []
    a = _elector(api, "pod-a", events)
    await a.start()
    await _until(a.is_leader)
    b = _elector(api, "pod-b", events)
    await b.start()
    try:
        await asyncio.sleep(LEASE)
        await a.stop()  # release_on_stop defaults to True
        assert events[-1] == ("stopped", "pod-a")
        assert fake.objects[LEASE_PATH]["spec"]["holderIdentity"] == ""
        took = await _until(b.is_leader)
        assert took < LEASE - RETRY, f"released lease should be taken at the next poll, took {took:.3f}s"
    finally:
        await b.stop()


async def test_leader_steps_down_when_it_cannot_renew(faulty_api: tuple[FaultyAPI, ApiClient]) -> None:
    fake, api = faulty_api
    events: list[tuple[str, str]] = []
    a = _elector(api, "pod-a", events)
    await a.start()
    try:
        await _until(a.is_leader)
        fake.fail("PUT", "/tollgate-status-writer", status=500, times=1000)
        took = await _until(lambda: not a.is_leader())
        # Gives up once RENEW has passed since the last successful renewal.
        assert took <= RENEW + 2 * RETRY + 0.1, took
        assert events == [("started", "pod-a"), ("stopped", "pod-a")]
        # ... and campaigns again once the API server recovers.
        fake.faults.clear()
        await _until(a.is_leader)
        assert events[-1] == ("started", "pod-a")
    finally:
        await a.stop()


async def test_leader_stops_at_once_when_lease_is_taken(faulty_api: tuple[FaultyAPI, ApiClient]) -> None:
    fake, api = faulty_api
    events: list[tuple[str, str]] = []
    a = _elector(api, "pod-a", events)
    await a.start()
    try:
        await _until(a.is_leader)
        lease = fake.objects[LEASE_PATH]
        fake.put_object(LEASE_PATH, {**lease, "spec": {**lease["spec"], "holderIdentity": "intruder"}})
        took = await _until(lambda: not a.is_leader())
        assert took <= 2 * RETRY + 0.1, took
        assert a.leader_identity() == "intruder"
    finally:
        await a.stop()
    # Not leading at stop: the intruder's Lease is left alone.
    assert fake.objects[LEASE_PATH]["spec"]["holderIdentity"] == "intruder"
