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
