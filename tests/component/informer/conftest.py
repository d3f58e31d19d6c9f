"""The real KubeListerWatcher and SharedInformer against the HTTP fake API server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakeapi.server import FakeApiServer
from webhook.informer import Backoff, ReflectorOptions, ResourceEventHandlerFuncs, SharedInformer
from webhook.informer.store import DeletedFinalStateUnknown, drop_managed_fields
from webhook.kube.client import api_client_for_url
from webhook.kube.listwatch import KubeListerWatcher


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def api_client(fake_api: FakeApiServer) -> AsyncIterator[Any]:
    client = api_client_for_url(fake_api.url)
    yield client
    await client.close()


class Recorder:
    """Handler that records every notification as a tuple."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def funcs(self) -> ResourceEventHandlerFuncs:
        return ResourceEventHandlerFuncs(
            add=lambda o, initial: self.events.append(("add", o["metadata"]["name"], initial)),
            update=lambda old, new: self.events.append(("update", new["metadata"]["name"])),
            delete=lambda o: self.events.append(
                ("tombstone", o.key) if isinstance(o, DeletedFinalStateUnknown) else ("delete", o["metadata"]["name"])),
            sync_calls="loop",
        )


@pytest.fixture
async def make_informer(api_client: Any) -> AsyncIterator[Callable[..., tuple[SharedInformer, Recorder]]]:
    started: list[SharedInformer] = []

    def make(resource: str = "configmaps", *, read_timeout: float = 5.0, label_selector: str | None = None,
             resync: float = 0.0, min_watch_timeout: int = 30, watch_list: bool = False,
             initial_events_timeout: float = 10.0, short_watch: float = 0.05, compact: bool = False,
             sleep: Callable[[float], Any] = asyncio.sleep,
             max_line_bytes: int = 16 * 1024 * 1024) -> tuple[SharedInformer, Recorder]:
        """An informer over HTTP; ``watch_list`` off by default: the E scenarios are the LIST path's."""
        lw = KubeListerWatcher(api_client, group="", version="v1", plural=resource, watch_read_timeout=read_timeout,
                               max_line_bytes=max_line_bytes)
        options = ReflectorOptions(label_selector=label_selector, min_watch_timeout=min_watch_timeout,
                                   short_watch=short_watch, use_watch_list=watch_list,
                                   initial_events_timeout=initial_events_timeout,
                                   backoff_factory=lambda: Backoff(initial=0.02, cap=0.1))
        inf = SharedInformer(lw, name=resource, reflector_options=options, resync_check_period=resync,
                             compact=compact, sleep=sleep)
        rec = Recorder()
        inf.add_event_handler(rec.funcs())
        started.append(inf)
        return inf, rec

    yield make
    for inf in started:
        await inf.stop()


def cm(name: str, ns: str = "default", labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


async def converge(inf: SharedInformer, fake: FakeApiServer, resource: str = "configmaps",
                   selector: Callable[[dict[str, Any]], bool] = lambda o: True, timeout: float = 30.0,
                   handlers: bool = True) -> None:
    """Wait until the cache equals the server's state (full objects) and every handler has been told,
    or fail with both states. ``timeout`` is a liveness bound for a loaded machine, never a measurement."""
    want: dict[str, Any] = {}
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        want = {k: drop_managed_fields(o) for k, o in fake.state(resource).items() if selector(o)}
        if inf.has_synced() and inf.indexer.snapshot() == want and (inf.handlers_idle() or not handlers):
            return
        await asyncio.sleep(0.01)
    assert inf.indexer.snapshot() == want
