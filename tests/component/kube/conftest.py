"""Fixtures for the webhook.kube component tests: the one fake API server, an ApiClient, a virtual clock.

Every test here talks to ``tests.fakeapi.server.FakeApiServer`` over HTTP with
the real kubernetes_asyncio ``ApiClient``; faults come from
``FakeApiServer.fail`` and the request log from ``FakeApiServer.count``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.fakeapi.server import FakeApiServer
from webhook.kube.client import api_client_for_url


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeApiServer]:
    """A running :class:`FakeApiServer`."""
    server = FakeApiServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def api(fake_api: FakeApiServer) -> AsyncIterator[ApiClient]:
    """A kubernetes_asyncio ``ApiClient`` pointed at :func:`fake_api`."""
    client = api_client_for_url(fake_api.url)
    try:
        yield client
    finally:
        await client.close()


class FakeClock:
    """Virtual monotonic time for code that takes ``clock`` and ``sleep`` callables.

    ``sleep(d)`` parks the caller until :meth:`advance` moves time past its
    deadline. Between wake-ups, :meth:`advance` lets the woken tasks run (they
    do real HTTP to the fake API server) until ``parked`` tasks sleep on this
    clock again, so the outcome does not depend on how fast the machine is.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + delay, next(self._seq), fut))
        await fut

    def parked(self) -> int:
        return sum(1 for _, _, fut in self._sleepers if not fut.done())

    async def settle(self, parked: int) -> None:
        """Run the loop until ``parked`` tasks sleep on this clock (a 10 s guard against hangs only)."""
        async with asyncio.timeout(10):
            while self.parked() < parked:
                await asyncio.sleep(0.001)

    async def advance(self, seconds: float, *, parked: int) -> None:
        """Move time forward by ``seconds``, waking sleepers in deadline order."""
        target = self.now + seconds
        await self.settle(parked)
        while self._sleepers and self._sleepers[0][0] <= target:
            when, _, fut = heapq.heappop(self._sleepers)
            if fut.done():
                continue
            self.now = max(self.now, when)
            fut.set_result(None)
            await self.settle(parked)
        self.now = target

    async def run_until(self, predicate: object, *, parked: int, step: float = 0.25, limit: float = 120.0) -> float:
        """Advance in ``step``s until ``predicate()`` holds; return the virtual seconds it took."""
        assert callable(predicate)
        start = self.now
        while not predicate():
            assert self.now - start < limit, f"not reached within {limit} virtual seconds"
            await self.advance(step, parked=parked)
        return self.now - start


@pytest.fixture
def clock() -> FakeClock:
    """A fresh :class:`FakeClock`."""
    return FakeClock()
