"""LeaderElector against the fake API server over HTTP, on a virtual clock with client-go's durations."""

from __future__ import annotations

import logging

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.component.kube.conftest import FakeClock
from tests.fakeapi.server import FakeApiServer
from webhook.kube.leader import LeaderElectionConfig, LeaderElector

LEASE_KEY = "tollgate-system/tollgate-status-writer"
LEASE = 15.0
RENEW = 10.0
RETRY = 2.0


def _elector(api: ApiClient, clock: FakeClock, identity: str, events: list[tuple[str, str]]) -> LeaderElector:
    return LeaderElector(
        api,
        LeaderElectionConfig(
            lease_name="tollgate-status-writer",
            lease_namespace="tollgate-system",
            identity=identity,
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
        ),
        on_started_leading=lambda: events.append(("started", identity)),
        on_stopped_leading=lambda: events.append(("stopped", identity)),
        clock=clock,
        sleep=clock.sleep,
        rng=lambda: 0.0,  # no jitter: candidates poll every RETRY
    )


def _holder(fake: FakeApiServer) -> str:
    lease = fake.get("leases", LEASE_KEY)
    assert lease is not None
    return str(lease["spec"]["holderIdentity"])


async def test_exactly_one_of_two_leads(fake_api: FakeApiServer, api: ApiClient, clock: FakeClock) -> None:
    events: list[tuple[str, str]] = []
    a, b = _elector(api, clock, "pod-a", events), _elector(api, clock, "pod-b", events)
    await a.start()
    await b.start()
    try:
        await clock.run_until(lambda: a.is_leader() or b.is_leader(), parked=2)
        # Four lease durations: the follower must never take over from a renewing leader.
        for _ in range(int(4 * LEASE / 0.5)):
            await clock.advance(0.5, parked=2)
            assert a.is_leader() != b.is_leader()
        leader = "pod-a" if a.is_leader() else "pod-b"
        assert _holder(fake_api) == leader
        assert events == [("started", leader)]
        assert fake_api.count("PUT", "/tollgate-status-writer") >= 4 * LEASE / RETRY - 1, "renew every retry period"
        assert a.leader_identity() == b.leader_identity() == leader
    finally:
        await a.stop()
        await b.stop()


async def test_other_takes_over_within_lease_duration_after_leader_dies(
    fake_api: FakeApiServer, api: ApiClient, clock: FakeClock
) -> None:
    events: list[tuple[str, str]] = []
    a = _elector(api, clock, "pod-a", events)
    await a.start()
    await clock.run_until(a.is_leader, parked=1)
    b = _elector(api, clock, "pod-b", events)
    await b.start()
    try:
        await clock.advance(LEASE * 1.5, parked=2)  # b has observed several renewals
        assert not b.is_leader()
        # Crash: stop renewing without releasing the Lease.
        await a.stop(release=False)
        assert _holder(fake_api) == "pod-a"
        took = await clock.run_until(b.is_leader, parked=1)
        # b waits for expiry measured from when it last saw the record change
        # (at most one RETRY after the last renewal), then acquires on its next poll.
        assert LEASE - RETRY <= took <= LEASE + RETRY, took
        lease = fake_api.get("leases", LEASE_KEY)
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "pod-b"
        assert lease["spec"]["leaseTransitions"] == 1
        assert ("started", "pod-b") in events
    finally:
        await b.stop()


async def test_release_on_stop_hands_over_without_waiting_for_expiry(
    fake_api: FakeApiServer, api: ApiClient, clock: FakeClock
) -> None:
    events: list[tuple[str, str]] = []
    a = _elector(api, clock, "pod-a", events)
    await a.start()
    await clock.run_until(a.is_leader, parked=1)
    b = _elector(api, clock, "pod-b", events)
    await b.start()
    try:
        await clock.advance(LEASE, parked=2)
        await a.stop()  # release_on_stop defaults to True
        assert events[-1] == ("stopped", "pod-a")
        assert _holder(fake_api) == ""
        took = await clock.run_until(b.is_leader, parked=1)
        assert took <= RETRY, f"a released lease is taken at the next poll, took {took}s"
    finally:
        await b.stop()


async def test_leader_steps_down_when_it_cannot_renew(
    fake_api: FakeApiServer, api: ApiClient, clock: FakeClock
) -> None:
    events: list[tuple[str, str]] = []
    a = _elector(api, clock, "pod-a", events)
    await a.start()
    try:
        await clock.run_until(a.is_leader, parked=1)
        fake_api.fail("PUT", "/tollgate-status-writer", code=500, times=1000)
        took = await clock.run_until(lambda: not a.is_leader(), parked=1)
        # Gives up once RENEW has passed since the last successful renewal.
        assert RENEW - RETRY <= took <= RENEW + RETRY, took
        assert events == [("started", "pod-a"), ("stopped", "pod-a")]
        # ... and campaigns again once the API server recovers.
        fake_api.failures.clear()
        await clock.run_until(a.is_leader, parked=1)
        assert events[-1] == ("started", "pod-a")
    finally:
        await a.stop()


async def test_leader_stops_at_once_when_lease_is_taken(
    fake_api: FakeApiServer, api: ApiClient, clock: FakeClock
) -> None:
    events: list[tuple[str, str]] = []
    a = _elector(api, clock, "pod-a", events)
    await a.start()
    try:
        await clock.run_until(a.is_leader, parked=1)
        lease = fake_api.get("leases", LEASE_KEY)
        assert lease is not None
        fake_api.apply("leases", {**lease, "spec": {**lease["spec"], "holderIdentity": "intruder"}})
        took = await clock.run_until(lambda: not a.is_leader(), parked=1)
        assert took <= RETRY, took
        assert a.leader_identity() == "intruder"
    finally:
        await a.stop()
    # Not leading at stop: the intruder's Lease is left alone.
    assert _holder(fake_api) == "intruder"


async def test_an_unreachable_api_server_is_one_line_not_a_traceback_per_retry(
        fake_api: FakeApiServer, api: ApiClient, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    events: list[tuple[str, str]] = []
    elector = _elector(api, clock, "pod-a", events)
    fake_api.fail("GET", "/tollgate-status-writer", code=503, times=10)  # the Lease read keeps failing
    caplog.set_level(logging.DEBUG, logger="webhook.kube.leader")
    await elector.start()
    try:
        await clock.run_until(elector.is_leader, parked=1)
    finally:
        await elector.stop()
    lines = [r for r in caplog.records if r.name == "webhook.kube.leader"]
    failures = [r for r in lines if "HTTP 503" in r.getMessage()]
    assert len(failures) == 10, [r.getMessage() for r in lines]
    assert [r.levelno for r in failures] == [logging.WARNING] + [logging.DEBUG] * 9  # the first of the run only
    assert not any(r.exc_info for r in lines), "a traceback was logged"
    assert any("reachable again after 10 failed attempt(s)" in r.getMessage() for r in lines)
