"""The app's long-running tasks besides the informers: fused plans compiled off the request path, the heap frozen.

Both keep the steady state fast without touching a review: :func:`compile_plans`
compiles what policy changes queued, a little per loop turn, and
:func:`freeze_heap_when_synced` takes what was built at start out of the
garbage collector's full passes.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import Protocol

from webhook.aio import yield_to_loop
from webhook.server.components import Components


async def compile_plans(c: Components) -> None:
    """Compile the index's queued fused programs off the request path, one chunk per loop turn.

    Runs for the app's lifetime; the loop serves requests between chunks (they
    take the per-policy path until their plan is compiled).
    """
    while True:
        await c.plans_pending.wait()
        c.plans_pending.clear()
        while c.index.compile_pending():
            await yield_to_loop()


async def freeze_heap_when_synced(c: Components, *, settle: float = 1.0) -> None:
    """Once the policy caches have synced, move every object alive into the GC's permanent generation.

    Everything built at start (modules, compiled policies, cached objects) then stays out of the
    collector's full passes, which otherwise walk all of it and hold the event loop while they do
    (a burst of policy edits triggers them). Objects freed by reference counting are still freed;
    only cycles among the frozen objects would stay (``gc.freeze``, the technique CPython documents
    for long-running servers).

    Args:
        c: the components (``policies_synced`` says when the policies have synced).
        settle: seconds to wait after the sync, so the first plans are compiled too.
    """
    while not c.policies_synced():
        await asyncio.sleep(0.1)
    await asyncio.sleep(settle)
    gc.collect()
    gc.freeze()


async def mark_expired_exceptions(c: Components, *, max_wait: float = 3600.0) -> None:
    """When a PolicyException's ``expiresAt`` passes, report its ``Expired`` condition and re-audit its policies.

    Decisions never wait for this (admission, audit and the CLI compare ``expiresAt`` with their own clock);
    it only updates what is reported: the status the leader writes and the background audit's rows.
    Sleeps until the next expiry, at most ``max_wait`` seconds, and re-plans whenever the exceptions
    change; an expiry passed since the last look is never missed, whatever woke the task.
    """
    cache = c.exceptions
    changed = asyncio.Event()
    cache.listeners.append(lambda _policies: changed.set())
    checked = cache.now()
    while True:
        now = cache.now()
        due = cache.next_expiry(checked)
        if due is not None and due <= now:
            checked = now
            cache.recheck()
            continue
        checked = now
        delay = max_wait if due is None else min(max_wait, (due - now).total_seconds())
        try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that races a wake-up
            async with asyncio.timeout(max(delay, 0.0) + 0.001):
                await changed.wait()
            changed.clear()
        except TimeoutError:
            pass


class LagObserver(Protocol):
    """What :func:`measure_loop_lag` feeds (a prometheus-client ``Histogram``)."""

    def observe(self, amount: float) -> None:
        """Record one lag in seconds."""
        ...


async def measure_loop_lag(histogram: LagObserver, *, interval: float = 0.25,
                           clock: Callable[[], float] | None = None,
                           sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
    """Sleep ``interval`` seconds over and over and observe how late each wake-up comes.

    The lag is the time the event loop ran other work (a review, a GC pass, a directory
    rescan) past the moment this task was due: what a request arriving then waits before
    it is read. Observed in seconds into ``tollgate_event_loop_lag_seconds``, never negative.
    Runs for the app's lifetime (the technique of Node's ``monitorEventLoopDelay``, here
    with a coarse timer: one observation per interval).

    Args:
        histogram: where each lag goes (``Metrics.loop_lag``).
        interval: seconds between wake-ups (above 0).
        clock: monotonic seconds; the running loop's ``time`` when None.
        sleep: the sleep to time (``asyncio.sleep``; tests pass a fake).
    """
    now = clock if clock is not None else asyncio.get_running_loop().time
    while True:
        due = now() + interval
        await sleep(interval)
        histogram.observe(max(0.0, now() - due))
