"""Tollgate's policy engine: parse, compile, index, match and evaluate policy CRs (pure; no I/O).

Public API:
    compile_policy(obj) -> CompileResult                 (compiler)
    PolicyIndex.upsert(obj) / remove(key) / candidates(coords)   (index)
    RequestCoordinates.of(request)                       (request)
    evaluate_validating(request, policies, lookups) -> ValidationOutcome   (engine)
    evaluate_mutating(request, policies, lookups) -> MutationOutcome       (engine)
    PolicyEventHandler                                   (events: informer notifications → index)
    Lookups / InMemoryLookups                            (lookups)
    Result / Action / Decision / FailurePolicy           (vocabulary)
"""

from webhook.policy.compiler import CompiledPolicy, CompileResult, compile_policy
from webhook.policy.engine import (
    MutationOutcome,
    PolicyResult,
    ValidationOutcome,
    evaluate_mutating,
    evaluate_validating,
)
from webhook.policy.events import PolicyEventHandler
from webhook.policy.index import PolicyIndex, PolicyState, policy_key
from webhook.policy.lookups import InMemoryLookups, Lookups
from webhook.policy.request import AdmissionRequest, RequestCoordinates
from webhook.policy.vocabulary import Action, Decision, FailurePolicy, Result

__all__ = [
    "Action",
    "AdmissionRequest",
    "CompileResult",
    "CompiledPolicy",
    "Decision",
    "FailurePolicy",
    "InMemoryLookups",
    "Lookups",
    "MutationOutcome",
    "PolicyEventHandler",
    "PolicyIndex",
    "PolicyResult",
    "PolicyState",
    "RequestCoordinates",
    "Result",
    "ValidationOutcome",
    "compile_policy",
    "evaluate_mutating",
    "evaluate_validating",
    "policy_key",
]
