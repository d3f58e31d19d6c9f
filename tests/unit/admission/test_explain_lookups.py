"""``/explain``'s cache reads from its thread run on the event loop, where the informers write."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from webhook.admission.explain import LoopLookups
from webhook.policy.lookups import InMemoryLookups


class Recording(InMemoryLookups):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.threads: list[int] = []

    def get_namespace(self, name: str) -> dict[str, Any] | None:
        self.threads.append(threading.get_ident())
        return super().get_namespace(name)


async def test_a_read_from_another_thread_runs_on_the_loop() -> None:
    caches = Recording(namespaces=[{"metadata": {"name": "shop", "labels": {"team": "a"}}}])
    lookups = LoopLookups(caches, asyncio.get_running_loop(), timeout=30)
    found = await asyncio.to_thread(lookups.get_namespace, "shop")
    assert found is not None and found["metadata"]["labels"] == {"team": "a"}
    assert lookups.get_namespace("absent") is None  # on the loop's own thread: called directly
    assert caches.threads == [threading.get_ident()] * 2


async def test_an_error_is_raised_in_the_reading_thread_and_only_lookups_are_forwarded() -> None:
    class Broken(InMemoryLookups):
        def is_synced(self, cache: str) -> bool:
            raise KeyError(cache)

    lookups = LoopLookups(Broken(), asyncio.get_running_loop(), timeout=30)
    with pytest.raises(KeyError):
        await asyncio.to_thread(lookups.is_synced, "policies")
    with pytest.raises(AttributeError):
        lookups.set_namespace  # noqa: B018 - not a method of the Lookups protocol
