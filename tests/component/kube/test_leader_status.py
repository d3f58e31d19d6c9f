"""With two replicas exactly one writes policy status; on leader loss the other takes over (virtual clock)."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio.client import ApiClient

from tests.component.kube.conftest import FakeClock
from tests.fakeapi.server import FakeApiServer
from webhook.informer import Backoff
from webhook.kube.leader import LeaderElectionConfig, LeaderElector
from webhook.kube.status import StatusWriter
from webhook.policy.status import ready_condition

POLICIES = "clusteradmissionpolicies"
READY = ready_condition(True, "Compiled", "", None)


class Replica:
    """One webhook replica's status machinery, wired as `tollgate serve` wires it."""

    def __init__(self, api: ApiClient, clock: FakeClock, identity: str) -> None:
        self.writer = StatusWriter(api, is_leader=self._is_leader,
                                   backoff_factory=lambda: Backoff(initial=0.01, jitter=0.0))
        self.elector = LeaderElector(
            api,
            LeaderElectionConfig(lease_name="tollgate-status-writer", lease_namespace="tollgate-system",
                                 identity=identity),
            on_started_leading=self.writer.resync,
            clock=clock,
            sleep=clock.sleep,
            rng=lambda: 0.0,
        )

    def _is_leader(self) -> bool:
        return self.elector.is_leader()

    async def start(self) -> None:
        await self.writer.start()
        await self.elector.start()

    async def stop(self, *, release: bool = True) -> None:
        await self.elector.stop(release=release)
        await self.writer.stop()


def _policy(fake: FakeApiServer, i: int) -> dict[str, Any]:
    return fake.apply(POLICIES, {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
                                 "metadata": {"name": f"p{i}"}, "spec": {}})


async def test_only_leader_writes_and_successor_writes_after_takeover(
    fake_api: FakeApiServer, api: ApiClient, clock: FakeClock
) -> None:
    a, b = Replica(api, clock, "pod-a"), Replica(api, clock, "pod-b")
    await a.start()
    await clock.run_until(a.elector.is_leader, parked=1)
    await b.start()
    try:
        await clock.advance(4.0, parked=2)
        first = _policy(fake_api, 1)
        # Both replicas' informers see the policy and both ask for the write.
        a.writer.enqueue(first, READY)
        b.writer.enqueue(first, READY)
        await asyncio.wait_for(a.writer.wait_idle(), timeout=5)
        await asyncio.wait_for(b.writer.wait_idle(), timeout=5)
        assert fake_api.count("PATCH", "/p1/status") == 1, "exactly one replica writes"
        # b's informer then delivers a's write, which retires b's pending write.
        written = fake_api.get(POLICIES, "p1")
        assert written is not None and b.writer.enqueue(written, READY) is False

        # The leader dies without releasing; a policy arrives meanwhile.
        await a.stop(release=False)
        second = _policy(fake_api, 2)
        b.writer.enqueue(second, READY)
        await asyncio.wait_for(b.writer.wait_idle(), timeout=5)
        assert fake_api.count("PATCH", "/p2/status") == 0, "no leader yet: nobody writes"
        took = await clock.run_until(b.elector.is_leader, parked=1)
        assert took <= 15.0 + 2.0
        await asyncio.wait_for(b.writer.wait_idle(), timeout=5)
        stored = fake_api.get(POLICIES, "p2")
        assert stored is not None and stored["status"]["conditions"][0]["reason"] == "Compiled"
        assert fake_api.count("PATCH") == 2, "p1 was not written again"
    finally:
        await b.stop()
        await a.stop()
