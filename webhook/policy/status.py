"""The policy's ``Ready`` status condition (pure; no I/O).

Shape as ``metav1.Condition``; ``webhook.kube.status.StatusWriter`` compares it
with the CR's current status and writes only on change.
"""

from __future__ import annotations

from typing import Any


def ready_condition(ready: bool, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    """Build the Ready condition.

    Args:
        ready: whether every expression compiled and type-checked.
        reason: ``Compiled`` | ``CompileError`` | ``InvalidSpec`` (a missing param is a per-request answer,
            per ``parameterNotFoundAction``, not a condition).
        message: human-readable detail; for errors the spec path and CEL position.
        generation: the CR's ``metadata.generation`` (``observedGeneration``).

    Returns:
        ``{"type": "Ready", "status": "True"|"False", "reason", "message",
        "observedGeneration"}`` (``observedGeneration`` omitted when unknown).
    """
    condition: dict[str, Any] = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": reason,
        "message": message,
    }
    if isinstance(generation, int):
        condition["observedGeneration"] = generation
    return condition
