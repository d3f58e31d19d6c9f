"""Bounds on what one evaluation may send back (pure; no I/O).

A review's *input* is bounded by the body cap (``--max-request-bytes``);
this bounds the *output*. A mutating response whose base64 patch exceeds
``max_patch_bytes`` is not sent. The handler keeps its patch within the
limit policy by policy (:mod:`webhook.admission.patch_budget`); what still
exceeds it here counts as a failed evaluation, answered per the candidate
policies' failurePolicy (the caller's ``failed`` callback,
:meth:`AdmissionHandler.engine_failed`). Denial
messages and warnings are truncated instead, since a truncated denial is
still the right answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the handler applies MAX_PATCH_BYTES itself: no import cycle at run time
    from webhook.admission.handler import AdmissionDecision

#: Default cap on ``response.patch`` (base64 characters, i.e. bytes on the wire): 1 MiB. A
#: patch that large already rewrites more than the 3 MB object etcd would store.
MAX_PATCH_BYTES = 1024 * 1024
#: ``response.status.message`` is cut to this many characters.
MAX_MESSAGE_CHARS = 32 * 1024
#: Each of ``response.warnings`` is cut to this many characters, and at most this many are sent.
MAX_WARNING_CHARS = 4 * 1024
MAX_WARNINGS = 64

_CUT = " ... (truncated by tollgate)"


class ResponseTooLarge(RuntimeError):
    """The evaluation produced more output than the limits allow."""


@dataclass(frozen=True, slots=True)
class OutputLimits:
    """Caps applied to each AdmissionDecision before it is serialized.

    Attributes:
        max_patch_bytes: largest ``response.patch`` (base64 string length, bytes).
        max_message_chars: ``response.status.message`` is truncated beyond this.
        max_warning_chars: each warning is truncated beyond this.
        max_warnings: warnings beyond this many are dropped (one note says so).
    """

    max_patch_bytes: int = MAX_PATCH_BYTES
    max_message_chars: int = MAX_MESSAGE_CHARS
    max_warning_chars: int = MAX_WARNING_CHARS
    max_warnings: int = MAX_WARNINGS


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - len(_CUT), 0)] + _CUT


def bound_decision(decision: AdmissionDecision, limits: OutputLimits,
                   failed: Callable[[Exception], AdmissionDecision]) -> AdmissionDecision:
    """Apply ``limits`` to ``decision``.

    Args:
        decision: the handler's answer.
        limits: the caps.
        failed: builds the answer for a failed evaluation (per failurePolicy),
            given the :class:`ResponseTooLarge` that explains why.

    Returns:
        ``decision`` itself when within limits; a copy with the message and
        warnings truncated; or ``failed(ResponseTooLarge(...))`` when the
        patch is over ``max_patch_bytes``.
    """
    response = decision.response
    patch = response.get("patch")
    if patch is not None and len(patch) > limits.max_patch_bytes:
        return failed(ResponseTooLarge(
            f"JSONPatch of {len(patch)} bytes (base64) exceeds the {limits.max_patch_bytes}-byte limit"))
    status = response.get("status")
    message = status.get("message") if status else None
    warnings = response.get("warnings")
    long_message = message is not None and len(message) > limits.max_message_chars
    long_warnings = warnings is not None and (
        len(warnings) > limits.max_warnings or any(len(w) > limits.max_warning_chars for w in warnings))
    if not long_message and not long_warnings:
        return decision
    bounded = dict(response)
    if long_message and status is not None and message is not None:
        bounded["status"] = {**status, "message": _cut(message, limits.max_message_chars)}
    if long_warnings and warnings is not None:
        kept = [_cut(w, limits.max_warning_chars) for w in warnings[: limits.max_warnings]]
        if len(warnings) > limits.max_warnings:
            kept.append(f"tollgate: {len(warnings) - limits.max_warnings} more warnings not shown")
        bounded["warnings"] = kept
    return replace(decision, response=bounded)  # type: ignore[arg-type]
