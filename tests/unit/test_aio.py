"""webhook.aio: yielding to the event loop lets what became due run before the task goes on."""

from __future__ import annotations

import asyncio
import time

from webhook.aio import yield_to_loop


async def _order(pause: object) -> list[str]:
    loop = asyncio.get_running_loop()
    order: list[str] = []
    loop.call_later(0.001, order.append, "timer")
    time.sleep(0.005)  # a costly step: the timer falls due while the task holds the loop
    await pause()  # type: ignore[operator]
    order.append("task")
    await asyncio.sleep(0.01)
    return order


async def test_yield_to_loop_lets_a_timer_that_fell_due_run_first() -> None:
    assert await _order(yield_to_loop) == ["timer", "task"]


async def test_one_sleep_0_resumes_the_task_before_that_timer() -> None:
    # Why yield_to_loop sleeps twice: the task's wake-up was queued before the timer's callback.
    assert await _order(lambda: asyncio.sleep(0)) == ["task", "timer"]
