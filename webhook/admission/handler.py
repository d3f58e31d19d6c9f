"""Decide one parsed AdmissionRequest from the caches: engine outcome → AdmissionResponse.

Transport-free: the aiohttp server (``server.py``) parses and serializes; this
module parses the request's coordinates once, asks the :class:`PolicyIndex`
for candidates, runs the engine and builds the response with the
outcome-named constructors. Until the policy caches have synced it refuses to
decide (HTTP 503), so the API server applies the webhook configuration's own
failurePolicy instead of Tollgate admitting what no policy has seen.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from webhook.admission.limits import MAX_PATCH_BYTES, ResponseTooLarge
from webhook.admission.patch import encode_patch
from webhook.admission.patch_budget import fit_patch
from webhook.admission.review import (
    AdmissionRequest,
    AdmissionResponse,
    ReviewError,
    StatusDetails,
    allowed,
    denied,
    errored,
    patched,
    status_details,
)
from webhook.policy import (
    Decision,
    FailurePolicy,
    PolicyIndex,
    PolicyResult,
    RequestCoordinates,
    Result,
    evaluate_mutating,
    evaluate_validating,
)
from webhook.policy.budget import OverBudget
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.engine import label
from webhook.policy.exceptions import EXCEPTIONS_ANNOTATION_KEY, ExceptionSet, exceptions_annotation
from webhook.policy.lookups import POLICIES, Lookups
from webhook.policy.memo import DecisionMemo
from webhook.policy.plan import Plan
from webhook.policy.vocabulary import Endpoint

log = logging.getLogger("tollgate.admission")


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """A response plus what produced it (for metrics and logs)."""

    response: AdmissionResponse
    decision: Decision
    results: tuple[PolicyResult, ...]
    #: ``(policy label, seconds)`` of each policy evaluated (the engine's ``durations``).
    durations: tuple[tuple[str, float], ...] = ()
    #: The results a PolicyException changed (``skip``, or mode Audit), for the metric; ``()`` for none.
    exempted: tuple[PolicyResult, ...] = ()


class AdmissionHandler:
    """Validate and mutate from memory: one index lookup, one engine call.

    Args:
        index: the compiled policies.
        lookups: the caches (Namespaces, ConfigMaps, and whether the policy caches synced).
        memo: the decision memo for the validating endpoint (:mod:`webhook.policy.memo`); None for none.
        max_patch_bytes: the largest ``response.patch`` (base64) the mutating endpoint sends; the
            changes of ``failurePolicy: Ignore`` policies that do not fit are dropped
            (:mod:`webhook.admission.patch_budget`).
        exceptions: returns the Ready PolicyExceptions now (an informer-backed
            :class:`~webhook.policy.exceptions.ExceptionCache`'s ``current``); None for none. Applied on
            the validating endpoint: an exempted policy's result is ``skip`` naming the exception, listed
            in the ``exceptions`` audit annotation.
        clock: the time exceptions' ``expiresAt`` is compared with (aware UTC); default: the system clock.
    """

    def __init__(self, index: PolicyIndex, lookups: Lookups, memo: DecisionMemo | None = None, *,
                 max_patch_bytes: int = MAX_PATCH_BYTES, exceptions: Callable[[], ExceptionSet] | None = None,
                 clock: Callable[[], datetime.datetime] | None = None) -> None:
        self.index = index
        self.lookups = lookups
        self.memo = memo
        self.max_patch_bytes = max_patch_bytes
        self.exceptions = exceptions
        self.clock = clock

    def _plan(self, request: AdmissionRequest) -> Plan:
        if not self.lookups.is_synced(POLICIES):
            raise ReviewError(503, "tollgate: the policy caches have not synced yet")
        return self.index.plan(RequestCoordinates.of(request))

    def _failed(self, uid: str, endpoint: str, plan: Plan | None, exc: Exception) -> AdmissionDecision:
        """Log an exception the engine did not contain and answer it (see :meth:`engine_failed`)."""
        candidates = [policy for policy, _view in plan.entries] if plan is not None else []
        log.exception("evaluation failed", extra={"uid": uid, "endpoint": endpoint,
                                                  "policies": [label(p) for p in candidates]})
        return self.engine_failed(uid, candidates, exc)

    @staticmethod
    def engine_failed(uid: str, candidates: list[CompiledPolicy], exc: Exception) -> AdmissionDecision:
        """Answer an exception raised by the engine itself per the candidates' failurePolicy.

        The engine already applies failurePolicy to evaluation errors of one
        policy; this covers a failure it did not contain (a bug, an unexpected
        object shape). Which policy failed is unknown, so the strictest
        failurePolicy among the candidates wins: the request is admitted (with a
        warning) only if every candidate says ``Ignore``. With no candidate
        list at all (the index lookup itself failed) the answer is fail-closed.

        Returns:
            ``allowed`` with a warning, or ``errored`` (``allowed: false``, code
            500) echoing ``uid``; ``results`` marks every candidate ``error``.
        """
        message = f"tollgate: evaluation failed: {type(exc).__name__}: {exc}"[:1024]
        results = tuple(PolicyResult(label(p), Result.ERROR, message) for p in candidates)
        if candidates and all(p.spec.failure_policy == FailurePolicy.IGNORE for p in candidates):
            return AdmissionDecision(allowed(uid, warnings=[message + " (failurePolicy: Ignore)"]),
                                     Decision.ALLOWED, results)
        return AdmissionDecision(errored(uid, message), Decision.ERROR, results)

    def decide(self, endpoint: str, request: AdmissionRequest, deadline: float | None = None, *,
               work_budget: int | None = None, body_bytes: int = 0) -> AdmissionDecision:
        """The answer of ``endpoint`` (``validate`` or ``mutate``) for ``request``.

        Args:
            endpoint: ``validate`` or ``mutate``.
            request: the parsed AdmissionRequest.
            deadline: ``time.monotonic()`` after which remaining policies are errors.
            work_budget: the most estimated evaluation work to do here (:mod:`webhook.policy.budget`);
                None: no limit.
            body_bytes: the request body's length (lets a clearly cheap plan skip measuring).

        Raises:
            ValueError: ``endpoint`` is not an :class:`~webhook.policy.vocabulary.Endpoint`.
            ReviewError: 503 until the policy caches have synced.
            OverBudget: the estimate exceeds ``work_budget``; nothing was evaluated.
        """
        if Endpoint(endpoint) is Endpoint.VALIDATE:
            return self.validate(request, deadline, work_budget=work_budget, body_bytes=body_bytes)
        return self.mutate(request, deadline, work_budget=work_budget, body_bytes=body_bytes)

    def validate(self, request: AdmissionRequest, deadline: float | None = None, *,
                 work_budget: int | None = None, body_bytes: int = 0) -> AdmissionDecision:
        """The validating endpoint's answer for ``request``.

        Args:
            request: the parsed AdmissionRequest.
            deadline: ``time.monotonic()`` after which remaining policies are errors.
            work_budget: see :meth:`decide`.
            body_bytes: see :meth:`decide`.

        Raises:
            ReviewError: 503 until the policy caches have synced.
            OverBudget: see :meth:`decide`.
        """
        uid = request["uid"]
        plan: Plan | None = None
        exceptions = self.exceptions() if self.exceptions is not None else None
        try:
            plan = self._plan(request)
            outcome = evaluate_validating(cast(dict[str, Any], request), plan, self.lookups, deadline=deadline,
                                          memo=self.memo, work_budget=work_budget, body_bytes=body_bytes,
                                          exceptions=exceptions or None, now=self.clock)
        except (ReviewError, OverBudget):
            raise
        except Exception as e:  # noqa: BLE001 - logged with its traceback in _failed, answered per failurePolicy
            return self._failed(uid, "validate", plan, e)
        results, durations = tuple(outcome.results), tuple(outcome.durations.items())
        exempted: tuple[PolicyResult, ...] = ()
        if exceptions:
            exempted = tuple(r for r in results if r.exception)
            used = exceptions_annotation(exempted)
            if used is not None:
                outcome.audit_annotations[EXCEPTIONS_ANNOTATION_KEY] = used
        if outcome.allowed:
            return AdmissionDecision(allowed(uid, warnings=outcome.warnings,
                                             audit_annotations=outcome.audit_annotations),
                                     Decision.ALLOWED, results, durations, exempted)
        return AdmissionDecision(denied(uid, outcome.message, code=outcome.code, reason=outcome.reason or "Forbidden",
                                        warnings=outcome.warnings, audit_annotations=outcome.audit_annotations,
                                        details=_details(request, results)),
                                 Decision.DENIED, results, durations, exempted)

    def mutate(self, request: AdmissionRequest, deadline: float | None = None, *,
               work_budget: int | None = None, body_bytes: int = 0) -> AdmissionDecision:
        """The mutating endpoint's answer: a JSONPatch when any policy changed the object.

        A patch over ``max_patch_bytes`` loses the changes of the ``Ignore``
        policies that do not fit (each named in a warning); if the ``Fail``
        policies' changes alone exceed it, the review is answered per
        failurePolicy (:meth:`engine_failed`).

        Raises:
            ReviewError: 503 until the policy caches have synced.
            OverBudget: the estimate exceeds ``work_budget`` (see :meth:`decide`).
        """
        uid = request["uid"]
        plan: Plan | None = None
        try:
            plan = self._plan(request)
            outcome = evaluate_mutating(cast(dict[str, Any], request), plan, self.lookups, deadline=deadline,
                                        work_budget=work_budget, body_bytes=body_bytes)
            patch = encode_patch(outcome.patch) if outcome.allowed and outcome.patch else None
            if patch is not None and len(patch) > self.max_patch_bytes:
                outcome = fit_patch(cast(dict[str, Any], request), plan, self.lookups,
                                    max_patch_bytes=self.max_patch_bytes, deadline=deadline)
                patch = encode_patch(outcome.patch) if outcome.allowed and outcome.patch else None
        except (ReviewError, OverBudget):
            raise
        except ResponseTooLarge as e:
            # Raised only when the failurePolicy: Fail mutations alone exceed the limit: they fail the review.
            log.warning("mutation patch over the limit", extra={"uid": uid, "reason": str(e)})
            entries = plan.entries if plan is not None else []
            required = [p for p, _view in entries if p.mutating and p.spec.failure_policy != FailurePolicy.IGNORE]
            return self.engine_failed(uid, required, e)
        except Exception as e:  # noqa: BLE001 - logged with its traceback in _failed, answered per failurePolicy
            return self._failed(uid, "mutate", plan, e)
        results, durations = tuple(outcome.results), tuple(outcome.durations.items())
        if not outcome.allowed:
            return AdmissionDecision(denied(uid, outcome.message, code=outcome.code,
                                            reason=outcome.reason or "Forbidden", warnings=outcome.warnings,
                                            details=_details(request, results)),
                                     Decision.DENIED, results, durations)
        if patch is not None:
            return AdmissionDecision(patched(uid, patch, warnings=outcome.warnings), Decision.PATCHED, results,
                                     durations)
        return AdmissionDecision(allowed(uid, warnings=outcome.warnings), Decision.ALLOWED, results, durations)


def _details(request: AdmissionRequest, results: tuple[PolicyResult, ...]) -> StatusDetails:
    """``status.details`` of a denial: one cause per denying policy, worded as in ``status.message``."""
    return status_details(request, [f"{r.policy}: {r.message}" for r in results if r.denies])
