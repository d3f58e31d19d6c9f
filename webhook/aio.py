"""asyncio helpers shared by every layer (imports nothing from Tollgate)."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has finished; its ``CancelledError`` is swallowed.

    A task that already finished is only awaited (its exception, if any, is
    swallowed too: the caller is shutting it down, not reading its result).
    ``None`` is accepted so callers need not check.
    """
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if (current := asyncio.current_task()) is not None and current.cancelling():
            raise  # we ourselves are being cancelled: do not swallow that
    except Exception:  # noqa: BLE001 - a task being shut down may have failed; nobody reads its result
        pass


async def yield_to_loop() -> None:
    """Let the event loop run everything else that is due before this task goes on.

    One ``await asyncio.sleep(0)`` resumes the task at the head of the next iteration's ready callbacks,
    *before* the timers and I/O that became due while it ran (their callbacks are queued behind it): two
    costly steps separated by one ``sleep(0)`` hold the loop back to back (bench/stall.py measured it with a
    lag probe). The second ``sleep(0)`` lets that iteration's timers and I/O callbacks run first.
    """
    await asyncio.sleep(0)
    await asyncio.sleep(0)
