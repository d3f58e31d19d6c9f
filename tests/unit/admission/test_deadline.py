"""The ``timeout`` query parameter the API server appends (a Go ``time.Duration`` string)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from webhook.admission.handler import AdmissionHandler
from webhook.admission.server import MAX_REMEMBERED_QUERIES, AdmissionServer, parse_go_duration, request_budget
from webhook.metrics import Metrics
from webhook.policy import PolicyIndex
from webhook.policy.lookups import InMemoryLookups


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


def _server() -> AdmissionServer:
    return AdmissionServer(AdmissionHandler(PolicyIndex(), InMemoryLookups()), Metrics(), max_request_bytes=1024)


@pytest.mark.parametrize(("path", "budget"), [
    ("/validate?timeout=10s", 9.5), ("/validate", 9.5), ("/validate?timeout=1m30s", 29.5),
    ("/validate?a=1&timeout=5s", 4.5), ("/validate?timeout=%35s", 4.5), ("/validate?timeout=bogus", 9.5)])
def test_the_server_takes_the_budget_from_the_query_and_answers_alike_when_remembered(path: str,
                                                                                     budget: float) -> None:
    server = _server()
    first = server._budget(make_mocked_request("POST", path))
    again = server._budget(make_mocked_request("POST", path))  # answered from what the first one remembered
    assert first == again == pytest.approx(budget)


def test_the_remembered_budgets_stay_bounded_and_later_queries_are_still_parsed() -> None:
    server = _server()
    for n in range(MAX_REMEMBERED_QUERIES + 10):
        assert server._budget(make_mocked_request("POST", f"/validate?timeout={n % 20 + 1}s&n={n}")) == \
            pytest.approx(n % 20 + 1 - 0.5)
    assert len(server._budgets) == MAX_REMEMBERED_QUERIES
