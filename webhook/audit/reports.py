"""PolicyReports from audit rows: one per namespace plus one ClusterPolicyReport, capped in size (pure; no I/O).

:func:`build_report` turns :class:`~webhook.audit.evaluate.AuditResult` rows into a
``wgpolicyk8s.io/v1alpha2`` ``PolicyReport`` (one per namespace) or
``ClusterPolicyReport`` (one for cluster-scoped objects), with summary counts,
``severity`` and ``category`` from the policy's annotations. One report per
namespace is the layout Kyverno used up to 1.9 (``polr-ns-<namespace>``, plus
one ClusterPolicyReport); Kyverno 1.10+ writes one report per resource instead.
:func:`build_reports` groups rows by namespace and builds every report, as
``tollgate audit`` prints them; ``webhook.kube.reports`` writes them in a cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from webhook.audit.evaluate import AuditResult
from webhook.policy.vocabulary import Result

__all__ = [
    "MANAGED_BY",
    "MAX_REPORT_BYTES",
    "REPORT_API_VERSION",
    "REPORT_GROUP",
    "REPORT_VERSION",
    "SUMMARY_RESULTS",
    "TRUNCATED_ANNOTATION",
    "build_report",
    "build_reports",
    "content",
    "report_name",
]

REPORT_GROUP = "wgpolicyk8s.io"
REPORT_VERSION = "v1alpha2"
REPORT_API_VERSION = f"{REPORT_GROUP}/{REPORT_VERSION}"
#: Label on every report Tollgate writes (so stale ones can be found and deleted).
MANAGED_BY = ("app.kubernetes.io/managed-by", "tollgate")
#: ``summary`` keys, in the order of the v1alpha2 ``PolicyReportSummary``.
SUMMARY_RESULTS = (Result.PASS, Result.FAIL, Result.WARN, Result.ERROR, Result.SKIP)
#: Default cap on one report's JSON size: under etcd's 1.5 MiB request limit with room for metadata.
MAX_REPORT_BYTES = 1024 * 1024
TRUNCATED_ANNOTATION = "tollgate.dev/omitted-results"


def report_name(namespace: str | None) -> str:
    """``tollgate-polr-ns-<namespace>`` or ``tollgate-clusterpolicyreport`` (Kyverno's pre-1.10 names, prefixed)."""
    return f"tollgate-polr-ns-{namespace}" if namespace else "tollgate-clusterpolicyreport"


def _sort_key(r: AuditResult) -> tuple[str, ...]:
    return (r.policy, r.rule, r.resource.namespace or "", r.resource.kind, r.resource.name, r.resource.api_version)


def build_report(namespace: str | None, results: Iterable[AuditResult], *,
                 max_bytes: int | None = MAX_REPORT_BYTES) -> dict[str, Any]:
    """A ``PolicyReport`` for ``namespace`` (``ClusterPolicyReport`` when None) holding ``results``.

    Results are sorted by policy, rule and resource, so equal inputs build
    equal reports; ``summary`` counts ``pass``/``fail``/``warn``/``error``/``skip``
    over *all* results. When the results' JSON would exceed ``max_bytes``,
    results are kept most severe first (:attr:`Result.severity <webhook.policy.vocabulary.Result.severity>`:
    error, fail, warn, pass, skip), in report order within a result, until the
    cap, and ``metadata.annotations["tollgate.dev/omitted-results"]`` says how
    many were left out (an object that large could not be stored: etcd takes 1.5 MiB).
    """
    rows = sorted(results, key=_sort_key)
    counts = Counter(r.result for r in rows)
    metadata: dict[str, Any] = {"name": report_name(namespace), "labels": {MANAGED_BY[0]: MANAGED_BY[1]}}
    if namespace:
        metadata["namespace"] = namespace
    items = [r.as_dict() for r in rows]
    if max_bytes is not None and len(json.dumps(items, separators=(",", ":"))) > max_bytes:
        sizes = [len(json.dumps(i, separators=(",", ":"))) + 1 for i in items]
        keep: set[int] = set()
        total = 0
        for idx in sorted(range(len(rows)), key=lambda i: (Result(rows[i].result).severity, i)):
            if total + sizes[idx] > max_bytes:
                break
            keep.add(idx)
            total += sizes[idx]
        metadata["annotations"] = {TRUNCATED_ANNOTATION: str(len(items) - len(keep))}
        items = [item for i, item in enumerate(items) if i in keep]
    return {
        "apiVersion": REPORT_API_VERSION,
        "kind": "PolicyReport" if namespace else "ClusterPolicyReport",
        "metadata": metadata,
        "summary": {str(k): counts.get(k, 0) for k in SUMMARY_RESULTS},
        "results": items,
    }


def build_reports(results: Iterable[AuditResult], *, max_bytes: int | None = MAX_REPORT_BYTES) -> list[dict[str, Any]]:
    """Every report ``results`` fill: PolicyReports by namespace name, then the ClusterPolicyReport (if any rows).

    A row goes to its object's namespace (a note about an AdmissionPolicy to the policy's namespace).
    """
    by_namespace: dict[str | None, list[AuditResult]] = {}
    for r in results:
        by_namespace.setdefault(r.resource.namespace, []).append(r)
    reports = [build_report(ns, by_namespace[ns], max_bytes=max_bytes) for ns in sorted(n for n in by_namespace if n)]
    if by_namespace.get(None):
        reports.append(build_report(None, by_namespace[None], max_bytes=max_bytes))
    return reports


def content(report: dict[str, Any]) -> dict[str, Any]:
    """The part of a report Tollgate owns (``summary`` and ``results``), for change detection."""
    return {"summary": report.get("summary") or {}, "results": report.get("results") or []}
