"""The /explain rate limit: a token bucket that refills at its rate and never holds more than its burst."""

from __future__ import annotations

from webhook.admission.explain import TokenBucket


def test_a_burst_then_one_per_interval() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == 0.5  # empty: the next token in half a second
    now[0] = 0.5
    assert bucket.take() == 0.0
    now[0] = 100.0  # a long pause refills to the burst, not beyond
    assert [bucket.take() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]
