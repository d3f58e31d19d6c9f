"""Decide one parsed AdmissionRequest from the caches: engine outcome → AdmissionResponse.

Transport-free: the aiohttp server (``server.py``) parses and serializes; this
module picks candidate policies from the :class:`PolicyIndex`, runs the
engine and builds the response with the outcome-named constructors.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from webhook.admission.patch import encode_patch
from webhook.admission.review import (
    AdmissionRequest,
    AdmissionResponse,
    allowed,
    denied,
    errored,
    patched,
)
from webhook.policy import (
    PolicyIndex,
    PolicyResult,
    evaluate_mutating,
    evaluate_validating,
)
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.lookups import Lookups

log = logging.getLogger("tollgate.admission")


@dataclass(frozen=True, slots=True)
class Decision:
    """A response plus what produced it (for metrics and logs).

    ``decision`` is ``allowed`` | ``denied`` | ``patched`` | ``error``.
    """

    response: AdmissionResponse
    decision: str
    results: tuple[PolicyResult, ...]


class AdmissionHandler:
    """Validate and mutate from memory: one index lookup, one engine call."""

    def __init__(self, index: PolicyIndex, lookups: Lookups) -> None:
        self.index = index
        self.lookups = lookups

    def _candidates(self, request: AdmissionRequest) -> list[CompiledPolicy]:
        res = request.get("resource")
        return self.index.candidates(res.get("group", "") if res else "", res.get("resource", "") if res else "",
                                     request.get("subResource", "") or "", request.get("operation", ""))

    @staticmethod
    def engine_failed(uid: str, candidates: list[CompiledPolicy], exc: Exception) -> Decision:
        """Answer an exception raised by the engine itself per the candidates' failurePolicy.

        The engine already applies failurePolicy to CEL runtime errors of one
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
        results = tuple(PolicyResult(p.name, "error", message) for p in candidates)
        if candidates and all(p.spec.failure_policy == "Ignore" for p in candidates):
            return Decision(allowed(uid, warnings=[message + " (failurePolicy: Ignore)"]), "allowed", results)
        return Decision(errored(uid, message), "error", results)

    def validate(self, request: AdmissionRequest) -> Decision:
        """The validating endpoint's answer for ``request``; never raises for an engine failure."""
        uid = request["uid"]
        candidates: list[CompiledPolicy] = []
        try:
            candidates = self._candidates(request)
            outcome = evaluate_validating(request, candidates, self.lookups)  # type: ignore[arg-type]
        except Exception as e:
            log.exception("evaluation failed", extra={"uid": uid, "endpoint": "validate",
                                                      "policies": [p.name for p in candidates]})
            return self.engine_failed(uid, candidates, e)
        results = tuple(outcome.results)
        if outcome.allowed:
            return Decision(allowed(uid, warnings=outcome.warnings, audit_annotations=outcome.audit_annotations),
                            "allowed", results)
        return Decision(denied(uid, outcome.message, code=outcome.code, reason=outcome.reason or "Forbidden",
                               warnings=outcome.warnings, audit_annotations=outcome.audit_annotations),
                        "denied", results)

    def mutate(self, request: AdmissionRequest) -> Decision:
        """The mutating endpoint's answer: a JSONPatch when any policy changed the object; never raises."""
        uid = request["uid"]
        candidates: list[CompiledPolicy] = []
        try:
            candidates = self._candidates(request)
            outcome = evaluate_mutating(request, candidates, self.lookups)  # type: ignore[arg-type]
        except Exception as e:
            log.exception("evaluation failed", extra={"uid": uid, "endpoint": "mutate",
                                                      "policies": [p.name for p in candidates]})
            return self.engine_failed(uid, candidates, e)
        results = tuple(outcome.results)
        if not outcome.allowed:
            return Decision(denied(uid, outcome.message, code=outcome.code, reason=outcome.reason or "Forbidden",
                                   warnings=outcome.warnings), "denied", results)
        if outcome.patch:
            return Decision(patched(uid, encode_patch(outcome.patch), warnings=outcome.warnings), "patched", results)
        return Decision(allowed(uid, warnings=outcome.warnings), "allowed", results)
