"""Issue 7 item 4: with two replicas exactly one writes policy status; on leader loss the other takes over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client import ApiClient

from tests.component.kube.conftest import FaultyAPI
from webhook.kube.leader import LeaderElectionConfig, LeaderElector
from webhook.kube.status import Backoff, Condition, StatusWriter

POLICY_PATH = "/apis/tollgate.dev/v1alpha1/clusteradmissionpolicies/p{}"


class Replica:
    """One webhook replica's status machinery, wired as `tollgate serve` wires it."""

    def __init__(self, api: ApiClient, identity: str) -> None:
        self.writer = StatusWriter(api, is_leader=lambda: self.elector.is_leader(), backoff=Backoff(initial=0.01))
        self.elector = LeaderElector(
            api,
            LeaderElectionConfig(
                lease_name="tollgate-status-writer",
                lease_namespace="tollgate-system",
                identity=identity,
                lease_duration=0.3,
                renew_deadline=0.2,
                retry_period=0.05,
            ),
            on_started_leading=self.writer.resync,
            rng=lambda: 0.0,
        )

    async def start(self) -> None:
        await self.writer.start()
        await self.elector.start()

    async def stop(self, *, release: bool = True) -> None:
        await self.elector.stop(release=release)
        await self.writer.stop()


def _policy(fake: FaultyAPI, i: int) -> dict[str, Any]:
    return fake.put_object(
        POLICY_PATH.format(i),
        {
            "apiVersion": "tollgate.dev/v1alpha1",
            "kind": "ClusterAdmissionPolicy",
            "metadata": {"name": f"p{i}", "generation": 1},
            "spec": {},
        },
    )


async def _until(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        assert loop.time() - start < timeout, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_only_leader_writes_and_successor_writes_after_takeover(
    faulty_api: tuple[FaultyAPI, ApiClient],
) -> None:
    fake, api = faulty_api
    a, b = Replica(api, "pod-a"), Replica(api, "pod-b")
    await a.start()
    await _until(a.elector.is_leader)
    await b.start()
    try:
        ready = Condition(type="Ready", status="True", reason="Compiled", message="")
        first = _policy(fake, 1)
        # Both replicas' informers see the policy and both ask for the write.
        a.writer.enqueue(first, ready)
        b.writer.enqueue(first, ready)
        await _until(lambda: "status" in fake.objects[POLICY_PATH.format(1)])
        await asyncio.sleep(0.1)
        assert fake.count("PUT", "/p1/status") == 1, "exactly one replica writes"
        assert a.writer.stats.writes == 1 and b.writer.stats.writes == 0

        # The leader dies without releasing; a policy arrives meanwhile.
        await a.stop(release=False)
        second = _policy(fake, 2)
        b.writer.enqueue(second, ready)
        await asyncio.sleep(0.1)
        assert fake.count("PUT", "/p2/status") == 0, "no leader yet: nobody writes"
        await _until(b.elector.is_leader)
        await _until(lambda: "status" in fake.objects[POLICY_PATH.format(2)])
        # The fake stores the status before the writer has read the response and counted the write.
        await _until(lambda: b.writer.stats.writes == 1)
        # p1's parked write on b found it already written (409, reread, current): no second write.
        await asyncio.wait_for(b.writer.wait_idle(), timeout=3)
        assert b.writer.stats.writes == 1 and b.writer.stats.conflicts == 1
        assert fake.count("GET", "/p1") == 1
    finally:
        await b.stop()
        await a.stop()
