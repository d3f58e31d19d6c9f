"""Tollgate's policy engine: parse, compile, index and evaluate policy CRs (pure; no I/O).

Public API:
    compile_policy(obj) -> CompileResult            (webhook.policy.compiler)
    PolicyIndex.upsert(obj) / remove(key) / candidates(group, resource, sub_resource, operation)
    evaluate_validating(request, policies, lookups) -> ValidationOutcome
    evaluate_mutating(request, policies, lookups) -> MutationOutcome
    Lookups / InMemoryLookups                        (webhook.policy.lookups)
"""

from webhook.policy.compiler import CompiledPolicy, CompileResult, compile_policy
from webhook.policy.engine import (
    MutationOutcome,
    PolicyResult,
    ValidationOutcome,
    evaluate_mutating,
    evaluate_validating,
)
from webhook.policy.index import PolicyIndex, PolicyState, policy_key
from webhook.policy.lookups import InMemoryLookups, Lookups

__all__ = [
    "CompileResult",
    "CompiledPolicy",
    "InMemoryLookups",
    "Lookups",
    "MutationOutcome",
    "PolicyIndex",
    "PolicyResult",
    "PolicyState",
    "ValidationOutcome",
    "compile_policy",
    "evaluate_mutating",
    "evaluate_validating",
    "policy_key",
]
