"""Suite-wide checks: no test may leave asyncio tasks running behind it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator

import pytest


@pytest.fixture(autouse=True)
async def no_leftover_tasks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fail an async test that leaves tasks pending once its own fixtures are torn down.

    Autouse fixtures are set up first, so this teardown runs after every other
    fixture of the test (servers, informers, clients) has stopped. A component
    that forgets to cancel or await a task shows up here instead of as a
    warning at loop close.
    """
    if not inspect.iscoroutinefunction(request.function) or request.node.get_closest_marker("leaves_tasks"):
        yield
        return
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t not in before and t is not current and not t.done()]
    if left:  # tasks cancelled or closed during teardown (e.g. a TLS connection's shutdown) get a moment
        await asyncio.wait(left, timeout=2.0)
    left = [t for t in left if not t.done()]
    assert not left, f"tasks left running: {[t.get_coro() for t in left]}"
