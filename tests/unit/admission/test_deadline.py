"""The ``timeout`` query parameter the API server appends (a Go ``time.Duration`` string)."""

from __future__ import annotations

import pytest

from webhook.admission.server import parse_go_duration, request_budget


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10.0), ("30s", 30.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5s", 1.5), ("1h", 3600.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [None, "", "10", "s", "10x", "-1s", "10s garbage", "1e3s"])
def test_invalid_durations_fall_back(text: str | None) -> None:
    assert parse_go_duration(text) is None


@pytest.mark.parametrize(("param", "budget"), [
    ("10s", 9.5), ("30s", 29.5), ("1h", 29.5), ("45s", 29.5), (None, 9.5), ("bogus", 9.5), ("100ms", 0.1)])
def test_the_budget_is_capped_at_30s_minus_the_margin(param: str | None, budget: float) -> None:
    # Kubernetes caps a webhook's timeoutSeconds at 30 s; a larger ?timeout= must not hold a worker longer.
    assert request_budget(param, 10.0) == pytest.approx(budget)
