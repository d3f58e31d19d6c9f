"""Reflector + SharedInformer against a scripted ListerWatcher (no sockets).

As client-go's reflector_test.go does, each test scripts LIST/WATCH results
and asserts the resourceVersions the reflector asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from webhook.informer import (
    Backoff,
    DeletedFinalStateUnknown,
    ListOptions,
    ListResult,
    ReflectorOptions,
    ResourceEventHandlerFuncs,
    SharedInformer,
    WatchEvent,
)
from webhook.informer.errors import ApiStatusError, ConnectError, StreamError


def cm(name: str, rv: str, ns: str = "default", **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv}, "data": dict(data)}


class ScriptedListerWatcher:
    """client-go's ``ListWatch{ListFunc, WatchFunc}``: scripted results, recorded options."""

    def __init__(self, *, watch_list: bool = False) -> None:
        self.watch_list = watch_list
        self.lists: list[Any] = []  # ListResult or exception, consumed in order
        self.watches: list[Any] = []  # list of events/exceptions, or a callable
        self.list_calls: list[ListOptions] = []
        self.watch_calls: list[ListOptions] = []
        self.exhausted = asyncio.Event()

    def is_watch_list_semantics_unsupported(self) -> bool:
        # As client-go's fake clients: a scripted LIST/WATCH does not stream WatchList unless asked to.
        return not self.watch_list

    async def list(self, options: ListOptions) -> ListResult:
        self.list_calls.append(options)
        item = self.lists.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def watch(self, options: ListOptions) -> AsyncIterator[WatchEvent]:
        self.watch_calls.append(options)
        script = self.watches.pop(0) if self.watches else None
        if hasattr(script, "__aiter__"):
            return script  # type: ignore[no-any-return]
        return self._stream(script)

    async def _stream(self, script: Any) -> AsyncIterator[WatchEvent]:
        if script is None:
            self.exhausted.set()
            await asyncio.Event().wait()  # hang like an idle watch
            return
        for step in script:
            if isinstance(step, BaseException):
                raise step
            yield step


def tiny_backoff() -> Backoff:
    return Backoff(initial=0.001, cap=0.002)


def make(lw: ScriptedListerWatcher, **kw: Any) -> tuple[SharedInformer, list[tuple[str, Any]]]:
    events: list[tuple[str, Any]] = []
    inf = SharedInformer(lw, name="cm", reflector_options=ReflectorOptions(backoff_factory=tiny_backoff,
                                                                          short_watch=0.0, **kw))
    inf.add_event_handler(ResourceEventHandlerFuncs(
        add=lambda o, initial: events.append(("add", o["metadata"]["name"], initial)),
        update=lambda old, new: events.append(("update", new["metadata"]["name"])),
        delete=lambda o: events.append(("delete", o.key if isinstance(o, DeletedFinalStateUnknown) else
                                        o["metadata"]["name"], isinstance(o, DeletedFinalStateUnknown))),
        sync_calls="loop",
    ))
    return inf, events


async def handlers_caught_up(inf: SharedInformer) -> None:
    """Until every registration delivered everything queued (sync handlers run in worker threads)."""
    async with asyncio.timeout(5):
        while not inf.handlers_idle():
            await asyncio.sleep(0.001)


async def run_until_idle(inf: SharedInformer, lw: ScriptedListerWatcher) -> None:
    await inf.start()
    await asyncio.wait_for(lw.exhausted.wait(), 2)
    await handlers_caught_up(inf)
    await inf.stop()


async def test_paginated_list_then_watch_from_list_rv() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "5")], "10", continue_token="t1"), ListResult([cm("b", "7")], "10")]
    lw.watches = [[WatchEvent("MODIFIED", cm("a", "11", k="v")),
                   WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "15"}})]]
    inf, events = make(lw)
    await run_until_idle(inf, lw)
    assert [(o.resource_version, o.limit, o.continue_token) for o in lw.list_calls] == [("0", 500, None),
                                                                                       (None, 500, "t1")]
    # First watch at the list's RV; the re-watch after the clean end at the bookmark's RV (no relist).
    assert [o.resource_version for o in lw.watch_calls] == ["10", "15"]
    assert all(o.allow_watch_bookmarks and o.timeout_seconds for o in lw.watch_calls)
    assert inf.indexer.snapshot() == {"default/a": cm("a", "11", k="v"), "default/b": cm("b", "7")}
    assert events == [("add", "a", True), ("add", "b", True), ("update", "a")]
    assert inf.has_synced()


async def test_watch_410_relists_at_last_rv_and_tombstones_missed_deletes() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [
        ListResult([cm("keep", "1"), cm("gone", "2"), cm("mod", "3")], "10"),
        ListResult([cm("keep", "1"), cm("mod", "12"), cm("new", "13")], "20"),
    ]
    lw.watches = [[ApiStatusError(410, "Expired", "too old resource version: 5 (10)")]]
    inf, events = make(lw)
    await run_until_idle(inf, lw)
    # Relist at the last synced RV, without limit (NotOlderThan, served from the watch cache).
    assert [(o.resource_version, o.limit) for o in lw.list_calls] == [("0", 500), ("10", None)]
    assert [o.resource_version for o in lw.watch_calls] == ["10", "20"]
    assert set(inf.indexer.list_keys()) == {"default/keep", "default/mod", "default/new"}
    after_initial = events[3:]
    assert sorted(after_initial, key=str) == sorted(
        [("update", "mod"), ("add", "new", False), ("delete", "default/gone", True)], key=str)  # untouched: nothing


async def test_relist_expired_falls_back_to_consistent_read() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [
        ListResult([cm("a", "1")], "10"),
        ApiStatusError(410, "Expired", "The resourceVersion for the provided list is too old."),
        ListResult([cm("a", "1")], "30"),
    ]
    lw.watches = [[ApiStatusError(410, "Expired", "too old")]]
    inf, _ = make(lw)
    await run_until_idle(inf, lw)
    assert [o.resource_version for o in lw.list_calls] == ["0", "10", ""]


async def test_too_large_rv_on_list_falls_back_to_consistent_read() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ApiStatusError(504, "Timeout", "Too large resource version", causes=("ResourceVersionTooLarge",)),
                ListResult([], "3")]
    inf, _ = make(lw)
    await run_until_idle(inf, lw)
    assert [o.resource_version for o in lw.list_calls] == ["0", ""]


async def test_expired_continue_token_does_one_unpaginated_list() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1")], "10", continue_token="t1"),
                ApiStatusError(410, "Expired", "The provided continue parameter is too old"),
                ListResult([cm("a", "1"), cm("b", "2")], "10")]
    inf, _ = make(lw)
    await run_until_idle(inf, lw)
    assert [(o.resource_version, o.limit, o.continue_token) for o in lw.list_calls] == [
        ("0", 500, None), (None, 500, "t1"), ("0", None, None)]
    assert set(inf.indexer.list_keys()) == {"default/a", "default/b"}


async def test_broken_stream_and_refused_connection_rewatch_without_list() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "10")]
    lw.watches = [[WatchEvent("ADDED", cm("a", "11")), StreamError("cut mid-line")],
                  [ConnectError("refused")],
                  [WatchEvent("ADDED", cm("b", "12"))]]
    inf, _ = make(lw)
    await run_until_idle(inf, lw)
    assert len(lw.list_calls) == 1
    assert [o.resource_version for o in lw.watch_calls] == ["10", "11", "11", "12"]
    assert set(inf.indexer.list_keys()) == {"default/a", "default/b"}


async def test_failing_list_never_fills_store_partially() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1")], "10", continue_token="t"), ApiStatusError(500, "InternalError", "boom"),
                ListResult([cm("a", "1"), cm("b", "1")], "11")]
    inf, _ = make(lw)
    await inf.start()
    await asyncio.wait_for(lw.exhausted.wait(), 2)
    assert inf.has_synced() and len(inf.indexer) == 2
    await inf.stop()


async def test_raising_handler_does_not_block_others_and_late_handler_gets_synthetic_adds() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm("a", "1"), cm("b", "2")], "10")]
    inf, events = make(lw)
    inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, i: 1 / 0, sync_calls="loop"))
    await inf.start()
    await asyncio.wait_for(lw.exhausted.wait(), 2)
    late: list[str] = []
    reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, i: late.append(o["metadata"]["name"])),
                                sync_calls="thread")
    await handlers_caught_up(inf)
    assert reg.has_synced() and sorted(late) == ["a", "b"]
    assert [e[0] for e in events] == ["add", "add"]
    await inf.stop()


async def test_label_selector_goes_on_list_and_watch() -> None:
    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([], "1")]
    inf, _ = make(lw, label_selector="tollgate.dev/params=true")
    await run_until_idle(inf, lw)
    assert lw.list_calls[0].label_selector == "tollgate.dev/params=true"
    assert lw.watch_calls[0].label_selector == "tollgate.dev/params=true"


def test_backoff_doubles_with_jitter_caps_and_resets() -> None:
    now = [0.0]
    b = Backoff(clock=lambda: now[0], rng=lambda: 0.5)
    delays = [b.next_delay() for _ in range(8)]
    assert delays[:3] == pytest.approx([1.2, 2.4, 4.8])
    assert delays[-1] == pytest.approx(6.0)  # base held at cap/2 = 4 s, +50 % jitter: under the 8 s cap
    now[0] = 500.0
    assert b.next_delay() == pytest.approx(1.2)  # 2 minutes without a failure: from the start again
    b.next_delay()
    b.reset()
    assert b.next_delay() == pytest.approx(1.2)


def test_backoff_resets_after_exactly_two_minutes_without_failure_and_scales_jitter() -> None:
    now = [0.0]
    b = Backoff(clock=lambda: now[0], rng=lambda: 1.0, jitter=0.5)
    assert [b.next_delay(), b.next_delay()] == pytest.approx([1.2, 2.4])  # base * (1 + 0.5 * rng)
    now[0] = 119.9
    assert b.next_delay() == pytest.approx(4.8)
    now[0] = 119.9 + 120.0  # client-go's DelayWithReset(clock, 2m): two minutes to the tick
    assert b.next_delay() == pytest.approx(1.2)
    assert Backoff().reset_after == 120.0


def test_backoff_jitter_stays_under_the_cap_and_keeps_its_spread() -> None:
    low = Backoff(rng=lambda: 0.0)
    high = Backoff(rng=lambda: 0.999)
    for _ in range(20):
        lo, hi = low.next_delay(), high.next_delay()
    assert lo == pytest.approx(4.0) and 7.9 < hi < 8.0


async def test_a_burst_of_costly_notifications_yields_the_event_loop_between_them() -> None:
    # 50 policy edits at once must not hold the loop for the sum of their compiles: a handler task that ran
    # longer than HANDLER_TIME_SLICE yields before the next notification; cheap ones still go in one turn.
    import time

    from webhook.informer.handlers import HANDLER_TIME_SLICE

    lw = ScriptedListerWatcher()
    lw.lists = [ListResult([cm(f"c{i}", str(i)) for i in range(6)], "10")]
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    seen: list[int] = []

    def costly(_obj: dict[str, Any], _initial: bool) -> None:
        seen.append(turns)
        time.sleep(HANDLER_TIME_SLICE * 1.5)  # a compile, holding the loop

    cheap_seen: list[int] = []
    inf = SharedInformer(lw, name="cm", reflector_options=ReflectorOptions(short_watch=0.0))
    costly_reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=costly), sync_calls="loop")
    cheap_reg = inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda o, i: cheap_seen.append(turns)),
                                      sync_calls="loop")
    task = asyncio.get_running_loop().create_task(ticker())
    await inf.start()
    await asyncio.wait_for(lw.exhausted.wait(), 2)
    while not (costly_reg.has_synced() and cheap_reg.has_synced()):
        await asyncio.sleep(0)
    await inf.stop()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(seen) == 6 and seen == sorted(set(seen)), seen  # strictly increasing: a loop turn between each
    assert len(cheap_seen) == 6 and len(set(cheap_seen)) == 1, cheap_seen
