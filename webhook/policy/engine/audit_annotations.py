"""A policy's own ``auditAnnotations``, evaluated: the one loop the per-policy path and a scoped fused group share.

As the API server's validating policy (``validating/validator.go``): each expression's string result is recorded
under its key, null records nothing, anything else is an evaluation error.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.compiler import CompiledPolicy
from webhook.policy.engine.annotations import annotation_key
from webhook.policy.engine.outcome import EvaluationError
from webhook.policy.engine.values import cel_type_name, value

__all__ = ["add_policy_annotations"]


def add_policy_annotations(policy: CompiledPolicy, activation: Any, into: dict[str, str]) -> None:
    """Evaluate the policy's own ``auditAnnotations`` on ``activation`` and add them to ``into``, in order.

    As the API server's validating policy: an expression giving null adds nothing, a string is added (stripped,
    under :func:`annotation_key`) unless blank. The caller sets the policy's scope (params, variables).

    Raises:
        EvaluationError: an expression failed, or gave neither a string nor null; the annotations before it
            stay in ``into``.
    """
    for key, program in policy.audit_annotations:
        result = value(program, activation)
        if result is None:
            continue
        if not isinstance(result, str):
            raise EvaluationError(f"{program.path}: must evaluate to string or null, but evaluated to "
                                  f"{cel_type_name(result)}")
        if result.strip():
            into[annotation_key(policy.spec, key)] = result.strip()
