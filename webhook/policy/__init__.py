"""Tollgate's policy engine: parse, compile, index, match and evaluate policy CRs (pure; no I/O).

Public API (imported on first use, so importing a constant such as
``webhook.policy.vocabulary.Result`` does not load the engine):
    compile_policy(obj) -> CompileResult                 (compiler)
    PolicyIndex.upsert(obj) / remove(key) / candidates(coords)   (index)
    RequestCoordinates.of(request)                       (request)
    evaluate_validating(request, policies, lookups) -> ValidationOutcome   (engine)
    evaluate_mutating(request, policies, lookups) -> MutationOutcome       (engine)
    PolicyEventHandler                                   (events: informer notifications → index)
    Lookups / InMemoryLookups                            (lookups)
    Result / Action / Decision / FailurePolicy           (vocabulary)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.policy.compiler import CompiledPolicy, CompileResult, compile_policy
    from webhook.policy.engine import (
        MutationOutcome,
        ValidationOutcome,
        evaluate_mutating,
        evaluate_validating,
    )
    from webhook.policy.events import PolicyEventHandler
    from webhook.policy.index import PolicyIndex, PolicyState, policy_key
    from webhook.policy.lookups import InMemoryLookups, Lookups
    from webhook.policy.request import AdmissionRequest, RequestCoordinates
    from webhook.policy.vocabulary import Action, Decision, FailurePolicy, PolicyResult, Result

#: Public name → the module that defines it.
_EXPORTS = {
    "Action": "vocabulary",
    "AdmissionRequest": "request",
    "CompileResult": "compiler",
    "CompiledPolicy": "compiler",
    "Decision": "vocabulary",
    "FailurePolicy": "vocabulary",
    "InMemoryLookups": "lookups",
    "Lookups": "lookups",
    "MutationOutcome": "engine",
    "PolicyEventHandler": "events",
    "PolicyIndex": "index",
    "PolicyResult": "vocabulary",
    "PolicyState": "index",
    "RequestCoordinates": "request",
    "Result": "vocabulary",
    "ValidationOutcome": "engine",
    "compile_policy": "compiler",
    "evaluate_mutating": "engine",
    "evaluate_validating": "engine",
    "policy_key": "index",
}

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


def __getattr__(name: str) -> Any:
    """Import the module behind a public name on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
