"""Evaluate the policies a request selects: validate, audit, mutate — nothing else (pure; no I/O).

Which policies apply is :mod:`webhook.policy.matching`'s job; this package
evaluates them with the semantics of the API server's ValidatingAdmissionPolicy
validator and MutatingAdmissionPolicy (``docs/design/policy-api.md`` where it
says more), one concept per module:

* :mod:`~webhook.policy.engine.outcome`: outcomes, per-policy results, failurePolicy enforcement;
* :mod:`~webhook.policy.engine.values`: one program's value (plain, bool, JSON);
* :mod:`~webhook.policy.engine.context`: per-request state shared by every policy;
* :mod:`~webhook.policy.engine.references`: what ``spec.references`` lets a policy read;
* :mod:`~webhook.policy.engine.prepare`: the steps before a policy's expressions run;
* :mod:`~webhook.policy.engine.fused`: fused programs and the decision memo;
* :mod:`~webhook.policy.engine.validate` and :mod:`~webhook.policy.engine.mutate`: the two endpoints.
"""

from webhook.policy.engine.context import RequestContext, synthesize_pod
from webhook.policy.engine.mutate import evaluate_mutating, mutation_order
from webhook.policy.engine.outcome import EvaluationError, MutationOutcome, ValidationOutcome, label
from webhook.policy.engine.references import References
from webhook.policy.engine.validate import evaluate_validating
from webhook.policy.vocabulary import PolicyResult

__all__ = [
    "EvaluationError",
    "MutationOutcome",
    "PolicyResult",
    "References",
    "RequestContext",
    "ValidationOutcome",
    "evaluate_mutating",
    "evaluate_validating",
    "label",
    "mutation_order",
    "synthesize_pod",
]
