"""Background audit: evaluate existing objects with the admission engine and build PolicyReports (pure).

A policy with ``spec.background: true`` is also applied to the objects that
already exist (Kyverno's background scan). Each cached object is evaluated
exactly as admission would evaluate its creation: :func:`audit_request`
synthesizes an AdmissionRequest (operation ``CREATE``, empty ``userInfo``,
no ``oldObject``, ``kind``/``resource`` from the object's GVR,
``namespace``/``name`` from the object) and :func:`evaluate_object` calls
:func:`webhook.policy.engine.evaluate_validating` with one policy per
validation, so every validation gets its own result (``rule`` is
``validations[i]``, its spec path).

A policy whose CEL reads what a stored object cannot supply —
``request.userInfo`` or ``oldObject`` — is not auditable
(:func:`not_auditable`, a conservative check of the expression text); it is
reported once, as a ``skip`` result about the policy itself.

:func:`build_report` turns results into a ``wgpolicyk8s.io/v1alpha2``
``PolicyReport`` (one per namespace) or ``ClusterPolicyReport`` (one for
cluster-scoped objects), with summary counts, ``severity`` and ``category``
from the policy's ``policies.tollgate.dev/severity`` and
``policies.tollgate.dev/category`` annotations (Kyverno's
``policies.kyverno.io/*`` convention). One report per namespace is the
layout Kyverno used up to 1.9 (``polr-ns-<namespace>``, plus one
ClusterPolicyReport); Kyverno 1.10+ writes one report per resource instead.
No I/O.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from webhook.policy.compiler import CompiledPolicy
from webhook.policy.engine import evaluate_validating
from webhook.policy.lookups import Lookups
from webhook.policy.model import PolicySpec

REPORT_GROUP = "wgpolicyk8s.io"
REPORT_VERSION = "v1alpha2"
REPORT_API_VERSION = f"{REPORT_GROUP}/{REPORT_VERSION}"
SOURCE = "tollgate"
#: Label on every report Tollgate writes (so stale ones can be found and deleted).
MANAGED_BY = ("app.kubernetes.io/managed-by", "tollgate")
SEVERITY_ANNOTATION = "policies.tollgate.dev/severity"
CATEGORY_ANNOTATION = "policies.tollgate.dev/category"
#: ``PolicyResultSeverity`` values of the v1alpha2 API.
SEVERITIES = frozenset({"critical", "high", "medium", "low", "info"})
RESULTS = ("pass", "fail", "warn", "error", "skip")

_USER_INFO = re.compile(r"\buserInfo\b")
_OLD_OBJECT = re.compile(r"\boldObject\b")


def _expressions(spec: PolicySpec) -> list[str]:
    out = [c.expression for c in spec.match_conditions]
    out += [v.expression for v in spec.variables]
    for v in spec.validations:
        out.append(v.expression)
        if v.message_expression:
            out.append(v.message_expression)
    out += [a.value_expression for a in spec.audit_annotations]
    return out


def not_auditable(spec: PolicySpec) -> str | None:
    """Why the policy cannot be evaluated on stored objects, or None.

    Conservative: any mention of ``userInfo`` or ``oldObject`` in any
    expression (matchConditions, variables, validations, messageExpressions,
    auditAnnotations) counts, even inside a string literal.
    """
    if not spec.validations:
        return "the policy has no validations"
    reads = set()
    for expr in _expressions(spec):
        if _USER_INFO.search(expr):
            reads.add("request.userInfo")
        if _OLD_OBJECT.search(expr):
            reads.add("oldObject")
    if reads:
        return f"not auditable: its CEL reads {' and '.join(sorted(reads))}, which a stored object does not have"
    return None


@dataclass(frozen=True, slots=True)
class ResourceRef:
    """``corev1.ObjectReference`` of an evaluated object (a result's ``resources[0]``)."""

    api_version: str
    kind: str
    name: str
    namespace: str | None
    uid: str | None

    def as_dict(self) -> dict[str, str]:
        """The wire form (empty fields left out)."""
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True, slots=True)
class ReportMeta:
    """What a policy's annotations add to each of its results."""

    severity: str | None = None
    category: str | None = None


def report_meta(policy_object: dict[str, Any]) -> ReportMeta:
    """Severity and category from the policy CR's annotations (an unknown severity is dropped)."""
    ann = (policy_object.get("metadata") or {}).get("annotations") or {}
    severity = str(ann.get(SEVERITY_ANNOTATION, "")).strip().lower() or None
    category = str(ann.get(CATEGORY_ANNOTATION, "")).strip() or None
    return ReportMeta(severity if severity in SEVERITIES else None, category)


@dataclass(frozen=True, slots=True)
class AuditResult:
    """One result row of a report.

    Attributes:
        policy: the policy key (``name``, or ``namespace/name`` for an AdmissionPolicy).
        rule: ``validations[i]`` (or ``""`` when the policy was evaluated as a whole).
        result: ``pass`` | ``fail`` | ``error`` | ``skip``.
        message: the failure, error or skip message (``""`` on pass).
        resource: the evaluated object.
        meta: severity and category.
        timestamp: Unix seconds when this result was first seen with this outcome and message.
    """

    policy: str
    rule: str
    result: str
    message: str
    resource: ResourceRef
    meta: ReportMeta = ReportMeta()
    timestamp: int = 0

    def same_as(self, other: AuditResult) -> bool:
        """Equal except for the timestamp (what decides whether a report changed)."""
        return (self.policy == other.policy and self.rule == other.rule and self.result == other.result
                and self.message == other.message and self.resource == other.resource and self.meta == other.meta)

    def as_dict(self) -> dict[str, Any]:
        """The ``PolicyReportResult`` wire form."""
        out: dict[str, Any] = {"source": SOURCE, "policy": self.policy}
        if self.rule:
            out["rule"] = self.rule
        out["result"] = self.result
        if self.message:
            out["message"] = self.message
        if self.meta.severity:
            out["severity"] = self.meta.severity
        if self.meta.category:
            out["category"] = self.meta.category
        out["scored"] = True
        out["timestamp"] = {"seconds": self.timestamp, "nanos": 0}
        out["resources"] = [self.resource.as_dict()]
        return out


def resource_ref(obj: dict[str, Any], api_version: str, kind: str) -> ResourceRef:
    """The reference of a cached object (built-in lists omit ``apiVersion``/``kind`` on items)."""
    meta = obj.get("metadata") or {}
    return ResourceRef(api_version=str(obj.get("apiVersion") or api_version), kind=str(obj.get("kind") or kind),
                       name=str(meta.get("name", "")), namespace=meta.get("namespace") or None,
                       uid=meta.get("uid") or None)


def audit_request(obj: dict[str, Any], *, group: str, version: str, resource: str, kind: str) -> dict[str, Any]:
    """The AdmissionRequest admission would have sent to create ``obj`` (as on the wire, camelCase).

    ``uid`` is ``audit-<object uid>``; ``userInfo`` is empty; ``oldObject`` is null.
    """
    meta = obj.get("metadata") or {}
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    request: dict[str, Any] = {
        "uid": f"audit-{meta.get('uid', '')}", "kind": gvk, "resource": gvr, "requestKind": gvk,
        "requestResource": gvr, "name": meta.get("name", ""), "operation": "CREATE", "userInfo": {},
        "object": obj, "oldObject": None, "dryRun": False, "options": None,
    }
    if meta.get("namespace"):
        request["namespace"] = meta["namespace"]
    return request


def split_validations(policy: CompiledPolicy) -> list[CompiledPolicy] | None:
    """One single-validation copy of ``policy`` per validation (None if the shape does not allow it)."""
    try:
        return [
            replace(policy, spec=replace(policy.spec, validations=(policy.spec.validations[i],)),
                    validations=(v,), audit_annotations=())
            for i, v in enumerate(policy.validations)
        ]
    except (TypeError, AttributeError, IndexError, ValueError):
        return None


def evaluate_object(policy: CompiledPolicy, obj: dict[str, Any], *, group: str, version: str, resource: str,
                    kind: str, lookups: Lookups, meta: ReportMeta = ReportMeta(), now: int = 0,
                    parts: Sequence[CompiledPolicy] | None = None) -> tuple[AuditResult, ...]:
    """Evaluate one cached object against one policy, per validation.

    Args:
        policy: a compiled policy.
        obj: the object as cached (raw dict; not mutated).
        group: API group the object is served from (``""`` for core).
        version: API version, e.g. ``v1``.
        resource: plural resource name, e.g. ``pods``.
        kind: the object's kind, e.g. ``Pod``.
        lookups: the caches the policy may read (Namespaces, ConfigMaps).
        meta: severity/category for the results.
        now: Unix seconds stamped on the results.
        parts: :func:`split_validations` of ``policy`` (computed here when None).

    Returns:
        One result per validation, or ``()`` when the policy does not match the object.
    """
    if parts is None:
        parts = split_validations(policy)
    rules: list[str]
    if parts is None:
        parts, rules = [policy], [""]
    else:
        rules = [f"validations[{i}]" for i in range(len(parts))]
    request = audit_request(obj, group=group, version=version, resource=resource, kind=kind)
    outcome = evaluate_validating(request, parts, lookups)
    if not outcome.results:
        return ()
    ref = resource_ref(obj, f"{group}/{version}" if group else version, kind)
    return tuple(
        AuditResult(policy=policy.key, rule=rule, result=str(getattr(r.result, "value", r.result)),
                    message=r.message, resource=ref, meta=meta, timestamp=now)
        for rule, r in zip(rules, outcome.results, strict=False)
    )


def not_auditable_result(policy_object: dict[str, Any], reason: str, *, now: int = 0) -> AuditResult:
    """The ``skip`` result that reports a policy as not auditable (its subject is the policy)."""
    meta = policy_object.get("metadata") or {}
    name = str(meta.get("name", ""))
    ns = meta.get("namespace") or None
    ref = ResourceRef(str(policy_object.get("apiVersion", "")), str(policy_object.get("kind", "")), name, ns,
                      meta.get("uid") or None)
    return AuditResult(policy=f"{ns}/{name}" if ns else name, rule="", result="skip", message=reason,
                       resource=ref, meta=report_meta(policy_object), timestamp=now)


def report_name(namespace: str | None) -> str:
    """``tollgate-polr-ns-<namespace>`` or ``tollgate-clusterpolicyreport`` (Kyverno's pre-1.10 names, prefixed)."""
    return f"tollgate-polr-ns-{namespace}" if namespace else "tollgate-clusterpolicyreport"


def _sort_key(r: AuditResult) -> tuple[str, ...]:
    return (r.policy, r.rule, r.resource.namespace or "", r.resource.kind, r.resource.name, r.resource.api_version)


#: Default cap on one report's JSON size: under etcd's 1.5 MiB request limit with room for metadata.
MAX_REPORT_BYTES = 1024 * 1024
TRUNCATED_ANNOTATION = "tollgate.dev/omitted-results"
_KEEP_ORDER = {"fail": 0, "error": 1, "warn": 2, "skip": 3, "pass": 4}


def build_report(namespace: str | None, results: Iterable[AuditResult], *,
                 max_bytes: int | None = MAX_REPORT_BYTES) -> dict[str, Any]:
    """A ``PolicyReport`` for ``namespace`` (``ClusterPolicyReport`` when None) holding ``results``.

    Results are sorted by policy, rule and resource, so equal inputs build
    equal reports; ``summary`` counts ``pass``/``fail``/``warn``/``error``/``skip``
    over *all* results. When the results' JSON would exceed ``max_bytes``,
    results are kept fail first, then error, warn, skip, pass, until the cap,
    and ``metadata.annotations["tollgate.dev/omitted-results"]`` says how many
    were left out (an object that large could not be stored: etcd takes 1.5 MiB).
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
        for idx in sorted(range(len(rows)), key=lambda i: (_KEEP_ORDER.get(rows[i].result, 5), i)):
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
        "summary": {k: counts.get(k, 0) for k in RESULTS},
        "results": items,
    }


def content(report: dict[str, Any]) -> dict[str, Any]:
    """The part of a report Tollgate owns (``summary`` and ``results``), for change detection."""
    return {"summary": report.get("summary") or {}, "results": report.get("results") or []}
