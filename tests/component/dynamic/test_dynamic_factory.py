"""DynamicInformerFactory and DynamicInformers over the in-memory cluster (no sockets)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakeapi.server import Cluster
from webhook.informer import Backoff, ReflectorOptions
from webhook.informer.discovered import DynamicInformers
from webhook.informer.dynamic import Budget, BudgetExceededError, DynamicInformerFactory, json_size
from webhook.informer.gvr import GVR, APIResource, DiscoverySnapshot
from webhook.policy.model import ResourceRule

PODS = GVR("", "v1", "pods")
CMS = GVR("", "v1", "configmaps")
WIDGETS = GVR("example.com", "v1", "widgets")


def obj(name: str, ns: str = "default", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "managedFields": [{"manager": "x" * 50}]}, **extra}


def factory(cluster: Cluster, budget: Budget | None = None) -> DynamicInformerFactory:
    return DynamicInformerFactory(lambda gvr: cluster.lister_watcher(gvr.resource), budget=budget,
                                  reflector_options=ReflectorOptions(short_watch=0.0, use_watch_list=False))


async def settle(f: DynamicInformerFactory) -> None:
    for _ in range(200):
        if all(i.has_synced() and i.handlers_idle() for i in f.informers.values()):
            return
        await asyncio.sleep(0.005)
    raise AssertionError("informers did not settle")


async def test_reference_counting_starts_once_and_stops_after_last_owner(cluster: Cluster) -> None:
    await cluster.apply("pods", obj("a"))
    f = factory(cluster)
    started: list[GVR] = []
    stopped: list[GVR] = []
    f.add_listener(lambda g, _i: started.append(g), stopped.append)
    one = await f.acquire(PODS, "p1")
    two = await f.acquire(PODS, "p2")
    again = await f.acquire(PODS, "p1")
    assert one is two is again and started == [PODS]
    await settle(f)
    assert one.indexer.list_keys() == ["default/a"]
    assert len(cluster.fake.log("list", "pods")) == 1  # one LIST for three acquisitions
    await f.release(PODS, "p1")
    assert f.informer(PODS) is one and stopped == []
    await f.release(PODS, "p2")
    assert f.informer(PODS) is None and stopped == [PODS] and f.owners(PODS) == frozenset()
    await f.release(PODS, "p2")  # releasing what is not held is a no-op
    await f.stop()


async def test_usage_counts_objects_and_json_bytes_without_managed_fields(cluster: Cluster) -> None:
    for i in range(3):
        await cluster.apply("pods", obj(f"p{i}"))
    f = factory(cluster)
    inf = await f.acquire(PODS, "o")
    await settle(f)
    assert f.usage()[PODS].objects == 3
    assert f.usage()[PODS].bytes == sum(json_size(o) for o in inf.indexer.list())
    assert all("managedFields" not in o["metadata"] for o in inf.indexer.list())
    await cluster.apply("pods", obj("p0", spec={"big": "y" * 100}))
    await cluster.delete("pods", "default/p1")
    for _ in range(100):
        if f.usage()[PODS].objects == 2 and inf.handlers_idle():
            break
        await asyncio.sleep(0.005)
    assert f.usage()[PODS].objects == 2
    assert f.usage()[PODS].bytes == sum(json_size(o) for o in inf.indexer.list())
    await f.stop()


async def test_budget_refuses_when_spent_and_stops_an_informer_whose_list_overflows(cluster: Cluster) -> None:
    for i in range(3):
        await cluster.apply("pods", obj(f"p{i}"))
    for i in range(5):
        await cluster.apply("configmaps", obj(f"c{i}"))
    f = factory(cluster, Budget(max_objects=6))
    await f.acquire(PODS, "o")
    await settle(f)
    await f.acquire(CMS, "o")
    await settle(f)
    assert f.total().objects == 8
    assert await f.enforce_budget() == [CMS]  # the most recent one goes
    assert f.informer(CMS) is None and "8 objects > budget of 6" in f.refused[CMS]
    assert f.owners(CMS) == {"o"}
    # Retrying knows the last LIST's size and keeps refusing, saying why.
    with pytest.raises(BudgetExceededError, match="its last LIST would make 8 objects > budget of 6"):
        await f.acquire(CMS, "o2")
    # Spent budget: nothing new starts at all.
    f.budget = Budget(max_objects=3)
    with pytest.raises(BudgetExceededError, match="3 objects cached, budget is 3"):
        await f.acquire(WIDGETS, "o")
    f.budget = Budget(max_objects=100)
    assert await f.retry_refused() == {}
    assert f.informer(CMS) is not None and f.informer(WIDGETS) is not None
    await f.stop()


def snap(*gvrs: GVR) -> DiscoverySnapshot:
    versions: dict[str, tuple[str, ...]] = {}
    resources: dict[tuple[str, str], tuple[APIResource, ...]] = {}
    for g in gvrs:
        versions.setdefault(g.group, (g.version,))
        resources[(g.group, g.version)] = (*resources.get((g.group, g.version), ()),
                                           APIResource(g.resource, g.resource.title(), True))
    return DiscoverySnapshot(versions=versions, preferred={k: v[0] for k, v in versions.items()}, resources=resources)


def rule(group: str, resource: str) -> ResourceRule:
    return ResourceRule(frozenset({group}), frozenset({"*"}), frozenset({resource}), frozenset({"*"}))


async def test_rules_follow_discovery_and_owner_changes(cluster: Cluster) -> None:
    served = [snap(PODS)]

    async def discover() -> DiscoverySnapshot:
        return served[0]

    f = factory(cluster)
    dyn = DynamicInformers(f, discover, refresh_interval=0)
    heard: list[tuple[str, frozenset[GVR]]] = []
    dyn.add_listener(lambda owner, gvrs: heard.append((owner, gvrs)))
    assert await dyn.want("pol", [rule("example.com", "widgets"), rule("", "pods")]) == frozenset()  # no discovery yet
    await dyn.refresh()
    assert dyn.gvrs("pol") == {PODS} and set(f.informers) == {PODS}
    served[0] = snap(PODS, WIDGETS)  # a CRD appeared
    await dyn.refresh()
    assert dyn.gvrs("pol") == {PODS, WIDGETS} and set(f.informers) == {PODS, WIDGETS}
    assert await dyn.want("other", [rule("", "pods")]) == {PODS}
    assert await dyn.want("pol", [rule("example.com", "widgets")]) == {WIDGETS}
    assert set(f.informers) == {PODS, WIDGETS}  # pods still held by "other"
    served[0] = snap(PODS)  # the CRD went away
    await dyn.refresh()
    assert dyn.gvrs("pol") == frozenset() and set(f.informers) == {PODS}
    await dyn.forget("other")
    assert f.informers == {}
    assert heard == [("pol", frozenset({PODS})), ("pol", frozenset({PODS, WIDGETS})), ("other", frozenset({PODS})),
                     ("pol", frozenset({WIDGETS})), ("pol", frozenset()), ("other", frozenset())]
    await dyn.stop()


async def test_failed_discovery_is_retried_and_nothing_starts_meanwhile(cluster: Cluster) -> None:
    await cluster.apply("pods", obj("a"))
    calls = 0

    async def discover() -> DiscoverySnapshot:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("discovery is down")
        return snap(PODS)

    f = factory(cluster)
    dyn = DynamicInformers(f, discover, refresh_interval=0, backoff_factory=lambda: Backoff(initial=0.01, cap=0.01))
    await dyn.want("pol", [rule("", "pods")])
    assert f.informers == {}
    await dyn.start()
    assert await dyn.wait_discovered(5)
    assert calls == 3 and dyn.gvrs("pol") == {PODS}
    await settle(f)
    assert f.informer(PODS).indexer.list_keys() == ["default/a"]  # type: ignore[union-attr]
    await dyn.stop()
    assert f.informers == {}


async def test_default_exclusions_keep_reports_and_events_out_of_wildcards(cluster: Cluster) -> None:
    reports = GVR("wgpolicyk8s.io", "v1alpha2", "policyreports")
    events = GVR("", "v1", "events")

    async def discover() -> DiscoverySnapshot:
        return snap(PODS, events, reports)

    dyn = DynamicInformers(factory(cluster), discover, refresh_interval=0)
    await dyn.refresh()
    everything = ResourceRule(frozenset({"*"}), frozenset({"*"}), frozenset({"*"}), frozenset({"*"}))
    assert await dyn.want("all", [everything]) == {PODS}
    assert await dyn.want("named", [rule("wgpolicyk8s.io", "policyreports")]) == frozenset()
    await dyn.stop()
