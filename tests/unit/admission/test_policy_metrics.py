"""Per-policy metrics are counted in plain ints and exported at scrape time.

``tollgate_policy_evaluations_total{policy,result}`` and
``tollgate_policy_errors_total{policy}`` must read exactly as the two labelled
prometheus-client Counters they replace: same names, types, help, labels and
counts.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from tests.unit.policy.helpers import pod, policy, request
from webhook.admission.handler import AdmissionHandler
from webhook.admission.server import AdmissionServer
from webhook.metrics import Metrics, PolicyResultCollector
from webhook.policy import PolicyIndex, PolicyResult, Result
from webhook.policy.lookups import InMemoryLookups

NO_PRIVILEGED = policy("no-privileged", validations=[{
    "expression": "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))",
    "message": "privileged containers are not allowed"}])
#: Errors at run time on every Pod (the field does not exist), under failurePolicy Ignore.
BROKEN = policy("broken", failurePolicy="Ignore", validations=[{"expression": "object.spec.nope == 'x'"}])
#: Skipped for every Pod without the label ``checked``.
LABELLED_ONLY = policy("labelled-only", matchConditions=[{
    "name": "checked", "expression": "has(object.metadata.labels) && 'checked' in object.metadata.labels"}])
NAMESPACED = policy("local", kind="AdmissionPolicy", namespace="default")


def scraped(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """``{sorted label pairs: value}`` of the samples called ``name`` in the text exposition."""
    found = {}
    for line in generate_latest(registry).decode().splitlines():
        m = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if m:
            labels = tuple(sorted(tuple(pair.split("=", 1)) for pair in m.group(1).split(",")))
            found[tuple((k, v.strip('"')) for k, v in labels)] = float(m.group(2))
    return found


async def test_the_exposition_has_the_exact_counts_after_n_reviews() -> None:
    index = PolicyIndex()
    for p in (NO_PRIVILEGED, BROKEN, LABELLED_ONLY, NAMESPACED):
        assert index.upsert(p).result.policy is not None
    metrics = Metrics()
    server = AdmissionServer(AdmissionHandler(index, InMemoryLookups(namespaces=[{"metadata": {"name": "default"}}])),
                             metrics, max_request_bytes=1 << 20)
    app = web.Application()
    app.add_routes(server.routes())
    reviews: list[dict[str, Any]] = (
        [request(pod(privileged=True))] * 3
        + [request(pod())] * 4
        + [request(pod(labels={"checked": "yes"}))] * 2
        + [request(pod(namespace="other"), namespace="other")] * 1)
    async with TestClient(TestServer(app)) as client:
        for i, req in enumerate(reviews):
            body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {**req, "uid": str(i)}}
            resp = await client.post("/validate", json=body)
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["response"]["uid"] == str(i)
    evaluations = scraped(metrics.registry, "tollgate_policy_evaluations_total")
    assert evaluations == {
        (("policy", "no-privileged"), ("result", "fail")): 3,
        (("policy", "no-privileged"), ("result", "pass")): 7,
        (("policy", "broken"), ("result", "error")): 10,
        (("policy", "labelled-only"), ("result", "skip")): 8,
        (("policy", "labelled-only"), ("result", "pass")): 2,
        (("policy", "default/local"), ("result", "pass")): 9,  # not the Pod in namespace "other"
    }
    assert scraped(metrics.registry, "tollgate_policy_errors_total") == {(("policy", "broken"),): 10}
    # The request counter is untouched by the change.
    assert metrics.registry.get_sample_value("tollgate_admission_requests_total",
                                             {"endpoint": "validate", "decision": "denied"}) == 3
    assert metrics.registry.get_sample_value("tollgate_admission_requests_total",
                                             {"endpoint": "validate", "decision": "allowed"}) == 7


def results(*pairs: tuple[str, Result]) -> list[PolicyResult]:
    return [PolicyResult(name, result) for name, result in pairs]


BATCHES = [
    results(("a", Result.PASS), ("ns/b", Result.ERROR), ("c", Result.SKIP)),
    results(("a", Result.FAIL), ("ns/b", Result.ERROR)),
    results(("a", Result.PASS), ("ns/b", Result.PASS), ("c", Result.SKIP)),
    [],
]


def counters_registry() -> CollectorRegistry:
    """The two labelled Counters the collector replaces, fed :data:`BATCHES` the way the server fed them."""
    registry = CollectorRegistry()
    evaluations = Counter("tollgate_policy_evaluations_total", "Policy evaluations by result", ["policy", "result"],
                          registry=registry)
    errors = Counter("tollgate_policy_errors_total", "CEL runtime errors by policy", ["policy"], registry=registry)
    for batch in BATCHES:
        for r in batch:
            evaluations.labels(r.policy, r.result).inc()
            if r.result is Result.ERROR:
                errors.labels(r.policy).inc()
    return registry


def without_created_values(text: bytes) -> list[str]:
    """The exposition's lines, with the timestamps of ``_created`` samples blanked."""
    return [re.sub(r"^(\S+_created\{.*\}) \S+$", r"\1 T", line) for line in text.decode().splitlines()]


def test_the_collector_exposes_what_the_counters_did() -> None:
    registry = CollectorRegistry()
    collector = PolicyResultCollector()
    registry.register(collector)
    for batch in BATCHES:
        collector.record(batch)
    expected = counters_registry()
    assert without_created_values(generate_latest(registry)) == without_created_values(generate_latest(expected))
    assert (without_created_values(generate_openmetrics(registry))
            == without_created_values(generate_openmetrics(expected)))
    assert registry.get_sample_value("tollgate_policy_evaluations_total", {"policy": "ns/b", "result": "error"}) == 2
    assert registry.get_sample_value("tollgate_policy_errors_total", {"policy": "ns/b"}) == 2
    assert registry.get_sample_value("tollgate_policy_errors_total", {"policy": "a"}) is None


def test_created_is_the_time_of_a_series_first_count() -> None:
    now = [100.0]
    registry = CollectorRegistry()
    collector = PolicyResultCollector(clock=lambda: now[0])
    registry.register(collector)
    collector.record(results(("a", Result.ERROR)))
    now[0] = 200.0
    collector.record(results(("a", Result.ERROR), ("a", Result.PASS)))
    assert registry.get_sample_value("tollgate_policy_evaluations_created", {"policy": "a", "result": "error"}) == 100
    assert registry.get_sample_value("tollgate_policy_evaluations_created", {"policy": "a", "result": "pass"}) == 200
    assert registry.get_sample_value("tollgate_policy_errors_created", {"policy": "a"}) == 100
    assert registry.get_sample_value("tollgate_policy_errors_total", {"policy": "a"}) == 2


def test_plain_strings_and_results_count_as_one_series() -> None:
    registry = CollectorRegistry()
    collector = PolicyResultCollector()
    registry.register(collector)
    collector.record(results(("a", Result.FAIL)))
    collector.record([PolicyResult("a", "fail")])  # type: ignore[arg-type]
    assert scraped(registry, "tollgate_policy_evaluations_total") == {(("policy", "a"), ("result", "fail")): 2}


def test_an_empty_collector_exposes_the_families_without_samples() -> None:
    registry = CollectorRegistry()
    registry.register(PolicyResultCollector())
    text = generate_latest(registry).decode()
    assert "# TYPE tollgate_policy_evaluations_total counter" in text
    assert "# TYPE tollgate_policy_errors_total counter" in text
    assert "tollgate_policy_evaluations_total{" not in text
