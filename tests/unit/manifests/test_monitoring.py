"""manifests/components/monitoring: the alerts pass promtool and its unit tests; alerts and dashboard read only
metrics Tollgate exports.

``promtool`` comes from Debian's ``prometheus`` package, which ``.ci/run`` installs and then requires
(``TOLLGATE_REQUIRE_PROMTOOL=1``); elsewhere the promtool tests are skipped with a line saying how to get it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.metrics import Metrics

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "manifests" / "components" / "monitoring"
RULE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboard.json"
RULE_TESTS = Path(__file__).with_name("monitoring-rules.test.yaml")
#: Series names a metric family of each type exposes, beside the family's own name.
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "summary": ("_sum", "_count", "_created"), "unknown": ("",)}


def exported_series() -> set[str]:
    """Every series name Tollgate's registries can expose (the serving process's and the leader's)."""
    registry = Metrics().registry  # the serving process's, the leader's parts (status, webhooks) included
    names = set()
    for family in registry.collect():
        names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    return names


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\btollgate_[a-z0-9_]+", expr))


def rule_spec() -> dict[str, Any]:
    doc = yaml.safe_load(RULE.read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    spec: dict[str, Any] = doc["spec"]
    return spec


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]


@pytest.fixture
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("TOLLGATE_REQUIRE_PROMTOOL"):
            pytest.fail("promtool is required here (TOLLGATE_REQUIRE_PROMTOOL) and not on PATH")
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    return found


def test_the_rules_are_valid_prometheus_rules(promtool: str, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_spec()))
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True,
                            text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in rule_spec()['groups'])} rules found" in result.stdout


def test_the_alerts_fire_when_they_should(promtool: str, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_spec()))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    result = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True,
                            text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested() -> None:
    alerts = {r["alert"] for g in rule_spec()["groups"] for r in g["rules"] if "alert" in r}
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", [])}
    # TollgateSlowPolicy and TollgateCacheNotSynced read the same shapes as TollgateHighLatency and
    # TollgateCacheStale; every other alert has a firing case.
    assert alerts - tested <= {"TollgateSlowPolicy", "TollgateCacheNotSynced"}
    assert {"TollgateWebhookErrors", "TollgateHighLatency", "TollgateCacheStale", "TollgateCertificateExpired",
            "TollgatePoliciesNotReady"} <= tested


def test_alerts_and_dashboard_read_only_metrics_tollgate_exports() -> None:
    exported = exported_series()
    exprs = [r["expr"] for g in rule_spec()["groups"] for r in g["rules"]] + dashboard_exprs()
    read = set().union(*(metric_names(e) for e in exprs))
    assert read, "no tollgate_ metric read at all"
    assert read - exported == set()
    # The names the issue asks to watch are all there.
    assert {"tollgate_admission_requests_total", "tollgate_admission_duration_seconds_bucket",
            "tollgate_policy_evaluation_duration_seconds_bucket", "tollgate_informer_staleness_seconds",
            "tollgate_certificate_expiry_seconds", "tollgate_policies"} <= read


def test_the_metric_name_check_can_fail() -> None:
    assert metric_names("rate(tollgate_admision_requests_total[5m])") - exported_series() == {
        "tollgate_admision_requests_total"}


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "tollgate" and dashboard["title"] == "Tollgate"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 8
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            used = set(re.findall(r"\$(\w+)", target["expr"]))
            assert used <= variables, (panel["title"], used - variables)


def test_the_component_names_its_files() -> None:
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    assert [MONITORING / r for r in kustomization["resources"]] == [RULE]
    [generator] = kustomization["configMapGenerator"]
    assert [MONITORING / f for f in generator["files"]] == [DASHBOARD]
    assert generator["options"]["labels"] == {"grafana_dashboard": "1"}


def test_a_histogram_bucket_separates_the_latency_alerts_threshold() -> None:
    # histogram_quantile never exceeds the highest finite bucket: the p99 > 1 s alert needs buckets above 1 s.
    metrics = Metrics()
    metrics.latency.labels("validate", "allowed").observe(2.0)
    buckets = {s.labels["le"] for f in metrics.registry.collect() if f.name == "tollgate_admission_duration_seconds"
               for s in f.samples if s.name.endswith("_bucket")}
    assert any(le != "+Inf" and float(le) > 1.0 for le in buckets)
