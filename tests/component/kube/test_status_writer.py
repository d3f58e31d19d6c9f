"""StatusWriter against the fake API server over HTTP: merge patches of /status, retries, leadership, metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.fakeapi.server import FakeApiServer
from webhook.informer import Backoff
from webhook.kube.status import StatusWriter
from webhook.policy.status import ready_condition

POLICIES = "clusteradmissionpolicies"
READY = ready_condition(True, "Compiled", "", None)
MAX_ATTEMPTS = 4


def _fast() -> Backoff:
    return Backoff(initial=0.005, cap=0.02, jitter=0.0)


def _error(message: str) -> dict[str, Any]:
    return ready_condition(False, "CompileError", message, None)


def _policy(fake: FakeApiServer, name: str = "allowed-registries", **extra: Any) -> dict[str, Any]:
    return fake.apply(POLICIES, {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
                                 "metadata": {"name": name}, "spec": {"validations": []}, **extra})


def _written(writer: StatusWriter, result: str) -> float:
    value = writer.metrics.registry.get_sample_value("tollgate_status_writes_total", {"result": result})
    return value or 0.0


@pytest.fixture
async def writer_factory(api: ApiClient) -> AsyncIterator[Callable[..., StatusWriter]]:
    made: list[StatusWriter] = []

    def make(**kwargs: Any) -> StatusWriter:
        kwargs.setdefault("backoff_factory", _fast)
        kwargs.setdefault("max_attempts", MAX_ATTEMPTS)
        writer = StatusWriter(api, **kwargs)
        made.append(writer)
        return writer

    yield make
    for writer in made:
        await writer.stop()


async def _until(predicate: Callable[[], bool]) -> None:
    """Poll until ``predicate()``; the timeout only guards against a hang."""
    async with asyncio.timeout(5):
        while not predicate():
            await asyncio.sleep(0.005)


async def _settle(writer: StatusWriter) -> None:
    await asyncio.wait_for(writer.wait_idle(), timeout=5)


async def test_writes_ready_condition_by_merge_patch_of_status(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    cached = _policy(fake_api)
    cached = fake_api.apply(POLICIES, {**cached, "spec": {"validations": [{"expression": "true"}]}})  # generation 2
    writer = writer_factory()
    await writer.start()

    assert writer.enqueue(cached, READY) is True
    await _settle(writer)

    [patch] = [r for r in fake_api.requests if r["method"] == "PATCH"]
    assert patch["path"].endswith("/clusteradmissionpolicies/allowed-registries/status")
    assert patch["content_type"] == "application/merge-patch+json"
    stored = fake_api.get(POLICIES, "allowed-registries")
    assert stored is not None
    assert stored["status"]["observedGeneration"] == 2
    [condition] = stored["status"]["conditions"]
    assert {k: condition[k] for k in ("type", "status", "reason", "message", "observedGeneration")} == {
        "type": "Ready", "status": "True", "reason": "Compiled", "message": "", "observedGeneration": 2,
    }
    assert condition["lastTransitionTime"].endswith("Z")
    assert _written(writer, "written") == 1
    assert stored["metadata"]["generation"] == 2, "a status write does not bump the generation"

    # The informer then delivers the written object: nothing more to write.
    assert writer.enqueue(stored, READY) is False
    await _settle(writer)
    assert fake_api.count("PATCH") == 1
    assert _written(writer, "skipped") == 1


async def test_namespaced_policy_uses_namespaced_status_path(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    cached = fake_api.apply("admissionpolicies", {
        "apiVersion": "tollgate.dev/v1alpha1", "kind": "AdmissionPolicy",
        "metadata": {"name": "team-rule", "namespace": "team-a"}, "spec": {}})
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, _error("paramRef.namespace must be empty or team-a"))
    await _settle(writer)
    assert fake_api.count("PATCH", "/namespaces/team-a/admissionpolicies/team-rule/status") == 1
    stored = fake_api.get("admissionpolicies", "team-a/team-rule")
    assert stored is not None and stored["status"]["conditions"][0]["reason"] == "CompileError"


async def test_enqueues_coalesce_to_the_newest(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    cached = _policy(fake_api)
    writer = writer_factory()
    for i in range(5):
        writer.enqueue(cached, _error(f"error {i}"))
    assert writer.pending == 1
    await writer.start()
    await _settle(writer)
    assert fake_api.count("PATCH") == 1
    stored = fake_api.get(POLICIES, "allowed-registries")
    assert stored is not None and stored["status"]["conditions"][0]["message"] == "error 4"


async def test_a_stale_cache_needs_no_reread_and_keeps_other_writes(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    cached = _policy(fake_api)
    # Someone else writes (a label change) after the informer cached the policy.
    fake_api.apply(POLICIES, {**cached, "metadata": {**cached["metadata"], "labels": {"x": "y"}}})
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, READY)
    await _settle(writer)
    stored = fake_api.get(POLICIES, "allowed-registries")
    assert stored is not None
    assert stored["status"]["conditions"][0]["reason"] == "Compiled"
    assert stored["metadata"]["labels"] == {"x": "y"}, "the other writer's change must survive"
    assert fake_api.count("PATCH") == 1 and fake_api.count("GET") == 0


async def test_other_condition_types_survive(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    other = {"type": "Audited", "status": "True", "reason": "R", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
    cached = _policy(fake_api, status={"conditions": [other]})
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, READY)
    await _settle(writer)
    stored = fake_api.get(POLICIES, "allowed-registries")
    assert stored is not None
    assert [c["type"] for c in stored["status"]["conditions"]] == ["Audited", "Ready"]
    assert stored["status"]["conditions"][0] == other


async def test_server_errors_are_retried_with_backoff_then_dropped(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    cached = _policy(fake_api)
    writer = writer_factory()
    await writer.start()

    fake_api.fail("PATCH", "/status", code=503, times=2)
    writer.enqueue(cached, READY)
    await _settle(writer)
    assert fake_api.count("PATCH") == 3
    assert _written(writer, "error") == 2 and _written(writer, "written") == 1

    fake_api.fail("PATCH", "/status", code=500, times=100)
    current = fake_api.get(POLICIES, "allowed-registries")
    assert current is not None
    writer.enqueue(current, _error("broken"))
    await _settle(writer)
    assert fake_api.count("PATCH") == 3 + MAX_ATTEMPTS, "bounded: max_attempts, then give up"
    assert _written(writer, "dropped") == 1
    assert writer.pending == 0
    stored = fake_api.get(POLICIES, "allowed-registries")
    assert stored is not None and stored["status"]["conditions"][0]["reason"] == "Compiled"


async def test_one_failing_policy_does_not_block_others(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    bad = _policy(fake_api)
    good = _policy(fake_api, name="other")
    writer = writer_factory(backoff_factory=lambda: Backoff(initial=30.0, cap=30.0, jitter=0.0))
    await writer.start()
    fake_api.fail("PATCH", "/allowed-registries/status", code=500, times=100)
    writer.enqueue(bad, READY)
    writer.enqueue(good, READY)
    await _until(lambda: "status" in (fake_api.get(POLICIES, "other") or {}))
    # The healthy policy was written while the failing one waits out its 30 s backoff.
    assert fake_api.count("PATCH", "/allowed-registries/status") == 1
    assert writer.pending == 1


async def test_deleted_policy_is_dropped(fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]) -> None:
    cached = _policy(fake_api)
    fake_api.delete(POLICIES, "allowed-registries")
    writer = writer_factory()
    await writer.start()
    writer.enqueue(cached, READY)
    await _settle(writer)
    assert fake_api.count("PATCH") == 1
    assert _written(writer, "gone") == 1 and _written(writer, "error") == 0 and writer.pending == 0


async def test_only_the_leader_writes_and_resync_flushes_on_election(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    cached = _policy(fake_api)
    leading = False
    writer = writer_factory(is_leader=lambda: leading)
    await writer.start()
    writer.enqueue(cached, READY)
    await _settle(writer)
    assert fake_api.count("PATCH") == 0, "a follower must not write status"
    assert writer.pending == 1

    leading = True
    writer.resync()  # what on_started_leading is wired to
    await _settle(writer)
    assert fake_api.count("PATCH") == 1
    assert writer.metrics.registry.get_sample_value("tollgate_status_pending") == 0


async def test_a_follower_drops_its_pending_write_when_the_leader_wrote_it(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    cached = _policy(fake_api)
    follower = writer_factory(is_leader=lambda: False)
    leader = writer_factory()
    await follower.start()
    await leader.start()
    follower.enqueue(cached, READY)
    leader.enqueue(cached, READY)
    await _settle(leader)
    written = fake_api.get(POLICIES, "allowed-registries")
    assert written is not None
    # The follower's informer delivers the leader's write: its pending write is no longer needed.
    assert follower.enqueue(written, READY) is False
    assert follower.pending == 0


def test_enqueue_rejects_non_policy_objects(api: ApiClient) -> None:
    writer = StatusWriter(api)
    with pytest.raises(ValueError, match="not a policy object"):
        writer.enqueue({"kind": "ConfigMap", "metadata": {"name": "x"}}, READY)


async def test_waiting_writes_are_rechecked_without_resync(
    fake_api: FakeApiServer, writer_factory: Callable[..., StatusWriter]
) -> None:
    cached = _policy(fake_api)
    leading = False
    checks = 0

    def is_leader() -> bool:
        nonlocal checks
        checks += 1
        return leading

    writer = writer_factory(is_leader=is_leader, leader_recheck=0.01)
    await writer.start()
    writer.enqueue(cached, READY)
    await _until(lambda: checks >= 3)
    assert fake_api.count("PATCH") == 0
    leading = True  # elected, but nobody calls resync()
    await _until(lambda: fake_api.count("PATCH") > 0)
    await _settle(writer)
    stored = fake_api.get(POLICIES, "allowed-registries")
    assert stored is not None and stored["status"]["conditions"][0]["type"] == "Ready"
