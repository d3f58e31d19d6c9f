"""The ``timeout`` query parameter the API server appends (a Go ``time.Duration`` string)."""

from __future__ import annotations

import pytest

from webhook.admission.server import parse_go_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10.0), ("30s", 30.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5s", 1.5), ("1h", 3600.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [None, "", "10", "s", "10x", "-1s", "10s garbage", "1e3s"])
def test_invalid_durations_fall_back(text: str | None) -> None:
    assert parse_go_duration(text) is None
