"""What evaluating a request yields: outcomes, per-policy results, and how errors and actions are enforced.

An evaluation error becomes a :class:`~webhook.policy.vocabulary.PolicyResult`
enforced per the policy's ``failurePolicy`` (VAP's
``policyDecisionActionForError``): ``Fail`` enforces it with the policy's
``validationActions``, ``Ignore`` admits with a warning. :func:`record` turns a
result's actions into ``response.warnings`` and ``auditAnnotations``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.compiler import CompiledPolicy
from webhook.policy.engine.annotations import VALIDATION_FAILURE_KEY
from webhook.policy.vocabulary import Action, FailurePolicy, PolicyResult, Result

__all__ = ["EvaluationError", "MutationOutcome", "ValidationOutcome", "add_audit_failures", "error_result", "label",
           "record"]


@dataclass(slots=True)
class ValidationOutcome:
    """The validating endpoint's decision.

    Attributes:
        allowed: False when any result denies.
        code: HTTP status of a denial: the first denying policy's (name order).
        reason: ``metav1.StatusReason`` of a denial.
        message: every denying message as ``"<policy>: <message>"``, joined by ``"; "``.
        warnings: ``response.warnings`` entries.
        audit_annotations: ``response.auditAnnotations``.
        results: one :class:`PolicyResult` per selected policy.
        durations: seconds each evaluated policy took, by its label (``time.perf_counter`` around its
            preparation and expressions; a fused group's time is shared equally by the policies it
            decided, :mod:`webhook.policy.plan`; a memo hit costs none): the per-policy latency metric.
    """

    allowed: bool = True
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    audit_annotations: dict[str, str] = field(default_factory=dict)
    results: list[PolicyResult] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class MutationOutcome:
    """The mutating endpoint's decision.

    Attributes:
        allowed: False only when a mutation failed under ``failurePolicy: Fail``
            with a Deny action.
        patch: RFC 6902 operations turning the request's object into the
            mutated one (``[]`` when nothing changed).
        message: why it was denied.
        code: HTTP status of a denial.
        reason: ``metav1.StatusReason`` of a denial.
        warnings: ``response.warnings`` entries.
        results: one :class:`PolicyResult` per selected policy.
        durations: seconds each evaluated policy took, by its label (see :class:`ValidationOutcome`).
    """

    allowed: bool = True
    patch: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    code: int = 200
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    results: list[PolicyResult] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)


class EvaluationError(Exception):
    """An expression could not be evaluated; the message starts with its spec path."""




def label(policy: CompiledPolicy) -> str:
    """The policy's name in results, messages, warnings, annotations and metrics (see :class:`PolicyResult`)."""
    return policy.spec.key


def error_result(policy: CompiledPolicy, text: str) -> PolicyResult:
    """An evaluation error, enforced per failurePolicy (VAP ``policyDecisionActionForError``)."""
    if policy.spec.failure_policy == FailurePolicy.FAIL:
        return PolicyResult(label(policy), Result.ERROR, text, policy.spec.validation_actions)
    return PolicyResult(label(policy), Result.ERROR, text, frozenset({Action.WARN, Action.IGNORED}))


def record(result: PolicyResult, warnings: list[str], audit_failures: list[dict[str, object]] | None) -> None:
    """Turn a non-passing result's actions into warnings and ``Audit`` entries (see :func:`audit_annotations`)."""
    if result.result is Result.PASS:
        return
    if Action.WARN in result.actions and result.message:
        suffix = " (failurePolicy: Ignore)" if Action.IGNORED in result.actions else ""
        warnings.append(f"{result.policy}: {result.message}{suffix}")
    if audit_failures is not None and Action.AUDIT in result.actions:
        audit_failures.append({"policy": result.policy, "result": str(result.result), "message": result.message,
                               "validationActions": sorted(str(a) for a in result.actions if a is not Action.IGNORED)})


def add_audit_failures(annotations: dict[str, str], audit_failures: list[dict[str, object]]) -> None:
    """Add the ``Audit`` results as one JSON list under ``validation_failure`` (as VAP writes them), if any."""
    if audit_failures:
        annotations[VALIDATION_FAILURE_KEY] = json.dumps(audit_failures, sort_keys=True)
