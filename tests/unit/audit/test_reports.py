"""PolicyReports from audit rows: sorted, counted, stable, grouped by namespace, capped most severe first."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.policy.helpers import pod, policy
from webhook.audit.evaluate import (
    AuditedPolicy,
    AuditResult,
    ReportMeta,
    ResourceRef,
    StoredObject,
    audit_policy,
    evaluate_object,
)
from webhook.audit.reports import build_report, build_reports
from webhook.informer.gvr import GVR
from webhook.policy import InMemoryLookups

NO_PRIV = {"expression": "object.spec.containers.all(c, !(c.?securityContext.?privileged.orValue(false)))",
           "message": "privileged containers are not allowed"}


def rows(objects: list[dict[str, Any]], **kw: Any) -> list[AuditResult]:
    p = audit_policy(policy(validations=[NO_PRIV]), every_policy=True)
    assert isinstance(p, AuditedPolicy)
    return [r for o in objects
            for r in evaluate_object(p, StoredObject(GVR("", "v1", "pods"), "Pod", o), InMemoryLookups(), **kw)]


def test_report_is_sorted_counted_and_stable() -> None:
    results = rows([pod("b", privileged=True), pod("a"), pod("c", privileged=True)], now=5)
    meta = ReportMeta("high", "Pod Security")
    results = [AuditResult(r.policy, r.rule, r.result, r.message, r.resource, meta, r.timestamp) for r in results]
    report = build_report("default", results)
    assert report["apiVersion"] == "wgpolicyk8s.io/v1alpha2" and report["kind"] == "PolicyReport"
    assert report["metadata"] == {"name": "tollgate-polr-ns-default", "namespace": "default",
                                  "labels": {"app.kubernetes.io/managed-by": "tollgate"}}
    assert report["summary"] == {"pass": 1, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    assert [r["resources"][0]["name"] for r in report["results"]] == ["a", "b", "c"]
    assert report["results"][1] == {
        "source": "tollgate", "policy": "p", "rule": "validations[0]", "result": "fail",
        "message": "privileged containers are not allowed", "severity": "high", "category": "Pod Security",
        "scored": True, "timestamp": {"seconds": 5, "nanos": 0},
        "resources": [{"apiVersion": "v1", "kind": "Pod", "name": "b", "namespace": "default"}]}
    assert build_report("default", reversed(results)) == report
    assert json.loads(json.dumps(report)) == report  # plain JSON: results are wire strings, not enum reprs
    cluster = build_report(None, [])
    assert cluster["kind"] == "ClusterPolicyReport" and "namespace" not in cluster["metadata"]
    assert cluster["summary"] == {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}


def test_reports_are_one_per_namespace_then_the_cluster_report() -> None:
    ns_row = rows([pod("a", "team-b"), pod("b", "team-a")])
    node = AuditResult("p", "", "skip", "x", ResourceRef("v1", "Node", "n1", None, None))
    reports = build_reports([*ns_row, node])
    assert [(r["kind"], r["metadata"].get("namespace")) for r in reports] == [
        ("PolicyReport", "team-a"), ("PolicyReport", "team-b"), ("ClusterPolicyReport", None)]
    assert build_reports([]) == []


def test_oversized_report_keeps_failures_first_and_says_what_it_left_out() -> None:
    results = rows([pod(f"p{i:02d}", privileged=i % 10 == 0) for i in range(40)])
    full = build_report("default", results, max_bytes=None)
    one_row = len(json.dumps(full["results"][0], separators=(",", ":"))) + 1
    capped = build_report("default", results, max_bytes=6 * one_row)
    assert capped["summary"] == full["summary"] == {"pass": 36, "fail": 4, "warn": 0, "error": 0, "skip": 0}
    kept = [(r["result"], r["resources"][0]["name"]) for r in capped["results"]]
    assert [k for k in kept if k[0] == "fail"] == [("fail", "p00"), ("fail", "p10"), ("fail", "p20"), ("fail", "p30")]
    assert len(kept) in (5, 6) and kept == sorted(kept, key=lambda k: k[1])  # still in report order
    assert capped["metadata"]["annotations"] == {"tollgate.dev/omitted-results": str(40 - len(kept))}
    assert "annotations" not in full["metadata"]


def test_a_capped_report_keeps_results_in_the_one_severity_order() -> None:
    # Result.severity: error, fail, warn, pass, skip. One row of each (in rule order skip ... error).
    ref = ResourceRef("v1", "Pod", "x", "default", None)
    results = [AuditResult("p", f"validations[{i}]", result, "m", ref) for i, result in
               enumerate(("skip", "pass", "warn", "fail", "error"))]
    one_row = max(len(json.dumps(r.as_dict(), separators=(",", ":"))) + 1 for r in results)
    kept = {n: [r["result"] for r in build_report("default", results, max_bytes=n * one_row)["results"]]
            for n in (1, 4)}
    assert kept == {1: ["error"], 4: ["pass", "warn", "fail", "error"]}  # kept in report (rule) order
    assert build_report("default", results, max_bytes=one_row)["metadata"]["annotations"] == \
        {"tollgate.dev/omitted-results": "4"}
