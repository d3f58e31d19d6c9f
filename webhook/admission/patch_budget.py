"""Keep the mutating answer's JSONPatch within its size limit by dropping optional changes, policy by policy.

A JSONPatch over ``max_patch_bytes`` (base64, as sent) is never sent. When the
patch of every selected mutation together is over the limit, the changes of
``failurePolicy: Ignore`` policies are what may go: as for an Ignore-d
mutation error, each such policy whose changes would push the patch over the
limit is left out, with a warning naming it, and the others keep theirs. The
changes of ``failurePolicy: Fail`` policies are required: when they alone
exceed the limit, :class:`~webhook.admission.limits.ResponseTooLarge` is raised
and the review is answered per failurePolicy. So one tenant's oversized patch
costs only that tenant's changes, never the cluster's.

Only called when the patch is over the limit: it evaluates the mutations again,
once for the required ones and once per optional one (pure; no I/O).
"""

from __future__ import annotations

from typing import Any

from webhook.admission.limits import ResponseTooLarge
from webhook.admission.patch import encode_patch
from webhook.policy import (
    Action,
    FailurePolicy,
    MutationOutcome,
    PolicyResult,
    Result,
    evaluate_mutating,
)
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.engine import label
from webhook.policy.lookups import Lookups
from webhook.policy.plan import Plan


def patch_bytes(operations: list[dict[str, Any]]) -> int:
    """Length of ``operations`` as ``AdmissionResponse.patch`` carries them (base64 of the JSON), bytes."""
    return len(encode_patch(operations))


def fit_patch(request: dict[str, Any], plan: Plan, lookups: Lookups, *, max_patch_bytes: int,
              deadline: float | None = None) -> MutationOutcome:
    """The mutation outcome of ``plan`` with the Ignore policies whose changes do not fit left out.

    Args:
        request: the AdmissionRequest.
        plan: the request's candidates (as the handler evaluated them).
        lookups: the caches.
        max_patch_bytes: the limit on the base64 JSONPatch, bytes.
        deadline: ``time.monotonic()`` past which remaining policies are errors.

    Returns:
        The engine's outcome over the required policies and every optional one that fits, with an
        ``error`` result (actions Warn, Ignored) and a warning for each policy left out.

    Raises:
        ResponseTooLarge: the ``failurePolicy: Fail`` policies' changes alone exceed the limit.
    """
    mutating: list[CompiledPolicy] = []
    for policy, _view in plan.entries:
        if policy.mutating and not any(policy is p for p in mutating):
            mutating.append(policy)
    optional = [p for p in mutating if p.spec.failure_policy == FailurePolicy.IGNORE]
    kept = [p for p in mutating if p.spec.failure_policy != FailurePolicy.IGNORE]
    outcome = evaluate_mutating(request, kept, lookups, deadline=deadline)
    size = patch_bytes(outcome.patch)
    if outcome.allowed and size > max_patch_bytes:
        raise ResponseTooLarge(f"JSONPatch of {size} bytes (base64) exceeds the {max_patch_bytes}-byte limit")
    left_out: list[tuple[CompiledPolicy, int]] = []
    for policy in optional:
        if not outcome.allowed:
            break
        trial_policies = [p for p in mutating if p is policy or any(p is k for k in kept)]
        trial = evaluate_mutating(request, trial_policies, lookups, deadline=deadline)
        trial_size = patch_bytes(trial.patch)
        if trial.allowed and trial_size > max_patch_bytes:
            left_out.append((policy, trial_size))
            continue
        kept, outcome = trial_policies, trial
    for policy, trial_size in left_out:
        message = (f"JSONPatch of {trial_size} bytes (base64) with its changes exceeds the {max_patch_bytes}-byte "
                   "limit; its changes were dropped")
        outcome.results.append(PolicyResult(label(policy), Result.ERROR, message,
                                            frozenset({Action.WARN, Action.IGNORED})))
        outcome.warnings.append(f"{label(policy)}: {message} (failurePolicy: Ignore)")
    return outcome
