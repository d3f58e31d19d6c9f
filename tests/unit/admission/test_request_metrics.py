"""The per-review counter and histogram expose exactly what prometheus-client's Counter and Histogram would."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from webhook.metrics import LockFreeCounter, LockFreeHistogram

BUCKETS = (0.0005, 0.001, 0.0025, 1.0, 10.0)
OBSERVED = [("validate", "allowed", 0.0005), ("validate", "allowed", 0.0007), ("validate", "denied", 2.0),
            ("mutate", "allowed", 0.0), ("mutate", "allowed", 50.0)]


def exposition(registry: CollectorRegistry) -> list[str]:
    # _created values are the wall-clock time of first use: compare everything else exactly.
    text = generate_latest(registry).decode()
    return sorted(re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text).splitlines())


def test_the_lock_free_metrics_expose_what_prometheus_client_does() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = LockFreeCounter("t_requests_total", "reviews", ["endpoint", "decision"])
    histogram = LockFreeHistogram("t_duration_seconds", "time", ["endpoint", "decision"], buckets=BUCKETS)
    ours.register(counter)
    ours.register(histogram)
    reference_counter = Counter("t_requests_total", "reviews", ["endpoint", "decision"], registry=theirs)
    reference_histogram = Histogram("t_duration_seconds", "time", ["endpoint", "decision"], buckets=BUCKETS,
                                    registry=theirs)
    for endpoint, decision, seconds in OBSERVED:
        counter.labels(endpoint, decision).inc()
        histogram.labels(endpoint, decision).observe(seconds)
        reference_counter.labels(endpoint, decision).inc()
        reference_histogram.labels(endpoint, decision).observe(seconds)
    assert exposition(ours) == exposition(theirs)
    assert 't_duration_seconds_bucket{decision="allowed",endpoint="validate",le="0.0005"} 1.0' in exposition(ours)


def test_a_label_set_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="expected labels"):
        LockFreeCounter("t_total", "t", ["endpoint", "decision"]).labels("validate")
