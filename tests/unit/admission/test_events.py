"""Events of denials and warnings: which reviews make them, and client-go's correlation (fake clock).

The figures are client-go's tools/record/events_cache.go defaults: a token bucket per object of
burst 25 refilled 1 per 300 s, aggregation after 10 distinct messages within 600 s, a repeat
PATCHed with its count.
"""

from __future__ import annotations

import asyncio
from typing import Any

from webhook.admission.events import (
    EventCorrelator,
    EventRecord,
    EventRecorder,
    bounded,
    records_for,
)
from webhook.policy.vocabulary import Action, PolicyResult, Result

DENY = PolicyResult("no-latest", Result.FAIL, "image tag latest", frozenset({Action.DENY}))
WARN = PolicyResult("team-a/labels", Result.FAIL, "missing label team", frozenset({Action.WARN}))
AUDIT = PolicyResult("audited", Result.FAIL, "audited only", frozenset({Action.AUDIT}))
IGNORED = PolicyResult("broken", Result.ERROR, "no such field", frozenset({Action.WARN, Action.IGNORED}))
PASS = PolicyResult("fine", Result.PASS, "", frozenset({Action.DENY}))


def request(**overrides: Any) -> dict[str, Any]:
    req: dict[str, Any] = {"uid": "u1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                           "name": "web", "namespace": "team-a", "operation": "CREATE",
                           "object": {"metadata": {"name": "web"}}}
    req.update(overrides)
    return req


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def record(message: str = "no-latest: image tag latest", name: str = "web") -> EventRecord:
    return EventRecord(reason="PolicyViolation", message=message, kind="Pod", api_version="v1", name=name,
                       namespace="team-a")


# -- which reviews make Events -----------------------------------------------------------------------


def test_a_denial_and_a_warning_each_make_one_event_audit_and_pass_none() -> None:
    records = records_for(request(), [DENY, WARN, AUDIT, PASS, IGNORED])
    assert [(r.reason, r.message) for r in records] == [
        ("PolicyViolation", "no-latest: image tag latest"),
        ("PolicyWarning", "team-a/labels: missing label team"),
        ("PolicyWarning", "broken: no such field"),
    ]
    assert {(r.kind, r.api_version, r.name, r.namespace, r.uid) for r in records} == {
        ("Deployment", "apps/v1", "web", "team-a", "")}


def test_a_dry_run_request_makes_no_event() -> None:
    assert records_for(request(dryRun=True), [DENY]) == []


def test_the_uid_is_the_existing_objects_on_update_and_delete_only() -> None:
    old = {"metadata": {"name": "web", "uid": "abc-123"}}
    assert records_for(request(operation="UPDATE", oldObject=old), [DENY])[0].uid == "abc-123"
    assert records_for(request(operation="DELETE", object=None, oldObject=old), [DENY])[0].uid == "abc-123"
    assert records_for(request(oldObject=old), [DENY])[0].uid == ""  # CREATE: the object does not exist yet


def test_core_group_and_generate_name() -> None:
    rec = records_for(request(kind={"group": "", "version": "v1", "kind": "Pod"}, name="",
                              object={"metadata": {"generateName": "web-"}}), [DENY])[0]
    assert (rec.api_version, rec.name) == ("v1", "web-")


def test_the_message_is_bounded_to_1_kib_without_splitting_a_character() -> None:
    long = PolicyResult("p", Result.FAIL, "é" * 2000, frozenset({Action.DENY}))
    message = records_for(request(), [long])[0].message
    assert len(message.encode()) <= 1024 and message.startswith("p: é") and message.endswith("é")
    assert bounded("short") == "short"


# -- the correlator ---------------------------------------------------------------------------------


def test_the_first_event_is_created_with_the_core_v1_fields() -> None:
    clock = Clock()
    write = EventCorrelator(instance="tollgate-7d9-abc", clock=clock).correlate(
        EventRecord(reason="PolicyViolation", message="m", kind="Deployment", api_version="apps/v1", name="web",
                    namespace="team-a", uid="abc"))
    assert write is not None and write.patch is None and write.namespace == "team-a"
    event = write.event
    assert event["metadata"]["name"] == f"web.{int(clock.now * 1e9):x}"  # client-go: <name>.<unix ns in hex>
    assert event["involvedObject"] == {"kind": "Deployment", "apiVersion": "apps/v1", "name": "web",
                                       "namespace": "team-a", "uid": "abc"}
    assert (event["type"], event["reason"], event["message"], event["count"]) == ("Warning", "PolicyViolation",
                                                                                  "m", 1)
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2027-01-15T08:00:00Z"
    assert (event["reportingComponent"], event["reportingInstance"], event["source"]) == (
        "tollgate", "tollgate-7d9-abc", {"component": "tollgate"})


def test_a_cluster_scoped_object_gets_its_event_in_default() -> None:
    write = EventCorrelator(clock=Clock()).correlate(
        EventRecord(reason="PolicyViolation", message="m", kind="Namespace", api_version="v1", name="prod",
                    namespace=""))
    assert write is not None and write.namespace == "default" and "namespace" not in write.event["involvedObject"]


def test_a_repeat_is_a_patch_of_the_first_event_with_its_count() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock)
    first = correlator.correlate(record())
    clock.now += 30
    second = correlator.correlate(record())
    clock.now += 30
    third = correlator.correlate(record())
    assert first is not None and second is not None and third is not None
    assert second.event["metadata"]["name"] == third.event["metadata"]["name"] == first.event["metadata"]["name"]
    assert second.patch == {"count": 2, "lastTimestamp": "2027-01-15T08:00:30Z",
                            "message": "no-latest: image tag latest"}
    assert third.patch is not None and third.patch["count"] == 3
    assert third.event["firstTimestamp"] == first.event["firstTimestamp"]


def test_another_object_or_message_is_another_event() -> None:
    correlator = EventCorrelator(clock=Clock())
    a = correlator.correlate(record())
    b = correlator.correlate(record(name="api"))
    c = correlator.correlate(record(message="no-latest: other"))
    assert a is not None and b is not None and c is not None
    assert b.patch is None and c.patch is None
    assert len({a.event["metadata"]["name"], b.event["metadata"]["name"], c.event["metadata"]["name"]}) == 3


def test_ten_distinct_messages_within_ten_minutes_are_combined() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock)
    writes = []
    for i in range(12):
        clock.now += 50  # each within 600 s of the last
        writes.append(correlator.correlate(record(message=f"p{i}: denied")))
    assert all(w is not None for w in writes)
    assert [w.event["message"] for w in writes[:9] if w] == [f"p{i}: denied" for i in range(9)]
    tenth, eleventh, twelfth = writes[9], writes[10], writes[11]
    assert tenth is not None and tenth.patch is None
    assert tenth.event["message"] == "(combined from similar events): p9: denied"
    # Later ones update the combined Event (the aggregate key) instead of creating more.
    assert eleventh is not None and eleventh.patch == {
        "count": 2, "lastTimestamp": eleventh.event["lastTimestamp"],
        "message": "(combined from similar events): p10: denied"}
    assert twelfth is not None and twelfth.event["metadata"]["name"] == tenth.event["metadata"]["name"]


def test_aggregation_starts_afresh_after_ten_quiet_minutes() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock)
    for i in range(9):
        correlator.correlate(record(message=f"p{i}: denied"))
    clock.now += 601
    write = correlator.correlate(record(message="p9: denied"))
    assert write is not None and write.event["message"] == "p9: denied"


def test_the_spam_filter_allows_a_burst_of_25_then_one_per_five_minutes() -> None:
    clock = Clock()
    correlator = EventCorrelator(clock=clock)
    passed = [correlator.correlate(record()) is not None for _ in range(30)]
    assert passed == [True] * 25 + [False] * 5
    assert correlator.correlate(record(name="other")) is not None  # the bucket is per object
    clock.now += 299
    assert correlator.correlate(record()) is None
    clock.now += 1
    written = correlator.correlate(record())
    assert written is not None and correlator.correlate(record()) is None
    # As in client-go, the held-back occurrences were counted: the PATCH carries the true count.
    assert written.patch is not None and written.patch["count"] == 32


def test_the_caches_are_bounded() -> None:
    correlator = EventCorrelator(clock=Clock(), cache_entries=3)
    for i in range(10):
        correlator.correlate(record(name=f"o{i}"))
    first_again = correlator.correlate(record(name="o0"))
    assert first_again is not None and first_again.patch is None  # forgotten: created anew, as an LRU does


# -- the recorder: a bounded queue off the request path --------------------------------------------


class Sink:
    def __init__(self, *, gone: bool = False, fail: bool = False) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.patched: list[tuple[str, str, dict[str, Any]]] = []
        self.gone, self.fail = gone, fail

    async def create(self, namespace: str, event: dict[str, Any]) -> None:
        if self.fail:
            raise RuntimeError("HTTP 403 Forbidden: events is forbidden\nsecond line")
        self.created.append((namespace, event))

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        if self.gone:
            return False
        self.patched.append((namespace, name, patch))
        return True


async def test_a_full_queue_drops_and_counts_without_waiting() -> None:
    outcomes: list[str] = []
    recorder = EventRecorder(Sink(), EventCorrelator(clock=Clock()), max_queue=2, on_outcome=outcomes.append)
    for _ in range(3):
        recorder.record(request(), [DENY])  # synchronous: nothing here can wait
    assert recorder.queue.qsize() == 2 and outcomes == ["dropped"]


async def test_the_writer_creates_then_patches() -> None:
    sink, outcomes = Sink(), []
    recorder = EventRecorder(sink, EventCorrelator(clock=Clock()), on_outcome=outcomes.append)
    task = asyncio.get_running_loop().create_task(recorder.run())
    try:
        recorder.record(request(), [DENY])
        recorder.record(request(), [DENY])
        await recorder.queue.join()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert outcomes == ["created", "patched"]
    assert sink.created[0][0] == "team-a" and sink.patched[0][2]["count"] == 2


async def test_a_repeat_whose_event_expired_is_created_again() -> None:
    sink, outcomes = Sink(gone=True), []
    recorder = EventRecorder(sink, EventCorrelator(clock=Clock()), on_outcome=outcomes.append)
    await recorder.write(record())
    await recorder.write(record())
    assert outcomes == ["created", "created"] and sink.created[1][1]["count"] == 2


async def test_a_failed_write_is_counted_and_logged_in_one_line(caplog: Any) -> None:
    outcomes: list[str] = []
    recorder = EventRecorder(Sink(fail=True), EventCorrelator(clock=Clock()), on_outcome=outcomes.append)
    await recorder.write(record())
    assert outcomes == ["failed"]
    assert "could not write an event: RuntimeError: HTTP 403 Forbidden: events is forbidden" in caplog.text
    assert "second line" not in caplog.text and "Traceback" not in caplog.text


async def test_a_throttled_record_is_counted() -> None:
    outcomes: list[str] = []
    recorder = EventRecorder(Sink(), EventCorrelator(clock=Clock(), burst=1), on_outcome=outcomes.append)
    await recorder.write(record())
    await recorder.write(record())
    assert outcomes == ["created", "throttled"]
