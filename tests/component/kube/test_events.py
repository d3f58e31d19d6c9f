"""webhook.kube.events over HTTP against the fake API server: create, patch a repeat, and the answers that
are not errors (409 on create, 404 on patch)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.fakeapi.server import FakeApiServer
from webhook.kube.events import ApiEventSink, EventWriteError

EVENT = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web.17f", "namespace": "team-a"},
         "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": "web", "namespace": "team-a"},
         "reason": "PolicyViolation", "message": "p: no", "type": "Warning", "count": 1,
         "firstTimestamp": "2026-11-28T05:00:00Z", "lastTimestamp": "2026-11-28T05:00:00Z",
         "source": {"component": "tollgate"}, "reportingComponent": "tollgate", "reportingInstance": "pod-1"}


async def test_create_then_merge_patch_the_count(fake_api: FakeApiServer, api: ApiClient) -> None:
    sink = ApiEventSink(api)
    await sink.create("team-a", EVENT)
    assert await sink.patch("team-a", "web.17f", {"count": 2, "lastTimestamp": "2026-11-28T05:01:00Z",
                                                  "message": "p: no"})
    stored = fake_api.state("events")["team-a/web.17f"]
    assert (stored["count"], stored["lastTimestamp"], stored["firstTimestamp"]) == (
        2, "2026-11-28T05:01:00Z", "2026-11-28T05:00:00Z")
    patches = fake_api.log("patch", "events")
    assert patches and patches[0]["content_type"] == "application/merge-patch+json"


async def test_an_existing_event_on_create_is_not_an_error(fake_api: FakeApiServer, api: ApiClient) -> None:
    sink = ApiEventSink(api)
    await sink.create("team-a", EVENT)
    await sink.create("team-a", EVENT)  # 409 AlreadyExists, as client-go ignores it
    assert fake_api.count("POST", "/events") == 2


async def test_a_patch_of_an_expired_event_says_so(fake_api: FakeApiServer, api: ApiClient) -> None:
    assert await ApiEventSink(api).patch("team-a", "gone.1", {"count": 2}) is False


async def test_a_refused_write_is_one_line(fake_api: FakeApiServer, api: ApiClient) -> None:
    fake_api.fail("POST", "/namespaces/team-a/events", code=403)
    with pytest.raises(EventWriteError) as info:
        await ApiEventSink(api).create("team-a", EVENT)
    assert str(info.value) == "HTTP 403 Forbidden: injected 403"
