"""The dynamic informer collector exports what the factory reports, at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from webhook.metrics import DynamicInformerCollector


def test_collector_exports_usage_refusals_and_counters() -> None:
    usage = {"v1/pods": (3, 1200)}
    registry = CollectorRegistry()
    registry.register(DynamicInformerCollector(lambda: usage, lambda: {"apps/v1/deployments": "budget"},
                                                lambda: {"audit_evaluations": 7}))
    assert registry.get_sample_value("tollgate_dynamic_informer_objects", {"gvr": "v1/pods"}) == 3
    assert registry.get_sample_value("tollgate_dynamic_informer_bytes", {"gvr": "v1/pods"}) == 1200
    assert registry.get_sample_value("tollgate_dynamic_informer_refused",
                                     {"gvr": "apps/v1/deployments", "reason": "budget"}) == 1
    assert registry.get_sample_value("tollgate_audit_evaluations_total") == 7
    usage["v1/pods"] = (4, 1500)  # read at scrape time
    assert b'tollgate_dynamic_informer_objects{gvr="v1/pods"} 4.0' in generate_latest(registry)
