"""Decide one parsed AdmissionRequest from the caches: engine outcome → AdmissionResponse.

Transport-free: the aiohttp server (``server.py``) parses and serializes; this
module picks candidate policies from the :class:`PolicyIndex`, runs the
engine and builds the response with the outcome-named constructors.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.admission.patch import encode_patch
from webhook.admission.review import AdmissionRequest, AdmissionResponse, allowed, denied, patched
from webhook.policy import PolicyIndex, PolicyResult, evaluate_mutating, evaluate_validating
from webhook.policy.lookups import Lookups


@dataclass(frozen=True, slots=True)
class Decision:
    """A response plus what produced it (for metrics and logs).

    ``decision`` is ``allowed`` | ``denied`` | ``patched``.
    """

    response: AdmissionResponse
    decision: str
    results: tuple[PolicyResult, ...]


class AdmissionHandler:
    """Validate and mutate from memory: one index lookup, one engine call."""

    def __init__(self, index: PolicyIndex, lookups: Lookups) -> None:
        self.index = index
        self.lookups = lookups

    def _candidates(self, request: AdmissionRequest) -> list:
        res = request.get("resource") or {}
        return self.index.candidates(res.get("group", ""), res.get("resource", ""),
                                     request.get("subResource", "") or "", request.get("operation", ""))

    def validate(self, request: AdmissionRequest) -> Decision:
        """The validating endpoint's answer for ``request``."""
        uid = request["uid"]
        outcome = evaluate_validating(request, self._candidates(request), self.lookups)  # type: ignore[arg-type]
        results = tuple(outcome.results)
        if outcome.allowed:
            return Decision(allowed(uid, warnings=outcome.warnings, audit_annotations=outcome.audit_annotations),
                            "allowed", results)
        return Decision(denied(uid, outcome.message, code=outcome.code, reason=outcome.reason or "Forbidden",
                               warnings=outcome.warnings, audit_annotations=outcome.audit_annotations),
                        "denied", results)

    def mutate(self, request: AdmissionRequest) -> Decision:
        """The mutating endpoint's answer: a JSONPatch when any policy changed the object."""
        uid = request["uid"]
        outcome = evaluate_mutating(request, self._candidates(request), self.lookups)  # type: ignore[arg-type]
        results = tuple(outcome.results)
        if not outcome.allowed:
            return Decision(denied(uid, outcome.message, code=outcome.code, reason=outcome.reason or "Forbidden",
                                   warnings=outcome.warnings), "denied", results)
        if outcome.patch:
            return Decision(patched(uid, encode_patch(outcome.patch), warnings=outcome.warnings), "patched", results)
        return Decision(allowed(uid, warnings=outcome.warnings), "allowed", results)
