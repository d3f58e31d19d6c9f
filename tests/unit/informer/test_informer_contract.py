"""The rest of the informer's contract, one behaviour per test (written against mutmut's survivors).

Factories, counters, health, read-field declarations, resync bookkeeping, WatchList's error paths, the
compact Indexer and the field projection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.unit.informer.test_informer_api import END, Calls, FakeTime, informer, run
from tests.unit.informer.test_reflector import ScriptedListerWatcher, cm, handlers_caught_up
from webhook.informer import (
    InformerKey,
    ListResult,
    ReflectorOptions,
    ResourceEventHandlerFuncs,
    SharedInformer,
    SharedInformerFactory,
    WatchEvent,
    keep_fields,
)
from webhook.informer.errors import ApiStatusError, ConnectError
from webhook.informer.reflector import VeryShortWatchError
from webhook.informer.store import Indexer, drop_managed_fields, field_tree, meta_namespace_key

# -- factories -------------------------------------------------------------------------------------------------------

def test_factory_hands_out_one_informer_per_key_with_the_key_and_factory_options() -> None:
    made: list[InformerKey] = []

    def lw_for(key: InformerKey) -> ScriptedListerWatcher:
        made.append(key)
        return ScriptedListerWatcher()

    factory = SharedInformerFactory(lw_for, reflector_options=ReflectorOptions(page_size=7), resync_check_period=3.0,
                                    compact=True)
    key = InformerKey("configmaps", label_selector="a=b", field_selector="metadata.name=x")
    inf = factory.informer(key)
    assert factory.informer(key) is inf and made == [key] and factory.informers == {key: inf}
    opts = inf.reflector._options
    assert (opts.label_selector, opts.field_selector, opts.page_size) == ("a=b", "metadata.name=x", 7)
    assert inf.name == "configmaps" and inf._resync_check_period == 3.0 and inf.indexer.compact
    plain = SharedInformerFactory(lw_for).informer(InformerKey("namespaces"))
    assert not plain.indexer.compact and plain._transform is drop_managed_fields
    assert plain._resync_check_period == 0.0


# -- counters, health, declarations ----------------------------------------------------------------------------------

async def test_events_applied_counts_every_list_and_event() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1")], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("b", "11")), WatchEvent("MODIFIED", cm("b", "12")),
                   WatchEvent("DELETED", cm("b", "13"))]]
    inf = informer(lw)
    await run(inf, lw)
    assert inf.events_applied == 4


async def test_wait_for_sync_and_healthy() -> None:
    lw = ScriptedListerWatcher()
    gate = asyncio.Event()

    class Slow(ScriptedListerWatcher):
        async def list(self, options: Any) -> ListResult:
            await gate.wait()
            return ListResult([], "10")

    slow = Slow()
    inf = informer(slow)
    await inf.start()
    assert not await inf.wait_for_sync(timeout=0.01)
    inf.reflector._contact, inf.reflector._watching = 0.0, True  # a contact, but nothing listed yet
    assert not inf.healthy()
    gate.set()
    assert await inf.wait_for_sync(timeout=5)
    await inf.stop()
    del lw


def test_read_fields_accept_tuples_and_fall_back_to_dropping_managed_fields() -> None:
    inf = informer(ScriptedListerWatcher())
    obj = cm("x", "1", a="1", b="2")
    obj["metadata"]["managedFields"] = [{"manager": "m"}]
    inf.set_read_fields("p", [("data", "a")])
    assert inf._ingest(obj)["data"] == {"a": "1"}
    inf.set_read_fields("p", None)
    out = inf._ingest(obj)
    assert out["data"] == {"a": "1", "b": "2"} and "managedFields" not in out["metadata"]
    inf.set_transform(keep_fields(["data.b"]))
    assert inf._ingest(obj)["data"] == {"b": "2"}


# -- handlers ---------------------------------------------------------------------------------------------------------

async def test_queue_depth_counts_initial_adds_not_yet_delivered() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm(f"n{i}", str(i)) for i in range(5)], "10")]
    gate = asyncio.Event()

    async def add(_o: Any, _i: bool) -> None:
        await gate.wait()

    inf = informer(lw)
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=add))
    assert reg.queue_depth() == 0
    await inf.start()
    await asyncio.wait_for(lw.exhausted.wait(), 5)
    assert reg.queue_depth() == 5 and not inf.handlers_idle()  # 4 waiting + 1 being handled
    gate.set()
    await handlers_caught_up(inf)
    assert reg.queue_depth() == 0 and reg.has_synced()
    await inf.stop()


async def test_whoever_waits_for_the_sync_resumes_before_the_first_initial_add() -> None:
    # The handlers' initial adds are their own work, after the sync: wait_for_sync() does not wait for a time slice
    # of them (the bench's sync window included the first 2 ms slice of a handler woken first).
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1"), cm("b", "2")], "10")]
    heard: list[str] = []
    inf = informer(lw)
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, _i: heard.append(o["metadata"]["name"])),
                                sync_calls="loop")
    await inf.start()
    await inf.wait_for_sync()
    assert heard == [] and reg.queue_depth() == 2
    await handlers_caught_up(inf)
    assert heard == ["a", "b"]
    await inf.stop()


async def test_a_loop_handlers_initial_add_counts_itself_as_undelivered_while_it_runs() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm(f"n{i}", str(i)) for i in range(4)], "10")]
    depths: list[int] = []
    inf = SharedInformer(lw, name="cm", compact=True, reflector_options=ReflectorOptions(short_watch=0.0))
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, i: depths.append(reg.queue_depth())),
                                sync_calls="loop")
    await run(inf, lw)
    assert depths == [4, 3, 2, 1] and reg.has_synced() and reg.queue_depth() == 0


async def test_slow_calls_count_only_slow_calls_on_the_loop() -> None:
    import time

    from webhook.informer.handlers import SYNC_CALL_BUDGET

    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1"), cm("b", "2"), cm("c", "3")], "10")]

    def add(obj: Any, _i: bool) -> None:
        if obj["metadata"]["name"] != "c":
            time.sleep(SYNC_CALL_BUDGET * 2)

    inf = informer(lw)
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=add), sync_calls="loop")
    await run(inf, lw)
    assert reg.slow_calls == 2


async def test_slow_initial_adds_are_start_up_work_and_later_slow_calls_are_warned(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import time

    from webhook.informer.handlers import SYNC_CALL_BUDGET

    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1"), cm("b", "2")], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("c", "11")), WatchEvent("MODIFIED", cm("c", "12"))]]

    def slow(*_args: Any) -> None:
        time.sleep(SYNC_CALL_BUDGET * 2)

    caplog.set_level(logging.DEBUG, logger="tollgate.informer")
    inf = informer(lw)
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=slow, update=slow), sync_calls="loop", name="h")
    await run(inf, lw)
    assert reg.slow_calls == 4  # all counted
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # Two initial adds: debug only. The watch's add and update: the first one warned (the log is rate-limited).
    assert len(warned) == 1 and warned[0].startswith("h: a synchronous handler held the event loop"), warned
    assert warned[0].endswith("(3 slow calls); make it async, or register it with sync_calls='thread'")
    assert sum(r.levelno == logging.DEBUG and "an initial add held" in r.getMessage() for r in caplog.records) == 2


async def test_resync_in_compact_mode_passes_one_object_and_respects_the_period() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1")], "10")]
    pairs: list[tuple[Any, Any]] = []
    inf = SharedInformer(lw, name="cm", compact=True, resync_check_period=0.005,
                         reflector_options=ReflectorOptions(short_watch=0.0))
    loop = asyncio.get_running_loop()
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(update=lambda old, new: pairs.append((old, new)),
                                                          sync_calls="loop"), resync_period=0.05)
    started = loop.time()
    await inf.start()
    await asyncio.sleep(0.3)
    elapsed = loop.time() - started
    await inf.stop()
    assert pairs and all(old is new and new == cm("a", "1") for old, new in pairs)
    assert len(pairs) <= elapsed / 0.05 + 1  # one per period at most, not one per check
    assert reg.next_resync is not None and reg.next_resync > started


async def test_removing_a_handler_due_a_resync_takes_it_out_of_the_syncing_set() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1")], "10")]
    inf = SharedInformer(lw, name="cm", resync_check_period=0.005, reflector_options=ReflectorOptions(short_watch=0.0))
    calls = Calls()
    reg = inf.add_event_handler(calls.funcs(), resync_period=0.01)
    await inf.start()
    async with asyncio.timeout(5):
        while reg not in inf._syncing:
            await asyncio.sleep(0.005)
    await inf.remove_event_handler(reg)
    assert reg not in inf._syncing
    await inf.stop()


# -- WatchList error paths --------------------------------------------------------------------------------------------

async def test_watchlist_error_event_among_initial_events_is_handled_as_an_error() -> None:
    lw = ScriptedListerWatcher(watch_list=True)
    lw.watches = [[WatchEvent("ADDED", cm("a", "1")),
                   WatchEvent("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "gone"})],
                  [WatchEvent("ADDED", cm("b", "2")), WatchEvent("BOOKMARK", END)]]
    errors: list[BaseException] = []
    inf = informer(lw)
    inf.set_watch_error_handler(errors.append)
    inf.reflector.last_sync_resource_version = "50"
    await run(inf, lw)
    assert [o.resource_version for o in lw.watch_calls] == ["50", "", "20"]
    assert [getattr(e, "code", None) for e in errors] == [410]
    assert inf.indexer.list_keys() == ["default/b"]


async def test_watchlist_429_backs_off_and_retries_watchlist() -> None:
    lw = ScriptedListerWatcher(watch_list=True)
    lw.watches = [[ApiStatusError(429, "TooManyRequests", "", retry_after=2.0)], [WatchEvent("BOOKMARK", END)]]
    t = FakeTime()
    inf = informer(lw, t)
    await run(inf, lw)
    assert t.sleeps == [2.0] and inf.reflector.used_watch_list and lw.list_calls == []
    assert all(o.timeout_seconds is not None and 300 <= o.timeout_seconds < 600 for o in lw.watch_calls)


async def test_watchlist_very_short_and_unfinished_streams_fall_back_to_list_and_are_closed() -> None:
    closed: list[str] = []

    def stream(name: str, events: list[WatchEvent]) -> AsyncIterator[WatchEvent]:
        async def gen() -> AsyncIterator[WatchEvent]:
            try:
                for e in events:
                    yield e
            finally:
                closed.append(name)
        return gen()

    for events, error in (([], VeryShortWatchError), ([WatchEvent("ADDED", cm("a", "1"))], None)):
        lw = ScriptedListerWatcher(watch_list=True)
        lw.lists = [ListResult([cm("a", "1")], "10")]
        lw.watches = [stream("wl", events)]
        errors: list[BaseException] = []
        inf = informer(lw, short_watch=1.0)
        inf.set_watch_error_handler(errors.append)
        await run(inf, lw)
        assert len(lw.list_calls) == 1 and not inf.reflector.used_watch_list
        assert [type(e) for e in errors] == ([error] if error else [])
    assert closed == ["wl", "wl"]


async def test_after_a_watchlist_sync_the_next_relist_starts_at_the_synced_rv() -> None:
    lw = ScriptedListerWatcher(watch_list=True)
    lw.watches = [[ApiStatusError(410, "Expired", "too old")],  # sets "RV unavailable"...
                  [WatchEvent("BOOKMARK", END), ApiStatusError(410, "Expired", "too old")],  # ...cleared by the sync
                  [WatchEvent("BOOKMARK", END)]]
    inf = informer(lw)
    inf.reflector.last_sync_resource_version = "5"
    await run(inf, lw)
    assert [o.resource_version for o in lw.watch_calls] == ["5", "", "20", "20"]


# -- Indexer and projection -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("compact", [False, True])
def test_indexer_reads_writes_and_custom_indices(compact: bool) -> None:
    idx = Indexer(compact=compact)
    idx.add_indexers({"app": lambda o: [o["data"]["app"]] if "app" in o.get("data", {}) else []})
    idx.upsert(cm("a", "1", app="x"))
    idx.upsert({"metadata": {"name": "node", "resourceVersion": "2"}})  # cluster-scoped
    assert idx.list() == [cm("a", "1", app="x"), {"metadata": {"name": "node", "resourceVersion": "2"}}]
    assert idx.index_keys("app", "x") == frozenset({"default/a"}) and idx.index_values("namespace") == ["default"]
    idx.upsert(cm("a", "2", app="y"))
    assert idx.index_values("app") == ["y"] and idx.get(cm("a", "0")) == cm("a", "2", app="y")
    assert idx.delete("default/a") is not None and idx.index_values("app") == [] and idx.get_by_key("x") is None


def test_a_watchlist_buffer_unindexes_what_initial_events_delete() -> None:
    buffer = Indexer(compact=True).new_buffer()
    buffer.add(cm("a", "1"))
    buffer.add(cm("b", "2", ns="other"))
    buffer.add(cm("b", "3", ns="other"))
    buffer.delete(cm("b", "4", ns="other"))
    buffer.delete(cm("missing", "5"))
    idx = Indexer(compact=True)
    idx.replace_with(buffer)
    assert list(buffer.items) == ["default/a"] and idx.index_values("namespace") == ["default"]
    assert idx.index_keys("namespace", "default") == frozenset({"default/a"})


def test_a_transforming_buffer_deletes_by_the_transformed_key() -> None:
    def rename(o: dict[str, Any]) -> dict[str, Any]:
        return {**o, "metadata": {**o["metadata"], "name": o["metadata"]["name"].upper()}}

    buffer = Indexer().new_buffer(rename)
    buffer.add(cm("a", "1"))
    buffer.delete(cm("a", "2"))
    assert len(buffer) == 0


def test_keys_of_objects_without_a_name() -> None:
    assert meta_namespace_key({"metadata": {"namespace": "n"}}) == "n/"
    assert meta_namespace_key({"metadata": {}}) == ""


def test_field_trees_and_projections() -> None:
    assert field_tree(["spec", "spec.x", "data"]) == {"spec": None, "data": None}
    assert field_tree([("a", "b")]) == {"a": {"b": None}}
    obj = {"data": {"k1": {"x": 1, "y": 2}, "k2": {"x": 3}}, "list": [{"a": 1, "b": 2}],
           "whole": [{"a": 1}], "metadata": {"name": "n"}}
    assert keep_fields(["data.*.x", "list.*.a", "whole.*"])(obj) == {
        "data": {"k1": {"x": 1}, "k2": {"x": 3}}, "list": [{"a": 1}], "whole": [{"a": 1}],
        "metadata": {"name": "n"}}
    assert keep_fields(["data.*"])(obj)["data"] == obj["data"]


async def test_removing_a_handler_while_the_informer_waits_for_another_skips_nobody() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[WatchEvent("ADDED", cm(f"n{i}", str(11 + i))) for i in range(4)]]
    gate = asyncio.Event()
    first, last = Calls(), Calls()

    async def blocked(_o: Any, _i: bool) -> None:
        await gate.wait()

    inf = informer(lw)
    reg_first = inf.add_event_handler(first.funcs())
    slow = inf.add_event_handler(ResourceEventHandlerFuncs(add=blocked), queue_size=1)
    inf.add_event_handler(last.funcs())
    await inf.start()
    async with asyncio.timeout(5):
        while slow.queue_depth() < 2:  # one being handled, one queued: the informer now waits on it
            await asyncio.sleep(0)
    await inf.remove_event_handler(reg_first)
    gate.set()
    await asyncio.wait_for(lw.exhausted.wait(), 5)
    await handlers_caught_up(inf)
    await inf.stop()
    assert [e[1] for e in last.events] == ["n0", "n1", "n2", "n3"]


def test_indexer_membership_and_removing_an_index() -> None:
    idx = Indexer({"app": lambda o: [o["data"]["app"]]})
    idx.upsert(cm("a", "1", app="x"))
    assert "default/a" in idx and "default/b" not in idx and idx.has_index("app")
    idx.remove_indexer("app")
    idx.remove_indexer("app")  # absent: a no-op
    assert not idx.has_index("app") and idx.has_index("namespace") and len(idx) == 1
    with pytest.raises(KeyError):
        idx.index_keys("app", "x")


def test_handler_funcs_adapt_plain_callables_and_ignore_missing_ones() -> None:
    seen: list[Any] = []
    funcs = ResourceEventHandlerFuncs(add=lambda o, i: seen.append(("add", o, i)) or "a",
                                      update=lambda old, new: seen.append(("update", old, new)) or "u",
                                      delete=lambda o: seen.append(("delete", o)) or "d")
    assert (funcs.on_add(1, True), funcs.on_update(2, 3), funcs.on_delete(4)) == ("a", "u", "d")
    assert seen == [("add", 1, True), ("update", 2, 3), ("delete", 4)]
    empty = ResourceEventHandlerFuncs()
    assert (empty.on_add({}, False), empty.on_update({}, {}), empty.on_delete({})) == (None, None, None)


async def test_cache_age_is_none_before_the_first_list_and_counts_from_it() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    inf = informer(lw)
    assert inf.cache_age() is None
    await run(inf, lw)
    age = inf.cache_age()
    assert age is not None and 0 <= age < 60


async def test_dynamic_factory_wait_for_cache_sync_and_compact_transformed_informers() -> None:
    from webhook.informer.dynamic import DynamicInformerFactory
    from webhook.informer.gvr import GVR

    lws: dict[GVR, ScriptedListerWatcher] = {}

    def lw_for(gvr: GVR) -> ScriptedListerWatcher:
        lw = lws[gvr] = ScriptedListerWatcher()
        lw.lists = [ListResult([cm("a", "1", k="v")], "10")]
        return lw

    pods = GVR("", "v1", "pods")
    factory = DynamicInformerFactory(lw_for, transform=keep_fields([]),
                                     reflector_options=ReflectorOptions(short_watch=0.0))
    assert await factory.wait_for_cache_sync(timeout=1) == {}
    inf = await factory.acquire(pods, "owner")
    assert await factory.wait_for_cache_sync(timeout=5) == {pods: True}
    assert inf.indexer.compact and isinstance(inf.indexer.get_stored("default/a"), bytes)
    assert inf.indexer.get_by_key("default/a") == {"metadata": {"name": "a", "namespace": "default",
                                                                "resourceVersion": "1"}}
    await factory.stop()
    plain = DynamicInformerFactory(lw_for, compact=False)
    inf2 = await plain.acquire(pods, "owner")
    assert not inf2.indexer.compact
    await plain.stop()


def test_an_error_event_without_a_status_is_an_internal_error_and_forgetting_an_unknown_owner_is_a_no_op() -> None:
    from webhook.informer.reflector import _status_from_event

    err = _status_from_event("not a Status")
    assert (err.code, err.reason) == (500, "InternalError") and "not a Status" in err.message
    assert _status_from_event({"code": 410, "details": "odd"}).retry_after is None
    informer(ScriptedListerWatcher()).set_read_fields("nobody", None)


def test_an_error_event_carries_the_status_fields() -> None:
    from webhook.informer.reflector import _status_from_event

    err = _status_from_event({"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down",
                              "details": {"retryAfterSeconds": 4}})
    assert (err.code, err.reason, err.message, err.retry_after) == (429, "TooManyRequests", "slow down", 4.0)
    bare = _status_from_event({})
    assert (bare.code, bare.reason, bare.message, bare.retry_after) == (500, "", "", None)


def test_by_index_of_an_unknown_value_is_empty_and_healthy_is_inclusive_of_its_limit() -> None:
    for compact in (False, True):
        assert Indexer(compact=compact).by_index("namespace", "nowhere") == []
    t = FakeTime()
    inf = informer(ScriptedListerWatcher(), t)
    inf._synced.set()
    inf.reflector._contact = 0.0
    t.now = 60.0
    assert inf.healthy() and inf.staleness() == 60.0
    t.now = 60.5
    assert not inf.healthy() and inf.healthy(max_staleness=61)


def closing(closed: list[str], name: str, steps: list[Any]) -> AsyncIterator[WatchEvent]:
    """A scripted stream that records when it is closed."""
    async def gen() -> AsyncIterator[WatchEvent]:
        try:
            for step in steps:
                if isinstance(step, BaseException):
                    raise step
                yield step
        finally:
            closed.append(name)
    return gen()


@pytest.mark.parametrize("failure", [
    ApiStatusError(429, "TooManyRequests", ""), ApiStatusError(410, "Expired", ""),
    ApiStatusError(422, "Invalid", ""), ConnectError("no"),
    WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "3"}})], ids=["429", "410", "422", "refused", "ignored"])
async def test_every_watchlist_failure_closes_its_stream_and_reports_once(failure: Any) -> None:
    closed: list[str] = []
    lw = ScriptedListerWatcher(watch_list=True)
    lw.lists = [ListResult([], "10")]
    lw.watches = [closing(closed, "first", [failure]), closing(closed, "second", [WatchEvent("BOOKMARK", END)])]
    errors: list[BaseException] = []
    t = FakeTime()
    inf = informer(lw, t)
    inf.set_watch_error_handler(errors.append)
    await run(inf, lw)
    assert closed[0] == "first" and len(errors) == 1
    assert type(errors[0]).__name__ == (type(failure).__name__ if isinstance(failure, BaseException)
                                        else "WatchListIgnoredError")
    retried = isinstance(failure, BaseException) and getattr(failure, "code", 0) != 422
    assert bool(lw.list_calls) == (not retried)  # 429, 410, refused retry WatchList; 422 and ignored list
    assert len(t.sleeps) == (1 if (getattr(failure, "code", 429) == 429 and isinstance(failure, BaseException))
                             or type(failure).__name__ == "ConnectError" else 0)


async def test_watchlist_deadline_moves_while_events_flow_then_catches_the_silence() -> None:
    lw = ScriptedListerWatcher(watch_list=True)

    async def slow_then_silent() -> AsyncIterator[WatchEvent]:
        yield WatchEvent("ADDED", cm("a", "1"))
        await asyncio.sleep(0.15)  # longer than the deadline's push interval
        yield WatchEvent("ADDED", cm("b", "2"))
        await asyncio.Event().wait()

    lw.lists = [ListResult([cm("a", "1")], "10")]
    lw.watches = [slow_then_silent()]
    inf = informer(lw, initial_events_timeout=0.3)
    await run(inf, lw)
    assert len(lw.list_calls) == 1 and inf.reflector._watch_list_ignored


async def test_a_very_short_watchlist_is_judged_on_the_injected_clock() -> None:
    lw = ScriptedListerWatcher(watch_list=True)
    lw.lists = [ListResult([], "10")]
    lw.watches = [[]]
    t = FakeTime()
    t.now = 100.0
    errors: list[BaseException] = []
    inf = informer(lw, t, short_watch=1.0)
    inf.set_watch_error_handler(errors.append)
    await run(inf, lw)
    assert [type(e) for e in errors] == [VeryShortWatchError]


async def test_sync_handlers_returning_awaitables_are_awaited_and_failures_counted() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1"), cm("b", "2")], "10")]
    done: list[str] = []

    async def later(name: str) -> None:
        done.append(name)

    def fail(_o: Any, _i: bool) -> None:
        raise RuntimeError("boom")

    inf = informer(lw)
    inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, _i: later("thread-" + o["metadata"]["name"])),
                          sync_calls="thread")
    inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, _i: later("loop-" + o["metadata"]["name"])),
                          sync_calls="loop")
    failing = inf.add_event_handler(ResourceEventHandlerFuncs(add=fail), sync_calls="loop")
    await run(inf, lw)
    assert sorted(done) == ["loop-a", "loop-b", "thread-a", "thread-b"] and failing.failures == 2


async def test_no_transform_keeps_watch_objects_as_received() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    obj = cm("a", "11")
    obj["metadata"]["managedFields"] = [{"manager": "m"}]
    lw.watches = [[WatchEvent("ADDED", obj)]]
    inf = SharedInformer(lw, name="cm", transform=None, reflector_options=ReflectorOptions(short_watch=0.0))
    await run(inf, lw)
    assert inf.indexer.get_by_key("default/a") == obj


async def test_handler_tasks_are_named_and_a_stopped_registration_never_restarts() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    inf = informer(lw)
    reg = inf.add_event_handler(Calls().funcs(), name="mine")
    await inf.start()
    assert "informer-handler-mine" in {t.get_name() for t in asyncio.all_tasks()}
    await inf.stop()
    reg.start()
    assert reg._task is None


async def test_queue_depth_after_some_initial_adds_were_delivered() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm(f"n{i}", str(i)) for i in range(5)], "10")]
    gate = asyncio.Event()
    delivered: list[str] = []

    async def add(obj: Any, _i: bool) -> None:
        if obj["metadata"]["name"] == "n2":
            await gate.wait()
        delivered.append(obj["metadata"]["name"])

    inf = informer(lw)
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=add))
    await inf.start()
    async with asyncio.timeout(5):
        while len(delivered) < 2:
            await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert reg.queue_depth() == 3  # n2 (being handled), n3, n4
    gate.set()
    await handlers_caught_up(inf)
    await inf.stop()


async def test_cluster_scoped_objects_through_list_and_a_custom_key() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([{"metadata": {"name": "node-1", "resourceVersion": "1"}}, cm("a", "2")], "10")]
    inf = informer(lw)
    await run(inf, lw)
    assert sorted(inf.indexer.list_keys()) == ["default/a", "node-1"]
    assert inf.indexer.index_values("namespace") == ["default"]
    by_uid = Indexer(key_func=lambda o: o["metadata"]["uid"])
    by_uid.replace([{"metadata": {"uid": "u1", "namespace": "n"}}, {"metadata": {"uid": "u2"}}])
    assert by_uid.list_keys() == ["u1", "u2"] and by_uid.index_keys("namespace", "n") == frozenset({"u1"})


async def test_unknown_or_odd_events_are_skipped_without_ending_the_watch() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("a", "11")), WatchEvent("WEIRD", cm("x", "12")),
                   WatchEvent("MODIFIED", "not an object"),  # type: ignore[arg-type]
                   WatchEvent("ADDED", cm("b", "13"))]]
    inf = informer(lw)
    await run(inf, lw)
    assert inf.indexer.list_keys() == ["default/a", "default/b"] and len(lw.watch_calls) == 2
    assert inf.reflector.events == 2 and inf.last_sync_resource_version == "13"


async def test_events_applied_counts_across_relists() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1")], "10"), ListResult([cm("a", "1")], "20")]
    lw.watches = [[ApiStatusError(410, "Expired", "")]]
    inf = informer(lw)
    await run(inf, lw)
    assert inf.events_applied == 2


@pytest.mark.parametrize("expire_continue", [False, True])
@pytest.mark.parametrize("handed_over", [True, False])
async def test_a_handed_over_list_loses_managed_fields_and_a_kept_one_gets_them_back(handed_over: bool,
                                                                                      expire_continue: bool) -> None:
    def item(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "default", "managedFields": [{"manager": "kubectl"}]}}

    first, second = [item("a")], [item("b")]
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult(first, "10", continue_token="t", handed_over=handed_over)]
    if expire_continue:  # tools/pager: one unpaginated LIST after the continue token expired
        second = [item("a"), item("b")]
        lw.lists += [ApiStatusError(410, "Expired", "continue token expired"), ListResult(second, "10",
                                                                                          handed_over=handed_over)]
    else:
        lw.lists.append(ListResult(second, "10", handed_over=handed_over))
    t = FakeTime()
    inf = SharedInformer(lw, name="cm", compact=True, sleep=t.sleep, clock=t.clock,
                         reflector_options=ReflectorOptions(short_watch=0.0, backoff_factory=t.backoff))
    await run(inf, lw)
    assert inf.indexer.snapshot() == {"default/a": {"metadata": {"name": "a", "namespace": "default"}},
                                      "default/b": {"metadata": {"name": "b", "namespace": "default"}}}
    assert [("managedFields" in o["metadata"]) for o in first + second] == [not handed_over] * len(first + second)
