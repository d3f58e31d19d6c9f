"""Large reviews take turns on the event loop: one iteration's worth of their work at a time, first come first served,
while small reviews never wait (issue #29 item 8: a flood just under 32 KiB held cheap reviews behind it)."""

from __future__ import annotations

import asyncio

from webhook.admission.server import LARGE_BYTES_PER_ITERATION, LARGE_REVIEW_BYTES, LoopTurns

FLOOD = 32 * 1024 - 100  # a review just under the default --isolate-above-bytes
CHEAP = 1024


async def _iterations_until(turns: LoopTurns, sizes: list[int]) -> list[int]:
    """For each take(size), started together in one iteration: how many loop iterations later it went on."""
    started: list[int | None] = [None] * len(sizes)
    iteration = 0

    async def one(i: int, size: int) -> None:
        await turns.take(size)
        started[i] = iteration

    tasks = [asyncio.create_task(one(i, size)) for i, size in enumerate(sizes)]
    while not all(t.done() for t in tasks):
        await asyncio.sleep(0)  # one iteration: every callback ready now runs before this task resumes
        iteration += 1
    assert all(s is not None for s in started)
    return [s for s in started if s is not None]


async def test_large_reviews_go_one_iteration_apart_and_small_ones_never_wait() -> None:
    turns = LoopTurns()
    at = await _iterations_until(turns, [FLOOD, FLOOD, CHEAP, FLOOD, CHEAP])
    floods, cheap = [at[0], at[1], at[3]], [at[2], at[4]]
    assert cheap == [0, 0] and floods[0] == 0  # the first large review and every small one: in the first iteration
    assert floods[0] < floods[1] < floods[2], at  # each further one in a later iteration, in arrival order
    assert turns.waiting == 0


async def test_smaller_large_reviews_share_an_iteration_up_to_its_bytes() -> None:
    turns = LoopTurns()
    per_iteration = LARGE_BYTES_PER_ITERATION // LARGE_REVIEW_BYTES
    at = await _iterations_until(turns, [LARGE_REVIEW_BYTES] * (2 * per_iteration + 1))
    assert at.count(at[0]) == per_iteration and len(set(at)) == 3, at
    assert at == sorted(at)


async def test_a_cancelled_waiter_gives_up_its_turn() -> None:
    turns = LoopTurns()
    first, waiter, after = (asyncio.create_task(turns.take(FLOOD)) for _ in range(3))
    await asyncio.sleep(0)  # their first steps ran in one iteration: the first took the turn
    assert first.done() and turns.waiting == 2
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    await asyncio.wait_for(after, 30)  # a liveness bound only: it is let go in the next iterations
    assert turns.waiting == 0
