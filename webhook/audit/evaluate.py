"""Background audit's one evaluation: a policy over stored objects → :class:`AuditResult` rows (pure; no I/O).

A policy with ``spec.background: true`` is also applied to the objects that
already exist (Kyverno's background scan). Both the server's auditor
(``webhook.audit.auditor``, over informer caches) and ``tollgate audit`` (over
files, or objects listed once from a cluster) go through the same two steps:

1. :func:`audit_policy` decides whether a policy CR is audited: it must be
   Ready, have ``spec.background: true`` (unless the caller audits every
   policy) and be auditable (:func:`webhook.audit.auditable.not_auditable`,
   from its parse trees). It returns an :class:`AuditedPolicy`, or a
   :class:`NotAudited` saying why, with the ``skip`` row the reports carry
   about the policy itself when it asked to be audited but cannot be.
2. :func:`evaluate_policy` evaluates an audited policy over
   :class:`StoredObject` s. Each object is evaluated exactly as admission would
   evaluate its creation: :func:`audit_request` synthesizes an
   AdmissionRequest (operation ``CREATE``, empty ``userInfo``, no
   ``oldObject``, ``kind``/``resource`` from the object's GVR,
   ``namespace``/``name`` from the object) and the admission engine
   (:func:`webhook.policy.engine.evaluate_validating`) evaluates one copy of
   the policy per validation, so every validation gets its own row (``rule``
   is ``validations[i]``, its spec path).

Which objects a policy is evaluated on is :func:`audit_rules` (its rules that
can select a CREATE, plus the pod controllers under ``autogen.podControllers``),
resolved to GVRs through discovery by the caller. Rows become PolicyReports in
``webhook.audit.reports``.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from webhook.audit.auditable import not_auditable
from webhook.informer.gvr import GVR
from webhook.policy.compiler import CompiledPolicy, compile_policy
from webhook.policy.engine import evaluate_validating
from webhook.policy.exceptions import ExceptionSet
from webhook.policy.lookups import Lookups
from webhook.policy.matching import routed_rules
from webhook.policy.model import PolicySpec, ResourceRule
from webhook.policy.vocabulary import Result

__all__ = [
    "CATEGORY_ANNOTATION",
    "SEVERITIES",
    "SEVERITY_ANNOTATION",
    "SOURCE",
    "AuditResult",
    "AuditedPolicy",
    "NotAudited",
    "ReportMeta",
    "ResourceRef",
    "Skipped",
    "StoredObject",
    "audit_policy",
    "audit_request",
    "audit_rules",
    "evaluate_object",
    "evaluate_policy",
    "policy_note",
    "report_meta",
    "resource_ref",
    "split_validations",
]

#: ``source`` of every row Tollgate writes.
SOURCE = "tollgate"
SEVERITY_ANNOTATION = "policies.tollgate.dev/severity"
CATEGORY_ANNOTATION = "policies.tollgate.dev/category"
#: ``PolicyResultSeverity`` values of the v1alpha2 API.
SEVERITIES = frozenset({"critical", "high", "medium", "low", "info"})


# -- rows -------------------------------------------------------------------------------------------------


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
        result: ``pass`` | ``fail`` | ``error`` | ``skip`` (a :class:`~webhook.policy.vocabulary.Result`).
        message: the failure, error or skip message (``""`` on pass).
        resource: the evaluated object.
        meta: severity and category.
        timestamp: Unix seconds when this result was first seen with this outcome and message.
        exception: the PolicyException that exempted the object (``PolicyException ns/name``; the result is
            ``skip``, or ``fail`` under its mode Audit); ``""`` for none. Written as ``properties.exception``.
    """

    policy: str
    rule: str
    result: Result
    message: str
    resource: ResourceRef
    meta: ReportMeta = ReportMeta()
    timestamp: int = 0
    exception: str = ""

    def same_as(self, other: AuditResult) -> bool:
        """Equal except for the timestamp (what decides whether a report changed)."""
        return (self.policy == other.policy and self.rule == other.rule and self.result == other.result
                and self.message == other.message and self.resource == other.resource and self.meta == other.meta
                and self.exception == other.exception)

    def as_dict(self) -> dict[str, Any]:
        """The ``PolicyReportResult`` wire form."""
        out: dict[str, Any] = {"source": SOURCE, "policy": self.policy}
        if self.rule:
            out["rule"] = self.rule
        out["result"] = str(self.result)
        if self.message:
            out["message"] = self.message
        if self.meta.severity:
            out["severity"] = self.meta.severity
        if self.meta.category:
            out["category"] = self.meta.category
        out["scored"] = True
        if self.exception:
            out["properties"] = {"exception": self.exception}
        out["timestamp"] = {"seconds": self.timestamp, "nanos": 0}
        out["resources"] = [self.resource.as_dict()]
        return out


def resource_ref(obj: dict[str, Any], api_version: str, kind: str) -> ResourceRef:
    """The reference of a stored object (built-in lists omit ``apiVersion``/``kind`` on items)."""
    meta = obj.get("metadata") or {}
    return ResourceRef(api_version=str(obj.get("apiVersion") or api_version), kind=str(obj.get("kind") or kind),
                       name=str(meta.get("name", "")), namespace=meta.get("namespace") or None,
                       uid=meta.get("uid") or None)


# -- which policies, which objects ----------------------------------------------------------------------


class Skipped(StrEnum):
    """Why a policy CR is not audited."""

    #: ``spec.background`` is not true (and the caller audits only background policies).
    NOT_BACKGROUND = "not background"
    #: The policy does not compile (its Ready condition is False).
    NOT_READY = "not Ready"
    #: Its CEL reads what a stored object does not have, or it has no validations.
    NOT_AUDITABLE = "not auditable"


@dataclass(frozen=True, slots=True)
class NotAudited:
    """A policy CR that is not audited, and why.

    Attributes:
        key: the policy key.
        why: the kind of reason.
        reason: one line, e.g. ``it reads request.userInfo (spec.validations[0].expression), which ...``.
        reported: whether the reports carry it as a ``skip`` row about the policy (:meth:`note`): it asked
            to be audited (``spec.background: true``, or every policy was asked for) but cannot be.
        policy_object: the CR.
    """

    key: str
    why: Skipped
    reason: str
    reported: bool
    policy_object: dict[str, Any]

    @property
    def namespace(self) -> str | None:
        """The report the note belongs in: the AdmissionPolicy's namespace, None for a cluster policy."""
        return (self.policy_object.get("metadata") or {}).get("namespace") or None

    def note(self, now: int = 0) -> AuditResult:
        """The ``skip`` row about the policy itself (message ``"<why>: <reason>"``)."""
        return policy_note(self.policy_object, f"{self.why}: {self.reason}", now=now)


def policy_note(policy_object: dict[str, Any], message: str, *, now: int = 0) -> AuditResult:
    """A ``skip`` row whose subject is the policy CR (the policy could not be audited, or not everywhere)."""
    meta = policy_object.get("metadata") or {}
    name = str(meta.get("name", ""))
    ns = meta.get("namespace") or None
    ref = ResourceRef(str(policy_object.get("apiVersion", "")), str(policy_object.get("kind", "")), name, ns,
                      meta.get("uid") or None)
    return AuditResult(policy=f"{ns}/{name}" if ns else name, rule="", result=Result.SKIP, message=message,
                       resource=ref, meta=report_meta(policy_object), timestamp=now)


def split_validations(policy: CompiledPolicy) -> tuple[CompiledPolicy, ...]:
    """One single-validation copy of ``policy`` per validation, without auditAnnotations (audit writes none)."""
    return tuple(
        replace(policy, spec=replace(policy.spec, validations=(policy.spec.validations[i],)),
                validations=(v,), audit_annotations=())
        for i, v in enumerate(policy.validations)
    )


def audit_rules(spec: PolicySpec) -> list[ResourceRule]:
    """The rules whose objects a background policy is evaluated on.

    The rules that route requests to it (``matching.routed_rules``: its own, plus the pod controllers under
    ``autogen.podControllers``, whose pod templates are audited) that can select a CREATE, the one operation
    the audit's request has.
    """
    return [r for r in routed_rules(spec) if {"CREATE", "*"} & r.operations]


@dataclass(frozen=True, slots=True)
class AuditedPolicy:
    """A policy CR that is audited: compiled, split per validation, with its report annotations.

    Attributes:
        policy: the compiled policy.
        meta: severity and category for its rows.
        parts: :func:`split_validations` of ``policy``.
        policy_object: the CR.
    """

    policy: CompiledPolicy
    meta: ReportMeta
    parts: tuple[CompiledPolicy, ...]
    policy_object: dict[str, Any]

    @property
    def key(self) -> str:
        """The policy key."""
        return self.policy.key


def audit_policy(policy_object: dict[str, Any], *, every_policy: bool = False) -> AuditedPolicy | NotAudited:
    """Whether and how a policy CR is audited (the one decision the server and ``tollgate audit`` share).

    Args:
        policy_object: a ClusterAdmissionPolicy / AdmissionPolicy as a raw dict.
        every_policy: audit it even without ``spec.background: true`` (``tollgate audit --all``).

    Returns:
        The :class:`AuditedPolicy`; or a :class:`NotAudited`: ``NOT_READY`` (it does not compile; checked
        first), ``NOT_BACKGROUND``, or ``NOT_AUDITABLE``.
    """
    compiled = compile_policy(policy_object)
    policy = compiled.policy
    raw_spec = policy_object.get("spec")
    background = isinstance(raw_spec, dict) and raw_spec.get("background") is True
    key = policy.key if policy is not None else _raw_key(policy_object)
    if policy is None:
        return NotAudited(key, Skipped.NOT_READY, str(compiled.condition.get("message", "")),
                          background or every_policy, policy_object)
    if not (policy.spec.background or every_policy):
        return NotAudited(key, Skipped.NOT_BACKGROUND, "spec.background is not true", False, policy_object)
    reason = not_auditable(policy)
    if reason is not None:
        return NotAudited(key, Skipped.NOT_AUDITABLE, reason, True, policy_object)
    return AuditedPolicy(policy, report_meta(policy_object), split_validations(policy), policy_object)


def _raw_key(policy_object: dict[str, Any]) -> str:
    meta = policy_object.get("metadata") or {}
    ns, name = meta.get("namespace"), str(meta.get("name", ""))
    return f"{ns}/{name}" if ns else name


# -- evaluation ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object as stored, and where it is served.

    Attributes:
        gvr: the group/version/resource it was read from.
        kind: its kind (lists of built-in resources leave ``kind`` out of items).
        obj: the object (raw dict; never mutated).
    """

    gvr: GVR
    kind: str
    obj: dict[str, Any]


def audit_request(obj: dict[str, Any], *, group: str, version: str, resource: str, kind: str) -> dict[str, Any]:
    """The AdmissionRequest admission would have sent to create ``obj`` (as on the wire, camelCase).

    ``uid`` is ``audit-<object uid>``; ``userInfo`` is empty; ``oldObject`` is null; ``dryRun`` false.
    ``webhook.audit.auditable`` relies on these facts (``REQUEST_KEYS``, the operation).
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


def evaluate_object(audited: AuditedPolicy, stored: StoredObject, lookups: Lookups, *,
                    now: int = 0, exceptions: ExceptionSet | None = None) -> tuple[AuditResult, ...]:
    """Evaluate one stored object against one audited policy, one row per validation.

    Args:
        audited: the policy (:func:`audit_policy`).
        stored: the object and its GVR and kind.
        lookups: the caches the policy may read (Namespaces, ConfigMaps, ``spec.references``).
        now: Unix seconds stamped on the rows; also the time exceptions' ``expiresAt`` is compared with.
        exceptions: the Ready PolicyExceptions (:mod:`webhook.policy.exceptions`), applied as admission
            applies them: an exempted row is ``skip`` naming the exception; None for none.

    Returns:
        One row per validation (``pass``, ``fail``, ``error``, or ``skip`` when a matchCondition is
        false), or ``()`` when the policy's rules or selectors do not select the object.
    """
    gvr = stored.gvr
    request = audit_request(stored.obj, group=gvr.group, version=gvr.version, resource=gvr.resource,
                            kind=stored.kind)
    at = datetime.datetime.fromtimestamp(now, datetime.UTC)
    outcome = evaluate_validating(request, audited.parts, lookups, exceptions=exceptions or None,
                                  now=lambda: at)
    if not outcome.results:
        return ()
    ref = resource_ref(stored.obj, gvr.api_version, stored.kind)
    return tuple(
        AuditResult(policy=audited.key, rule=f"validations[{i}]", result=Result(r.result), message=r.message,
                    resource=ref, meta=audited.meta, timestamp=now, exception=r.exception)
        for i, r in enumerate(outcome.results)
    )


def evaluate_policy(audited: AuditedPolicy, objects: Iterable[StoredObject], lookups: Lookups, *,
                    now: int = 0, exceptions: ExceptionSet | None = None,
                    ) -> Iterator[tuple[StoredObject, tuple[AuditResult, ...]]]:
    """Evaluate ``objects`` against one audited policy, lazily, in order.

    Args:
        audited: the policy (:func:`audit_policy`).
        objects: the stored objects (its audit GVRs' objects; others simply give no rows).
        lookups: the caches the policy may read.
        now: Unix seconds stamped on the rows (and the time exceptions expire against).
        exceptions: see :func:`evaluate_object`.

    Yields:
        ``(object, rows)`` for every object, rows ``()`` when the policy does not select it (so a caller
        keeping rows per object can drop stale ones).
    """
    for stored in objects:
        yield stored, evaluate_object(audited, stored, lookups, now=now, exceptions=exceptions)
