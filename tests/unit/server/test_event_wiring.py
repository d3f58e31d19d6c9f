"""Which Event sink ``serve`` gets: the API server in a cluster, log lines with --local, none with --no-events."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from webhook.admission.events import EventRecord, LogEventSink
from webhook.metrics import Metrics
from webhook.server.app import event_recorder
from webhook.server.settings import Settings


def test_local_mode_logs_events(tmp_path: Path) -> None:
    recorder = event_recorder(Settings(local_dir=tmp_path, pod_name="me"), None, Metrics())
    assert recorder is not None and isinstance(recorder.sink, LogEventSink)
    assert recorder.correlator.instance == "me"


def test_no_events_or_nowhere_to_write_is_none(tmp_path: Path) -> None:
    assert event_recorder(Settings(local_dir=tmp_path, events=False), None, Metrics()) is None
    assert event_recorder(Settings(events=False), object(), Metrics()) is None
    assert event_recorder(Settings(), None, Metrics()) is None  # no API client, no --local


def test_a_cluster_writes_through_the_api_client() -> None:
    from webhook.kube.events import ApiEventSink

    api: Any = object()
    recorder = event_recorder(Settings(), api, Metrics())
    assert recorder is not None and isinstance(recorder.sink, ApiEventSink) and recorder.sink.api is api


async def test_the_log_sink_writes_one_line_per_event_with_its_count(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    recorder = event_recorder(Settings(local_dir=Path(".")), None, metrics)
    assert recorder is not None
    rec = EventRecord(reason="PolicyViolation", message="p: no", kind="Pod", api_version="v1", name="web",
                      namespace="default")
    with caplog.at_level(logging.INFO, logger="tollgate.events"):
        await recorder.write(rec)
        await recorder.write(rec)
    records = [r for r in caplog.records if r.name == "tollgate.events"]
    assert [(r.getMessage(), getattr(r, "count", None), getattr(r, "event_message", None)) for r in records] == [
        ("event", 1, "p: no"), ("event", 2, "p: no")]
    assert metrics.events.labels("created")._value.get() == 1 and metrics.events.labels("patched")._value.get() == 1

