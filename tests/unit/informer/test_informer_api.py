"""SharedInformer and Reflector against scripted ListerWatchers, an injected clock and an injected sleep.

Each test is written to fail on one plausible bug (named in its docstring): the mutants of issue 22 and
the failure paths of issues 20 and 21.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.unit.informer.test_reflector import ScriptedListerWatcher, cm, handlers_caught_up
from webhook.informer import (
    Backoff,
    DeletedFinalStateUnknown,
    InformerKey,
    ListOptions,
    ListResult,
    ReflectorOptions,
    ResourceEventHandlerFuncs,
    SharedInformer,
    SharedInformerFactory,
    SyncHandlerError,
    WatchEvent,
    keep_fields,
)
from webhook.informer.errors import ApiStatusError, ConnectError, StreamError
from webhook.informer.handlers import SYNC_CALL_BUDGET
from webhook.informer.reflector import INITIAL_EVENTS_END

END = {"kind": "ConfigMap", "apiVersion": "v1",
       "metadata": {"resourceVersion": "20", "annotations": {INITIAL_EVENTS_END: "true"}}}


class FakeTime:
    """A clock that only moves when the code under test sleeps; every sleep is recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep: Any = None

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay
        if self.on_sleep is not None:
            await self.on_sleep(delay)
        await asyncio.sleep(0)

    def backoff(self, rng: float = 0.0) -> Backoff:
        return Backoff(clock=self.clock, rng=lambda: rng)


def informer(lw: Any, t: FakeTime | None = None, **options: Any) -> SharedInformer:
    t = t or FakeTime()
    opts = {"short_watch": 0.0, "backoff_factory": t.backoff, **options}
    return SharedInformer(lw, name="cm", reflector_options=ReflectorOptions(**opts), sleep=t.sleep, clock=t.clock)


class Calls:
    """A loop-side handler recording every call."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def funcs(self) -> ResourceEventHandlerFuncs:
        return ResourceEventHandlerFuncs(
            add=lambda o, initial: self.events.append(("add", o["metadata"]["name"], initial)),
            update=lambda old, new: self.events.append(("update", new["metadata"]["name"], old, new)),
            delete=lambda o: self.events.append(("delete", o)), sync_calls="loop")


async def run(inf: SharedInformer, lw: ScriptedListerWatcher) -> None:
    await inf.start()
    await asyncio.wait_for(lw.exhausted.wait(), 5)
    await handlers_caught_up(inf)
    await inf.stop()


# -- LIST ------------------------------------------------------------------------------------------------------------

async def test_a_failing_second_page_applies_nothing_of_the_first() -> None:
    """Bug: page 1 kept in the store (and the informer synced) when page 2 fails."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1")], "10", continue_token="t"), ApiStatusError(500, "InternalError", "boom")]
    t = FakeTime()
    seen: list[tuple[bool, int]] = []
    gate = asyncio.Event()

    async def at_backoff(_delay: float) -> None:
        seen.append((inf.has_synced(), len(inf.indexer)))
        await gate.wait()

    t.on_sleep = at_backoff
    inf = informer(lw, t)
    await inf.start()
    async with asyncio.timeout(5):
        while not seen:
            await asyncio.sleep(0)
    await inf.stop()
    assert seen == [(False, 0)]


async def test_the_transform_runs_on_each_page_before_the_next_is_fetched() -> None:
    """Bug: the transform applied only once the whole LIST is held (memory bounded by the list, not a page)."""
    transformed: list[str] = []
    at_list: list[int] = []

    class Lister(ScriptedListerWatcher):
        async def list(self, options: ListOptions) -> ListResult:
            at_list.append(len(transformed))
            return await super().list(options)

    lw = Lister()
    lw.lists = [ListResult([cm("a", "1"), cm("b", "2")], "10", continue_token="t"), ListResult([cm("c", "3")], "10")]

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        transformed.append(obj["metadata"]["name"])
        return obj

    inf = SharedInformer(lw, name="cm", transform=transform, reflector_options=ReflectorOptions(short_watch=0.0))
    await run(inf, lw)
    assert at_list == [0, 2] and transformed == ["a", "b", "c"]


async def test_a_relist_tombstone_carries_the_last_known_object() -> None:
    """Bug: a DeletedFinalStateUnknown with an empty (or no) object."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("gone", "2", k="last")], "10"), ListResult([], "20")]
    lw.watches = [[ApiStatusError(410, "Expired", "too old")]]
    calls = Calls()
    inf = informer(lw)
    inf.add_event_handler(calls.funcs())
    await run(inf, lw)
    (tombstone,) = [e[1] for e in calls.events if e[0] == "delete"]
    assert isinstance(tombstone, DeletedFinalStateUnknown)
    assert tombstone.key == "default/gone" and tombstone.obj == cm("gone", "2", k="last")


async def test_list_429_waits_at_least_retry_after() -> None:
    """Bug: Retry-After ignored on a throttled LIST."""
    lw = ScriptedListerWatcher()
    lw.lists = [ApiStatusError(429, "TooManyRequests", "slow down", retry_after=5.0), ListResult([], "1")]
    t = FakeTime()
    await run(informer(lw, t), lw)
    assert t.sleeps == [5.0]


# -- WATCH -----------------------------------------------------------------------------------------------------------

async def test_watch_timeout_is_randomized_in_min_to_twice_min() -> None:
    """Bug: a fixed timeoutSeconds (every watch of every replica ends at once)."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "11"}})]]
    draws = iter([0.0, 0.5])
    inf = SharedInformer(lw, name="cm", reflector_options=ReflectorOptions(short_watch=0.0))
    inf.reflector._rng = lambda: next(draws)
    await run(inf, lw)
    assert [o.timeout_seconds for o in lw.watch_calls] == [300, 450]


async def test_watch_429_waits_at_least_retry_after_then_rewatches_without_list() -> None:
    """Bug: Retry-After ignored on the watch (and a 429 there relisting)."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[ApiStatusError(429, "TooManyRequests", "slow down", retry_after=7.0)],
                  [WatchEvent("ERROR", {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                                        "details": {"retryAfterSeconds": 3}})]]
    t = FakeTime()
    await run(informer(lw, t), lw)
    assert t.sleeps == [7.0, 3.0]
    assert len(lw.list_calls) == 1 and [o.resource_version for o in lw.watch_calls] == ["10", "10", "10"]


async def test_the_transform_applies_to_watch_events_and_what_handlers_get() -> None:
    """Bug: the transform untested on the watch path (watch objects kept whole)."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("a", "11", keep="1", drop="x")),
                   WatchEvent("MODIFIED", cm("a", "12", keep="2", drop="y")),
                   WatchEvent("ADDED", cm("b", "13", keep="3", drop="z")),
                   WatchEvent("DELETED", cm("b", "14", keep="4", drop="w"))]]
    calls = Calls()
    inf = SharedInformer(lw, name="cm", transform=keep_fields(["data.keep"]),
                         reflector_options=ReflectorOptions(short_watch=0.0))
    kept: list[dict[str, Any]] = []
    inf.add_event_handler(calls.funcs())
    inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, _i: kept.append(o), sync_calls="loop"))
    await run(inf, lw)
    assert kept == [cm("a", "11", keep="1"), cm("b", "13", keep="3")]
    (_, _, old, new) = calls.events[1]
    assert (old, new) == (cm("a", "11", keep="1"), cm("a", "12", keep="2"))
    assert calls.events[3] == ("delete", cm("b", "14", keep="4"))
    assert inf.indexer.snapshot() == {"default/a": cm("a", "12", keep="2")}


@pytest.mark.parametrize(("failure", "relists"), [
    (StreamError("watch line is not JSON: b'<html>'"), False),  # a decode error as the watch opens
    (StreamError("watch stream broke: ServerDisconnectedError()"), False),  # the connection dropped at open
    (ConnectError("refused"), False),
    (ApiStatusError(429, "TooManyRequests", ""), False),
    (ApiStatusError(410, "Expired", "too old"), True),
    (ApiStatusError(500, "InternalError", "etcd is on fire"), True),
    (None, True),  # the stream closed at once with no event: very short
], ids=["decode-error-at-open", "dropped-at-open", "refused", "429", "410", "500", "very-short"])
async def test_every_watch_failure_path_backs_off(failure: BaseException | None, relists: bool) -> None:
    """Bug (issue 21 item 7): a watch failing as it opens retried at once, in a tight loop."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10"), ListResult([], "10")]
    lw.watches = [[failure] if failure is not None else []]
    t = FakeTime()
    await run(informer(lw, t, short_watch=1.0), lw)
    assert len(t.sleeps) == 1 and t.sleeps[0] >= 0.8
    assert len(lw.list_calls) == (2 if relists else 1)


async def test_a_stream_cut_after_events_rewatches_at_once() -> None:
    """A watch that delivered events and then broke is re-opened at once (client-go: a closed result channel)."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("a", "11")), StreamError("cut mid-line")]]
    t = FakeTime()
    await run(informer(lw, t), lw)
    assert t.sleeps == [] and [o.resource_version for o in lw.watch_calls] == ["10", "11"]


async def test_recovery_after_a_36_s_outage_is_prompt() -> None:
    """Bug (issue 20): the backoff grew during the outage, so caches stayed stale 33-48 s after it."""
    t = FakeTime()
    back_at = 36.0
    synced_at: list[float] = []

    class Outage(ScriptedListerWatcher):
        async def list(self, options: ListOptions) -> ListResult:
            if t.now < back_at:
                raise ConnectError("connection refused")
            synced_at.append(t.now)
            return ListResult([], "10")

    lw = Outage()
    # Worst-case jitter every time.
    inf = SharedInformer(lw, name="cm", sleep=t.sleep, clock=t.clock, reflector_options=ReflectorOptions(
        short_watch=0.0, backoff_factory=lambda: t.backoff(rng=0.999)))
    await run(inf, lw)
    assert synced_at and synced_at[0] - back_at < 8.0


async def test_a_watch_event_resets_the_backoff() -> None:
    """After a healthy watch, the next failure starts the schedule again instead of going on at the cap."""
    lw = ScriptedListerWatcher()
    lw.lists = [ConnectError("down")] * 6 + [ListResult([], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("a", "11")), ApiStatusError(429, "TooManyRequests", "")]]
    t = FakeTime()
    await run(informer(lw, t), lw)
    assert t.sleeps[5] == pytest.approx(4.0)  # at the cap
    assert t.sleeps[-1] == pytest.approx(0.8)  # after the event: from the start


async def test_last_contact_and_staleness() -> None:
    """The accessors /readyz reads: 0 while a watch is open, growing while the API server is unreachable."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("a", "11")), ConnectError("refused")]]
    t = FakeTime()
    stale_in_backoff: list[float | None] = []

    async def during(_delay: float) -> None:
        stale_in_backoff.append(inf.staleness())

    t.on_sleep = during
    t.now = 100.0
    inf = informer(lw, t)
    assert inf.last_contact() is None and inf.staleness() is None and not inf.healthy()
    await inf.start()
    await asyncio.wait_for(lw.exhausted.wait(), 5)
    assert inf.staleness() == 0.0 and inf.healthy(max_staleness=0.0)  # the last watch is open
    assert inf.last_contact() == 100.0
    await inf.stop()
    assert stale_in_backoff == [pytest.approx(t.sleeps[0])]


# -- WatchList -------------------------------------------------------------------------------------------------------

async def test_watchlist_syncs_at_the_end_bookmark_and_goes_on_with_the_stream() -> None:
    """KEP-3157: initial events (in any order, with changes among them), synced at the annotated bookmark."""
    lw = ScriptedListerWatcher(watch_list=True)
    synced_before_end: list[bool] = []
    inf = informer(lw)

    lw.watches = [[WatchEvent("ADDED", cm("b", "7")), WatchEvent("ADDED", cm("a", "5")),
                   WatchEvent("MODIFIED", cm("a", "18")), WatchEvent("DELETED", cm("b", "19")),
                   WatchEvent("BOOKMARK", END), WatchEvent("ADDED", cm("c", "21"))]]
    calls = Calls()
    inf.add_event_handler(calls.funcs())
    inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, _i: synced_before_end.append(inf.has_synced()),
                                                    sync_calls="loop"))
    await run(inf, lw)
    assert lw.list_calls == []
    (opts, _) = lw.watch_calls
    assert (opts.send_initial_events, opts.resource_version_match, opts.allow_watch_bookmarks,
            opts.resource_version) == (True, "NotOlderThan", True, "")
    assert inf.indexer.snapshot() == {"default/a": cm("a", "18"), "default/c": cm("c", "21")}
    assert [e[:3] for e in calls.events] == [("add", "a", True), ("add", "c", False)]
    assert inf.reflector.used_watch_list and inf.last_sync_resource_version == "21"
    assert synced_before_end == [True, True]


async def test_watchlist_refused_falls_back_to_list_and_is_tried_again_on_the_next_relist() -> None:
    lw = ScriptedListerWatcher(watch_list=True)
    refused = ApiStatusError(422, "Invalid", "resourceVersionMatch is forbidden for watch")
    lw.lists = [ListResult([cm("a", "1")], "10"), ListResult([cm("a", "1")], "30")]
    lw.watches = [[refused], [ApiStatusError(410, "Expired", "too old")], [refused]]
    t = FakeTime()
    inf = informer(lw, t)
    await run(inf, lw)
    kinds = [bool(o.send_initial_events) for o in lw.watch_calls]
    assert kinds == [True, False, True, False]
    assert [o.resource_version for o in lw.list_calls] == ["0", "10"]
    assert len(t.sleeps) == 1  # the 410; a refusal falls back at once
    assert not inf.reflector.used_watch_list


@pytest.mark.parametrize("ignored", ["plain-bookmark", "silence"])
async def test_watchlist_ignored_is_detected_and_lists_from_then_on(ignored: str) -> None:
    lw = ScriptedListerWatcher(watch_list=True)
    plain = WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "9"}})

    async def silence() -> AsyncIterator[WatchEvent]:
        yield WatchEvent("ADDED", cm("a", "1"))
        await asyncio.Event().wait()

    lw.lists = [ListResult([cm("a", "1")], "10"), ListResult([cm("a", "1")], "20")]
    script: Any = [WatchEvent("ADDED", cm("a", "1")), plain] if ignored == "plain-bookmark" else silence()
    lw.watches = [script, [ApiStatusError(410, "Expired", "too old")]]
    inf = informer(lw, initial_events_timeout=0.05)
    await run(inf, lw)
    assert [bool(o.send_initial_events) for o in lw.watch_calls] == [True, False, False]
    assert len(lw.list_calls) == 2


async def test_watchlist_expired_or_too_large_retries_at_the_most_recent_rv() -> None:
    lw = ScriptedListerWatcher(watch_list=True)
    lw.watches = [[ApiStatusError(504, "Timeout", "Too large resource version", causes=("ResourceVersionTooLarge",))],
                  [WatchEvent("BOOKMARK", END)]]
    inf = informer(lw)
    inf.reflector.last_sync_resource_version = "50"
    await run(inf, lw)
    assert [o.resource_version for o in lw.watch_calls] == ["50", "", "20"]
    assert lw.list_calls == [] and inf.has_synced()


# -- handlers --------------------------------------------------------------------------------------------------------

async def test_a_raising_handler_goes_on_with_the_next_notifications() -> None:
    """Bug: a raising handler's task dies for good and it hears nothing more."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1"), cm("b", "2")], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("c", "11"))]]
    heard: list[str] = []

    def add(obj: dict[str, Any], _initial: bool) -> None:
        if obj["metadata"]["name"] == "a":
            raise RuntimeError("boom")
        heard.append(obj["metadata"]["name"])

    inf = informer(lw)
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=add, sync_calls="loop"))
    await run(inf, lw)
    assert heard == ["b", "c"] and reg.failures == 1


async def test_a_removed_handler_queues_and_hears_nothing_more() -> None:
    """Bug: a stopped registration still queued every notification (10,000 of them in issue 22)."""
    lw = ScriptedListerWatcher()
    gate = asyncio.Event()

    async def hold() -> AsyncIterator[WatchEvent]:
        await gate.wait()
        for i in range(50):
            yield WatchEvent("ADDED", cm(f"n{i}", str(11 + i)))

    lw.lists = [ListResult([cm("a", "1")], "10")]
    lw.watches = [hold()]
    kept, removed = Calls(), Calls()
    inf = informer(lw)
    inf.add_event_handler(kept.funcs())
    reg = inf.add_event_handler(removed.funcs())
    await inf.start()
    async with asyncio.timeout(5):
        while not reg.has_synced():
            await asyncio.sleep(0)
    await inf.remove_event_handler(reg)
    gate.set()
    await asyncio.wait_for(lw.exhausted.wait(), 5)
    await handlers_caught_up(inf)
    await inf.stop()
    assert len(kept.events) == 51 and len(removed.events) == 1
    assert reg.queue_depth() == 0 and reg.stopped and reg not in inf.registrations
    assert list(inf.handler_queue_depths()) == ["cm#1"]


async def test_a_full_handler_queue_holds_the_informer_back_and_loses_nothing() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[WatchEvent("ADDED", cm(f"n{i}", str(11 + i))) for i in range(8)]]
    gate = asyncio.Event()
    heard: list[str] = []
    depths: list[int] = []

    async def slow(obj: dict[str, Any], _initial: bool) -> None:
        await gate.wait()
        heard.append(obj["metadata"]["name"])

    inf = informer(lw)
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=slow), queue_size=2)
    await inf.start()
    for _ in range(50):
        depths.append(reg.queue_depth())
        await asyncio.sleep(0)
    applied_while_blocked = len(inf.indexer)
    gate.set()
    await asyncio.wait_for(lw.exhausted.wait(), 5)
    await handlers_caught_up(inf)
    await inf.stop()
    assert max(depths) == 3 and inf.handler_queue_depths() == {"cm#1": 0}  # 2 queued + 1 being handled
    assert applied_while_blocked < 8
    assert heard == [f"n{i}" for i in range(8)]


async def test_synchronous_handlers_must_say_where_they_run() -> None:
    """Bug: a synchronous handler run on the loop unannounced (a 50 ms one stalled the loop 100-120 ms)."""
    inf = informer(ScriptedListerWatcher())
    with pytest.raises(SyncHandlerError):
        inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, i: None))

    async def add(_o: Any, _i: bool) -> None:
        return None

    inf.add_event_handler(ResourceEventHandlerFuncs(add=add))  # async: nothing to say


async def test_thread_handlers_run_off_the_loop_and_loop_handlers_on_it_with_slow_calls_counted() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1")], "10")]
    threads: dict[str, int] = {}

    def off(_o: Any, _i: bool) -> None:
        threads["thread"] = threading.get_ident()

    def on(_o: Any, _i: bool) -> None:
        threads["loop"] = threading.get_ident()
        time.sleep(SYNC_CALL_BUDGET * 3)

    inf = informer(lw)
    inf.add_event_handler(ResourceEventHandlerFuncs(add=off), sync_calls="thread")
    on_loop = inf.add_event_handler(ResourceEventHandlerFuncs(add=on, sync_calls="loop"))
    await run(inf, lw)
    assert threads["loop"] == threading.get_ident() != threads["thread"]
    assert on_loop.slow_calls == 1


async def test_a_relist_delivers_unchanged_objects_to_handlers_due_a_resync_only() -> None:
    """client-go's Replaced deltas with an unchanged resourceVersion are a sync, for syncingListeners."""
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("same", "1"), cm("changed", "2")], "10"),
                ListResult([cm("same", "1"), cm("changed", "3")], "20")]
    resynced = asyncio.Event()

    async def after_a_resync_check() -> AsyncIterator[WatchEvent]:
        await resynced.wait()
        raise ApiStatusError(410, "Expired", "too old")
        yield  # pragma: no cover - makes this an async generator

    lw.watches = [after_a_resync_check()]
    due, other = Calls(), Calls()
    inf = SharedInformer(lw, name="cm", resync_check_period=0.01,
                         reflector_options=ReflectorOptions(short_watch=0.0, backoff_factory=FakeTime().backoff),
                         sleep=FakeTime().sleep)
    inf.add_event_handler(due.funcs(), resync_period=0.01)
    inf.add_event_handler(other.funcs())
    await inf.start()
    async with asyncio.timeout(5):
        while not any(e[0] == "update" for e in due.events):
            await asyncio.sleep(0.005)
    resynced.set()
    await asyncio.wait_for(lw.exhausted.wait(), 5)
    await handlers_caught_up(inf)
    await inf.stop()
    relist_syncs = [e[1] for e in due.events if e[0] == "update" and e[2] is not e[3] and
                    e[2]["metadata"]["resourceVersion"] == e[3]["metadata"]["resourceVersion"]]
    assert relist_syncs == ["same"]
    assert [e[1] for e in other.events if e[0] == "update"] == ["changed"]


# -- compact store and factories -------------------------------------------------------------------------------------

async def test_a_compact_informer_keeps_json_and_hands_out_dicts() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1", k="v"), cm("b", "2", ns="other")], "10")]
    lw.watches = [[WatchEvent("MODIFIED", cm("a", "11", k="w")), WatchEvent("DELETED", cm("b", "12", ns="other"))]]
    calls = Calls()
    inf = SharedInformer(lw, name="cm", compact=True, reflector_options=ReflectorOptions(short_watch=0.0))
    inf.add_event_handler(calls.funcs())
    await run(inf, lw)
    assert isinstance(inf.indexer.get_stored("default/a"), bytes)
    assert inf.indexer.get_by_key("default/a") == cm("a", "11", k="w")
    assert inf.indexer.by_index("namespace", "default") == [cm("a", "11", k="w")]
    assert inf.indexer.index_values("namespace") == ["default"]
    assert calls.events[2][2:] == (cm("a", "1", k="v"), cm("a", "11", k="w"))


async def test_factory_transform_and_wait_for_cache_sync() -> None:
    lws: dict[str, ScriptedListerWatcher] = {}

    def lw_for(key: InformerKey) -> ScriptedListerWatcher:
        lw = lws[key.resource] = ScriptedListerWatcher()
        lw.lists = [ListResult([cm("a", "1", k="v")], "10")]
        return lw

    factory = SharedInformerFactory(lw_for, transform=keep_fields([]),
                                    reflector_options=ReflectorOptions(short_watch=0.0))
    inf = factory.informer(InformerKey("configmaps"))
    assert await factory.wait_for_cache_sync(timeout=0.01) == {InformerKey("configmaps"): False}
    await factory.start()
    assert await factory.wait_for_cache_sync(timeout=5) == {InformerKey("configmaps"): True}
    await factory.stop()
    assert inf.indexer.get_by_key("default/a") == {"metadata": {"name": "a", "namespace": "default",
                                                                "resourceVersion": "1"}}


def test_keep_fields_keeps_what_is_read_and_the_metadata_the_informer_needs() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "n", "resourceVersion": "3", "uid": "u", "labels": {"a": "b"},
                        "annotations": {"big": "x"}, "managedFields": [{"manager": "kubectl"}]},
           "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "E"}]},
                                   {"name": "d", "image": "j"}], "nodeName": "node"},
           "status": {"phase": "Running"}}
    assert keep_fields(["spec.containers.*.image"])(pod) == {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n", "resourceVersion": "3", "uid": "u", "labels": {"a": "b"}},
        "spec": {"containers": [{"image": "i"}, {"image": "j"}]}}
    assert keep_fields(["spec.containers.image"])(pod)["spec"] == {"containers": [{"image": "i"}, {"image": "j"}]}
    assert keep_fields(["metadata.annotations", "status"])(pod)["metadata"]["annotations"] == {"big": "x"}
    assert keep_fields(["metadata"])(pod)["metadata"] == pod["metadata"]
    assert pod["metadata"]["managedFields"]  # the input is never changed
    with pytest.raises(ValueError, match="empty segment"):
        keep_fields(["spec..x"])


def test_set_read_fields_is_the_union_of_every_owner_and_only_before_start() -> None:
    inf = informer(ScriptedListerWatcher())
    inf.set_read_fields("p1", ["data.a"])
    inf.set_read_fields("p2", ["data.b"])
    obj = cm("x", "1", a="1", b="2", c="3")
    assert inf._ingest(obj)["data"] == {"a": "1", "b": "2"}
    inf.set_read_fields("p2", None)
    assert inf._ingest(obj)["data"] == {"a": "1"}
    inf._started = True
    with pytest.raises(RuntimeError):
        inf.set_read_fields("p3", ["data.c"])
    with pytest.raises(RuntimeError):
        inf.set_transform(None)
