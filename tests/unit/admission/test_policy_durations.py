"""``tollgate_policy_evaluation_duration_seconds{policy,endpoint}``: one observation per policy evaluated."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest

from tests.unit.admission.test_policy_metrics import BROKEN, LABELLED_ONLY, NAMESPACED, NO_PRIVILEGED, scraped
from tests.unit.policy.helpers import pod, policy, request
from webhook import metrics as metrics_module
from webhook.admission.handler import AdmissionDecision, AdmissionHandler
from webhook.admission.isolation.messages import Done
from webhook.admission.review import allowed
from webhook.admission.server import AdmissionServer
from webhook.metrics import OTHER_POLICY, POLICY_DURATION_BUCKETS, Metrics, PolicyDurationCollector
from webhook.policy import Decision, PolicyIndex, PolicyResult, RequestCoordinates, Result, evaluate_validating
from webhook.policy.lookups import InMemoryLookups

NAME = "tollgate_policy_evaluation_duration_seconds"
ADD_LABEL = policy("add-label", mutations=[{
    "patchType": "ApplyConfiguration",
    "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'tollgate.dev/seen': 'yes'}}}"}}])


async def review_all(index: PolicyIndex, endpoint: str, reviews: list[dict[str, Any]]) -> Metrics:
    metrics = Metrics()
    server = AdmissionServer(AdmissionHandler(index, InMemoryLookups(namespaces=[{"metadata": {"name": "default"}}])),
                             metrics, max_request_bytes=1 << 20)
    app = web.Application()
    app.add_routes(server.routes())
    async with TestClient(TestServer(app)) as client:
        for i, req in enumerate(reviews):
            body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {**req, "uid": str(i)}}
            resp = await client.post(f"/{endpoint}", json=body)
            assert resp.status == 200, await resp.text()
    return metrics


def counts(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    """``{(policy, endpoint): _count}`` from the text exposition."""
    return {(dict(k)["policy"], dict(k)["endpoint"]): v for k, v in scraped(registry, f"{NAME}_count").items()}


async def test_every_evaluated_policy_is_observed_once_per_review_on_validate() -> None:
    index = PolicyIndex()
    for p in (NO_PRIVILEGED, BROKEN, LABELLED_ONLY, NAMESPACED):
        assert index.upsert(p).result.policy is not None
    reviews = ([request(pod(privileged=True))] * 3 + [request(pod())] * 4
               + [request(pod(labels={"checked": "yes"}))] * 2 + [request(pod(namespace="other"), namespace="other")])
    metrics = await review_all(index, "validate", reviews)
    # One observation for each result counted by tollgate_policy_evaluations_total (fused passes and skips too).
    evaluated: dict[str, float] = {}
    for labels, value in scraped(metrics.registry, "tollgate_policy_evaluations_total").items():
        evaluated[dict(labels)["policy"]] = evaluated.get(dict(labels)["policy"], 0) + value
    assert counts(metrics.registry) == {(p, "validate"): n for p, n in evaluated.items()}
    assert evaluated["default/local"] == 9 and evaluated["no-privileged"] == 10
    total = metrics.registry.get_sample_value(f"{NAME}_sum", {"policy": "no-privileged", "endpoint": "validate"})
    assert total is not None and total > 0


async def test_mutations_are_observed_under_the_mutate_endpoint() -> None:
    index = PolicyIndex()
    assert index.upsert(ADD_LABEL).result.policy is not None
    metrics = await review_all(index, "mutate", [request(pod())] * 2)
    assert counts(metrics.registry) == {("add-label", "mutate"): 2}


def test_buckets_are_cumulative_and_end_with_the_count() -> None:
    collector = PolicyDurationCollector()
    collector.record("validate", [("a", 0.000001), ("b", 0.0003)])
    collector.record("validate", [("a", 0.002), ("a", 5.0)])
    registry = CollectorRegistry()
    registry.register(collector)
    sample = registry.get_sample_value

    def bucket(le: str) -> float | None:
        return sample(f"{NAME}_bucket", {"policy": "a", "endpoint": "validate", "le": le})

    assert bucket("1e-05") == 1 and bucket("0.001") == 1 and bucket("0.0025") == 2 and bucket("1.0") == 2
    assert bucket("+Inf") == 3 == sample(f"{NAME}_count", {"policy": "a", "endpoint": "validate"})
    assert sample(f"{NAME}_sum", {"policy": "a", "endpoint": "validate"}) == 0.000001 + 0.002 + 5.0
    text = generate_latest(registry).decode()
    assert f"# TYPE {NAME} histogram" in text
    assert len(re.findall(rf'{NAME}_bucket\{{endpoint="validate",le="[^"]+",policy="a"\}}', text)) == (
        len(POLICY_DURATION_BUCKETS) + 1)


def test_a_duration_on_a_bucket_bound_counts_in_that_bucket() -> None:
    # Prometheus' le is inclusive: 0.001 s is "le=0.001", not only "le=0.0025".
    collector = PolicyDurationCollector()
    collector.record("mutate", [("a", 0.001), ("a", 0.0)])
    registry = CollectorRegistry()
    registry.register(collector)
    labels = {"policy": "a", "endpoint": "mutate"}
    assert registry.get_sample_value(f"{NAME}_bucket", {**labels, "le": "0.0005"}) == 1
    assert registry.get_sample_value(f"{NAME}_bucket", {**labels, "le": "0.001"}) == 2


def test_policies_past_the_series_cap_share_one_series(monkeypatch: Any) -> None:
    monkeypatch.setattr(metrics_module, "MAX_POLICY_SERIES", 3)
    collector = PolicyDurationCollector()
    collector.record("validate", [(f"tenant-{i}/p", 0.001) for i in range(10)])
    collector.record("validate", [("tenant-0/p", 0.001), ("tenant-9/p", 0.001)])
    registry = CollectorRegistry()
    registry.register(collector)
    assert counts(registry) == {("tenant-0/p", "validate"): 2, ("tenant-1/p", "validate"): 1,
                                ("tenant-2/p", "validate"): 1, (OTHER_POLICY, "validate"): 8}


def test_a_workers_decision_carries_its_durations_back() -> None:
    decision = AdmissionDecision(allowed("u"), Decision.ALLOWED, (PolicyResult("a", Result.PASS),),
                                 (("a", 0.25),))
    assert Done.of(decision).admission_decision().durations == (("a", 0.25),)


def test_a_fused_group_shares_its_time_among_the_policies_it_passed() -> None:
    index = PolicyIndex()
    names = [f"copy-{i}" for i in range(4)]
    for name in names:
        index.upsert(policy(name, validations=[{"expression": "object.metadata.name != 'forbidden'"}]))
    plan = index.plan(RequestCoordinates.of(request(pod()))).compile_all()
    assert len(plan.groups) == 1 and plan.groups[0].program is not None  # one fused program for the four
    outcome = evaluate_validating(request(pod()), plan, InMemoryLookups())
    assert [r.result for r in outcome.results] == [Result.PASS] * 4
    assert sorted(outcome.durations) == names
    shares = set(outcome.durations.values())
    assert len(shares) == 1 and shares.pop() > 0  # one program's time, split equally
