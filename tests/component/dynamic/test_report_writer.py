"""PolicyReportWriter against the fake API server with the API server's optimistic concurrency:
PUT with a stale resourceVersion and POST of an existing name answer 409, as kube-apiserver does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakeapi.server import FakeApiServer
from webhook.audit.evaluate import AuditResult, ResourceRef
from webhook.audit.reports import build_report
from webhook.informer import Backoff
from webhook.kube.client import api_client_for_url
from webhook.kube.reports import PolicyReportWriter, TokenBucket


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    # The fake answers 409 AlreadyExists to a POST of an existing object and 409 Conflict to a stale PUT.
    server = FakeApiServer()
    await server.start()
    yield server
    await server.stop()


def report(ns: str, *results: str) -> dict[str, Any]:
    return build_report(ns, [AuditResult("p", "validations[0]", r, "", ResourceRef("v1", "Pod", f"pod{i}", ns, None))
                             for i, r in enumerate(results)])


async def settle(writer: PolicyReportWriter) -> None:
    for _ in range(300):
        if writer.idle():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("writer did not settle")


def verbs(fake: FakeApiServer) -> list[str]:
    return [r["verb"] for r in fake.requests if r["resource"] == "policyreports"]


async def test_conflicts_are_resolved_by_reading_the_latest_version(fake: FakeApiServer) -> None:
    api = api_client_for_url(fake.url)
    writer = PolicyReportWriter(api, is_leader=lambda: True, batch_delay=0.01, idle_poll=0.02,
                                backoff_factory=lambda: Backoff(initial=0.01, cap=0.02))
    await writer.start()
    writer.submit("a", report("a", "pass"))
    await settle(writer)
    assert verbs(fake) == ["list", "post"]
    # Someone else touched the report: our resourceVersion is stale.
    stored = fake.state("policyreports")["a/tollgate-polr-ns-a"]
    fake.apply("policyreports", {**stored, "metadata": {**stored["metadata"], "annotations": {"x": "y"}}})
    writer.submit("a", report("a", "fail"))
    await settle(writer)
    assert verbs(fake)[2:] == ["put", "get", "put"]
    assert fake.state("policyreports")["a/tollgate-polr-ns-a"]["summary"]["fail"] == 1
    # The same content again: no request at all.
    writer.submit("a", report("a", "fail"))
    await asyncio.sleep(0.1)
    assert len(verbs(fake)) == 5 and writer.errors == 0
    await writer.stop()
    # A new writer (a new leader) first lists the managed reports, so an unchanged one is not even written.
    fresh = PolicyReportWriter(api, is_leader=lambda: True, batch_delay=0.01, idle_poll=0.02)
    fresh.submit("a", report("a", "fail"))
    fresh.submit("b", report("b", "pass"))
    await fresh.start()
    await settle(fresh)
    assert verbs(fake)[5:] == ["list", "post"]  # only b's report is new
    # A report created behind its back after that list: POST → 409 AlreadyExists → read → PUT.
    fake.apply("policyreports", report("c", "pass"))
    fresh.submit("c", report("c", "fail"))
    await settle(fresh)
    assert verbs(fake)[7:] == ["post", "get", "put"]
    assert fake.state("policyreports")["c/tollgate-polr-ns-c"]["summary"]["fail"] == 1
    await fresh.stop()
    await api.close()


def test_token_bucket_spends_the_burst_then_paces() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=10.0, burst=2, clock=lambda: now[0])
    assert [bucket.delay(), bucket.delay()] == [0.0, 0.0]
    assert bucket.delay() == pytest.approx(0.1)
    assert bucket.delay() == pytest.approx(0.2)
    now[0] = 1.0  # refills up to the burst, never beyond
    assert [bucket.delay(), bucket.delay()] == [0.0, 0.0]
    assert bucket.delay() == pytest.approx(0.1)
