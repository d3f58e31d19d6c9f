"""The app freezes the heap it built once the policy caches have synced (``gc.freeze``), not before."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace

from webhook.server.tasks import freeze_heap_when_synced


async def test_the_heap_is_frozen_only_after_the_policies_synced() -> None:
    synced = False
    components = SimpleNamespace(policies_synced=lambda: synced)
    gc.unfreeze()
    task = asyncio.get_running_loop().create_task(freeze_heap_when_synced(components, settle=0))  # type: ignore[arg-type]
    try:
        for _ in range(3):
            await asyncio.sleep(0.12)
        assert gc.get_freeze_count() == 0 and not task.done()
        synced = True
        await asyncio.wait_for(task, 2)
        assert gc.get_freeze_count() > 0
    finally:
        task.cancel()
        gc.unfreeze()
