"""StatusWriter against a fake API server over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.component.kube.conftest import FaultyAPI
from webhook.kube.status import Backoff, Condition, StatusWriter

CLUSTER_PATH = "/apis/tollgate.dev/v1alpha1/clusteradmissionpolicies/allowed-registries"
NAMESPACED_PATH = "/apis/tollgate.dev/v1alpha1/namespaces/team-a/admissionpolicies/team-rule"
READY = Condition(type="Ready", status="True", reason="Compiled", message="")
FAST = Backoff(initial=0.01, factor=2.0, cap=0.05, max_attempts=4)


def _cluster_policy(generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "tollgate.dev/v1alpha1",
        "kind": "ClusterAdmissionPolicy",
        "metadata": {"name": "allowed-registries", "generation": generation},
        "spec": {"validations": []},
    }


def _error(message: str) -> Condition:
    return Condition(type="Ready", status="False", reason="CompileError", message=message)


@pytest.fixture()
async def writer_factory(
    faulty_api: tuple[FaultyAPI, ApiClient],
) -> AsyncIterator[Callable[..., StatusWriter]]:
    """Build started StatusWriters on the fake; stop them at the end."""
    _, api = faulty_api
    writers: list[StatusWriter] = []

    def make(**kwargs: Any) -> StatusWriter:
        writer = StatusWriter(api, backoff=kwargs.pop("backoff", FAST), **kwargs)
        writers.append(writer)
        return writer

    yield make
    for writer in writers:
        await writer.stop()


async def _settle(writer: StatusWriter) -> None:
    await asyncio.wait_for(writer.wait_idle(), timeout=5)


async def test_writes_ready_condition_with_observed_generation(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy(generation=3))
    writer = writer_factory()
    await writer.start()

    assert writer.enqueue(cached, READY) is True
    await _settle(writer)

    stored = fake.objects[CLUSTER_PATH]
    assert stored["status"]["observedGeneration"] == 3
    [condition] = stored["status"]["conditions"]
    assert {k: condition[k] for k in ("type", "status", "reason", "message", "observedGeneration")} == {
        "type": "Ready",
        "status": "True",
        "reason": "Compiled",
        "message": "",
        "observedGeneration": 3,
    }
    assert condition["lastTransitionTime"].endswith("Z")
    assert fake.count("PUT", "/allowed-registries/status") == 1
    assert writer.stats.writes == 1

    # The informer then delivers the written object: nothing more to write.
    assert writer.enqueue(fake.objects[CLUSTER_PATH], READY) is False
    await _settle(writer)
    assert fake.count("PUT") == 1


async def test_namespaced_policy_uses_namespaced_status_path(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(
        NAMESPACED_PATH,
        {
            "apiVersion": "tollgate.dev/v1alpha1",
            "kind": "AdmissionPolicy",
            "metadata": {"name": "team-rule", "namespace": "team-a", "generation": 1},
            "spec": {},
        },
    )
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, _error("paramRef.namespace must be empty or team-a"))
    await _settle(writer)
    assert fake.count("PUT", "/namespaces/team-a/admissionpolicies/team-rule/status") == 1
    assert fake.objects[NAMESPACED_PATH]["status"]["conditions"][0]["reason"] == "CompileError"


async def test_enqueues_coalesce_to_the_newest(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy())
    writer = writer_factory()
    for i in range(5):
        writer.enqueue(cached, _error(f"error {i}"))
    await writer.start()
    await _settle(writer)
    assert fake.count("PUT") == 1
    assert fake.objects[CLUSTER_PATH]["status"]["conditions"][0]["message"] == "error 4"


async def test_conflict_rereads_and_retries(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy())
    # Someone else writes (e.g. a label change): our cached resourceVersion is stale.
    fake.put_object(CLUSTER_PATH, {**cached, "metadata": {**cached["metadata"], "labels": {"x": "y"}}})
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, READY)
    await _settle(writer)
    assert writer.stats.conflicts == 1
    assert writer.stats.writes == 1
    stored = fake.objects[CLUSTER_PATH]
    assert stored["status"]["conditions"][0]["reason"] == "Compiled"
    assert stored["metadata"]["labels"] == {"x": "y"}, "the other writer's change must survive"
    assert fake.count("GET") == 1


async def test_conflict_with_newer_generation_drops_stale_condition(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy(generation=1))
    fake.put_object(CLUSTER_PATH, _cluster_policy(generation=2))  # spec edited meanwhile
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, _error("old spec broken"))
    await _settle(writer)
    assert "status" not in fake.objects[CLUSTER_PATH], "a condition for generation 1 must not land on generation 2"
    assert fake.count("PUT") == 1 and writer.stats.writes == 0


async def test_conflict_when_someone_already_wrote_it(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy())
    # The previous leader wrote the same condition just before it lost the Lease.
    done = {**cached, "status": {"observedGeneration": 1, "conditions": [{**READY, "observedGeneration": 1}]}}
    fake.put_object(CLUSTER_PATH, done)
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, READY)
    await _settle(writer)
    assert fake.count("PUT") == 1 and writer.stats.writes == 0 and writer.stats.skipped == 1


async def test_server_errors_are_retried_with_backoff_then_dropped(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy())
    writer = writer_factory()
    await writer.start()

    fake.fail("PUT", "/status", status=503, times=2)
    writer.enqueue(cached, READY)
    await _settle(writer)
    assert fake.count("PUT") == 3
    assert writer.stats.errors == 2 and writer.stats.writes == 1

    fake.fail("PUT", "/status", status=500, times=100)
    writer.enqueue(fake.objects[CLUSTER_PATH], _error("broken"))
    await _settle(writer)
    assert fake.count("PUT") == 3 + FAST.max_attempts, "bounded: max_attempts, then give up"
    assert writer.stats.dropped == 1
    assert fake.objects[CLUSTER_PATH]["status"]["conditions"][0]["reason"] == "Compiled"


async def test_one_failing_policy_does_not_block_others(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    bad = fake.put_object(CLUSTER_PATH, _cluster_policy())
    good_path = CLUSTER_PATH.replace("allowed-registries", "other")
    good = fake.put_object(good_path, {**_cluster_policy(), "metadata": {"name": "other", "generation": 1}})
    slow = Backoff(initial=0.5, factor=1.0, cap=0.5, max_attempts=2)
    writer = writer_factory(backoff=slow)
    await writer.start()
    fake.fail("PUT", "/allowed-registries/status", status=500, times=100)
    writer.enqueue(bad, READY)
    writer.enqueue(good, READY)
    loop = asyncio.get_running_loop()
    start = loop.time()
    while "status" not in fake.objects[good_path]:
        assert loop.time() - start < 0.4, "the healthy policy waited behind the failing one's backoff"
        await asyncio.sleep(0.005)
    await writer.stop()


async def test_deleted_policy_is_dropped(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy())
    del fake.objects[CLUSTER_PATH]
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, READY)
    await _settle(writer)
    assert fake.count("PUT") == 1 and writer.stats.errors == 0 and writer.stats.writes == 0


async def test_only_the_leader_writes_and_resync_flushes_on_election(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy())
    leading = False
    writer = writer_factory(is_leader=lambda: leading)
    await writer.start()
    writer.enqueue(cached, READY)
    await _settle(writer)
    assert fake.count("PUT") == 0, "a follower must not write status"

    leading = True
    writer.resync()  # what on_started_leading is wired to
    await _settle(writer)
    assert fake.count("PUT") == 1
    assert fake.objects[CLUSTER_PATH]["status"]["conditions"][0]["type"] == "Ready"


def test_enqueue_rejects_non_policy_objects(faulty_api: tuple[FaultyAPI, ApiClient]) -> None:
    _, api = faulty_api
    writer = StatusWriter(api)
    with pytest.raises(ValueError):
        writer.enqueue({"kind": "ConfigMap", "metadata": {"name": "x"}}, READY)


async def test_parked_writes_are_rechecked_without_resync(
    faulty_api: tuple[FaultyAPI, ApiClient], writer_factory: Callable[..., StatusWriter]
) -> None:
    fake, _ = faulty_api
    cached = fake.put_object(CLUSTER_PATH, _cluster_policy())
    leading = False
    writer = writer_factory(is_leader=lambda: leading, leader_recheck=0.05)
    await writer.start()
    writer.enqueue(cached, READY)
    await asyncio.sleep(0.15)
    assert fake.count("PUT") == 0
    leading = True  # elected, but nobody calls resync()
    loop = asyncio.get_running_loop()
    start = loop.time()
    while "status" not in fake.objects[CLUSTER_PATH]:
        assert loop.time() - start < 1.0, "parked write never retried after becoming leader"
        await asyncio.sleep(0.01)
    assert fake.count("PUT") == 1
