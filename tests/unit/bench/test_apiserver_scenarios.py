"""bench/apiserver.py's scenarios side by side: each scenario's webhooks select only its Namespace, and a ratio is
taken per repetition (a point and its floor seconds apart) before the median."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import apiserver


def _config(kind: str, *names: str, selector: dict[str, object] | None = None) -> dict[str, object]:
    webhooks: list[dict[str, object]] = []
    for name in names:
        webhook: dict[str, object] = {"name": name, "rules": [{"resources": ["pods"]}]}
        if selector is not None:
            webhook["namespaceSelector"] = selector
        webhooks.append(webhook)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "tollgate"},
            "webhooks": webhooks}


def test_each_webhook_is_renamed_and_narrowed_to_the_scenarios_namespace_keeping_its_own_selector() -> None:
    excluded = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": ["kube-system"]}]}
    original = _config("ValidatingWebhookConfiguration", "validate.tollgate.dev", selector=excluded)
    [config] = apiserver.scoped([original, _config("MutatingWebhookConfiguration")], "noop-patch")
    assert config["metadata"]["name"] == "bench-noop-patch"
    [webhook] = config["webhooks"]
    assert webhook["name"] == "noop-patch.validate.tollgate.dev"
    assert webhook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
        {"key": apiserver.SCENARIO_LABEL, "operator": "In", "values": ["noop-patch"]}]
    # the generated configuration is not changed: every scenario is scoped from the same one
    assert original["webhooks"][0]["namespaceSelector"] == excluded  # type: ignore[index]
    assert original["metadata"] == {"name": "tollgate"}


def test_a_webhook_without_a_selector_gets_the_scenarios() -> None:
    [config] = apiserver.scoped([_config("MutatingWebhookConfiguration", "mutate.tollgate.dev")], "tollgate")
    assert config["webhooks"][0]["namespaceSelector"] == {
        "matchExpressions": [{"key": apiserver.SCENARIO_LABEL, "operator": "In", "values": ["tollgate"]}]}
    assert apiserver.namespace_of("tollgate") == "bench-tollgate"


def test_ratios_are_taken_per_repetition_then_the_median() -> None:
    # The machine's speed moves between repetitions; the median of the ratios is 1.1 (0.9 for throughput),
    # the ratio of the medians would be 2.2 (0.5).
    floor = [{"p50_ms": 1.0, "p99_ms": 2.0, "rps": 100.0}, {"p50_ms": 4.0, "p99_ms": 8.0, "rps": 25.0},
             {"p50_ms": 2.0, "p99_ms": 4.0, "rps": 50.0}]
    ours = [{"p50_ms": 1.0, "p99_ms": 2.0, "rps": 100.0}, {"p50_ms": 4.4, "p99_ms": 8.8, "rps": 22.5},
            {"p50_ms": 6.0, "p99_ms": 12.0, "rps": 25.0}]
    assert apiserver.paired_ratios(ours, floor) == {"p50": 1.1, "p99": 1.1, "throughput": 0.9}


def test_each_gated_pair_is_adjacent_in_the_order() -> None:
    order = list(apiserver.SCENARIOS)
    for ours, floor in apiserver.PAIRS:
        if (ours, floor) == ("tollgate", "noop"):
            continue  # informational: the patch's floor is the gated one
        assert abs(order.index(ours) - order.index(floor)) == 1, (ours, floor)
