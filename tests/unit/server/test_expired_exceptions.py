"""mark_expired_exceptions: an expiry that passed is reported Expired whatever woke the task (fake clock)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, cast

from webhook.aio import cancel_and_wait
from webhook.policy.exceptions import ExceptionCache
from webhook.server.components import Components
from webhook.server.tasks import mark_expired_exceptions

T0 = datetime.datetime(2026, 11, 28, 6, 0, tzinfo=datetime.UTC)


def exception(name: str, expires: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"policies": [{"name": "p"}], "reason": "OPS-1"}
    if expires:
        spec["expiresAt"] = expires
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": "PolicyException",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}


class Stub:
    def __init__(self, cache: ExceptionCache) -> None:
        self.exceptions = cache


async def test_an_expiry_passed_while_asleep_is_reported_when_anything_wakes_the_task() -> None:
    clock = [T0 - datetime.timedelta(hours=1)]
    reported: dict[str, str] = {}
    expired = asyncio.Event()

    def sink(obj: dict[str, Any], condition: dict[str, Any]) -> None:
        reported[obj["metadata"]["name"]] = condition["reason"]
        if condition["reason"] == "Expired":
            expired.set()

    told: list[frozenset[str]] = []
    cache = ExceptionCache(status_sink=sink, now=lambda: clock[0])
    cache.listeners.append(told.append)
    cache.on_add(exception("debug", "2026-11-28T06:00:00Z"))
    assert reported == {"debug": "Compiled"}
    # max_wait an hour: the task sleeps past the test unless something wakes it.
    task = asyncio.get_running_loop().create_task(mark_expired_exceptions(cast(Components, Stub(cache))))
    try:
        await asyncio.sleep(0)
        clock[0] = T0 + datetime.timedelta(seconds=1)  # the expiry passes while the task waits
        cache.on_add(exception("other"))  # an unrelated change wakes it
        await asyncio.wait_for(expired.wait(), timeout=5)
        assert reported["debug"] == "Expired"
        assert frozenset({"p"}) in told[1:]  # the background audit re-evaluates the exempted policy
    finally:
        await cancel_and_wait(task)
