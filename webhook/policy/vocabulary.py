"""The words a decision is made of: results, actions, decisions, failure policies (pure; no I/O).

``StrEnum`` members compare equal to their wire strings (``Result.PASS == "pass"``),
so JSON output, metrics labels and YAML test expectations keep their spelling.
The values follow ValidatingAdmissionPolicy: ``validationActions`` (Deny, Warn,
Audit), ``failurePolicy`` (Fail, Ignore); results follow ``tollgate test`` and
wg-policy PolicyReport (pass, fail, warn, skip, error).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Result(StrEnum):
    """One policy's verdict on one request.

    ``PASS``: every validation held (or the mutations applied). ``FAIL``: a
    validation was false, or ``onUnsynced``/``parameterNotFoundAction`` said
    Deny. ``SKIP``: a matchCondition was false, or the policy chose not to
    decide (params missing with ``Allow``). ``ERROR``: an expression could
    not be evaluated or the policy is broken; ``failurePolicy`` decides what
    the request gets. ``WARN`` is a reporting word for a ``FAIL`` whose only
    action is Warn (``tollgate test``, PolicyReports); the engine never
    returns it.
    """

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    ERROR = "error"

    @property
    def severity(self) -> int:
        """0 for the most severe: ``error``, ``fail``, ``warn``, ``pass``, ``skip`` (the one ordering of results)."""
        return _SEVERITY[self]

    @classmethod
    def worst(cls, results: Iterable[str]) -> Result:
        """The most severe of ``results`` (wire strings or members); ``skip`` when there are none.

        Raises:
            ValueError: a string that is not a result.
        """
        return min((cls(r) for r in results), key=lambda r: r.severity, default=cls.SKIP)


_SEVERITY = {Result.ERROR: 0, Result.FAIL: 1, Result.WARN: 2, Result.PASS: 3, Result.SKIP: 4}


class Action(StrEnum):
    """``validationActions`` entries, plus ``IGNORED`` for an error a failurePolicy Ignore swallowed."""

    DENY = "Deny"
    WARN = "Warn"
    AUDIT = "Audit"
    IGNORED = "Ignored"


class FailurePolicy(StrEnum):
    """``spec.failurePolicy``: what an evaluation error or a broken policy means for the request."""

    FAIL = "Fail"
    IGNORE = "Ignore"


class Decision(StrEnum):
    """What the webhook answered (``tollgate_admission_decisions_total{decision}``)."""

    ALLOWED = "allowed"
    DENIED = "denied"
    PATCHED = "patched"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One policy's verdict on one request (for the response, metrics, logs and ``tollgate test``).

    Attributes:
        policy: the policy's label: ``name`` for a ClusterAdmissionPolicy,
            ``namespace/name`` for an AdmissionPolicy (never equal, as names
            contain no ``/``).
        result: see :class:`~webhook.policy.vocabulary.Result`.
        message: why it failed, errored or was skipped.
        actions: how the result is enforced (``validationActions``, or
            ``Warn``+``Ignored`` for an error under ``failurePolicy: Ignore``).
        code: HTTP status of a denial (from the failing validation's ``reason``).
        reason: ``metav1.StatusReason`` of a denial.
    """

    policy: str
    result: Result
    message: str = ""
    actions: frozenset[str] = frozenset()
    code: int = 403
    reason: str = "Forbidden"

    @property
    def denies(self) -> bool:
        """Whether this result denies the request."""
        return self.result in (Result.FAIL, Result.ERROR) and Action.DENY in self.actions


__all__ = ["Action", "Decision", "FailurePolicy", "PolicyResult", "Result"]
