"""The loop-lag task: each wake-up's lateness goes into the histogram, never negative."""

from __future__ import annotations

import asyncio

import pytest

from webhook.metrics import Metrics
from webhook.server.tasks import measure_loop_lag


class _Stop(Exception):
    pass


class _FakeTime:
    """A clock that a fake sleep advances by the interval plus a scripted lateness."""

    def __init__(self, late: list[float]) -> None:
        self.now = 100.0
        self.late = late
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if not self.late:
            raise _Stop
        self.slept.append(seconds)
        self.now += seconds + self.late.pop(0)


def _observed(metrics: Metrics) -> dict[str, float]:
    return {s.name + str(s.labels.get("le", "")): s.value
            for fam in metrics.registry.collect() if fam.name == "tollgate_event_loop_lag_seconds"
            for s in fam.samples}


def test_each_wake_up_observes_its_lateness() -> None:
    metrics = Metrics()
    fake = _FakeTime([0.0, 0.003, 0.040])
    with pytest.raises(_Stop):
        asyncio.run(measure_loop_lag(metrics.loop_lag, interval=0.25, clock=fake.clock, sleep=fake.sleep))
    got = _observed(metrics)
    assert fake.slept == [0.25, 0.25, 0.25]
    assert got["tollgate_event_loop_lag_seconds_count"] == 3
    assert got["tollgate_event_loop_lag_seconds_sum"] == pytest.approx(0.043)
    assert got["tollgate_event_loop_lag_seconds_bucket0.0005"] == 1
    assert got["tollgate_event_loop_lag_seconds_bucket0.005"] == 2
    assert got["tollgate_event_loop_lag_seconds_bucket0.05"] == 3


def test_an_early_wake_up_counts_as_no_lag() -> None:
    metrics = Metrics()
    fake = _FakeTime([-0.001])
    with pytest.raises(_Stop):
        asyncio.run(measure_loop_lag(metrics.loop_lag, interval=0.25, clock=fake.clock, sleep=fake.sleep))
    got = _observed(metrics)
    assert got["tollgate_event_loop_lag_seconds_count"] == 1
    assert got["tollgate_event_loop_lag_seconds_sum"] == 0.0



def test_without_a_clock_it_reads_the_running_loops_time() -> None:
    metrics = Metrics()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        if slept:
            raise _Stop
        slept.append(seconds)

    async def main() -> None:
        with pytest.raises(_Stop):
            await measure_loop_lag(metrics.loop_lag, interval=0.0, sleep=sleep)

    asyncio.run(main())
    assert _observed(metrics)["tollgate_event_loop_lag_seconds_count"] == 1
