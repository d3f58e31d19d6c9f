"""Tollgate's vocabulary: the identities of its policies and the words a decision is made of (pure; no I/O).

The one home of:

* identities: the API group and version (:data:`API_VERSION`), the two policy
  kinds (:class:`PolicyKind`), a policy's key (:func:`policy_key`);
* the spec's enumerations: operations, rule scope, ``failurePolicy``,
  ``validationActions``, ``onUnsynced``, ``parameterNotFoundAction``, patch
  types and a validation's ``reason`` with its HTTP code;
* what a decision says: results, actions, decisions, the two endpoints.

``StrEnum`` members compare equal to their wire strings (``Result.PASS == "pass"``),
so JSON output, metrics labels and YAML test expectations keep their spelling.
The values follow ValidatingAdmissionPolicy and admissionregistration.k8s.io/v1;
results follow ``tollgate test`` and wg-policy PolicyReport (pass, fail, warn,
skip, error).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

#: Tollgate's API group and version (the CRDs, TestSuite files, status patches).
GROUP = "tollgate.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


class PolicyKind(StrEnum):
    """The two policy kinds; they share one ``spec``."""

    #: Cluster-scoped: may match any namespace and read params from any namespace.
    CLUSTER = "ClusterAdmissionPolicy"
    #: Namespaced (a tenant's): matches only its own namespace and can only add restrictions.
    NAMESPACED = "AdmissionPolicy"


#: Both policy kinds, for membership tests on a document's ``kind``.
POLICY_KINDS = frozenset(PolicyKind)


def policy_key(namespace: str | None, name: str) -> str:
    """The one identity of a policy: ``namespace/name`` for an AdmissionPolicy, ``name`` for a cluster one.

    The same string as client-go's ``MetaNamespaceKeyFunc``; used by the index,
    status, metrics, results, audit annotations and reports. Names contain no
    ``/``, so the two kinds never collide.
    """
    return f"{namespace}/{name}" if namespace else name


class Operation(StrEnum):
    """``admissionregistration.k8s.io`` OperationType, as a rule names it (``*``: every one)."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CONNECT = "CONNECT"
    ALL = "*"


#: The operations a request carries (every :class:`Operation` but ``*``).
REQUEST_OPERATIONS = (Operation.CREATE, Operation.UPDATE, Operation.DELETE, Operation.CONNECT)


class Scope(StrEnum):
    """A rule's ``scope``: which objects it matches by where they live."""

    CLUSTER = "Cluster"
    NAMESPACED = "Namespaced"
    ALL = "*"


class OnUnsynced(StrEnum):
    """``spec.onUnsynced``: the answer while a cache the policy reads has not synced."""

    DENY = "Deny"
    ALLOW = "Allow"
    WARN = "Warn"


class ParameterNotFoundAction(StrEnum):
    """``paramRef.parameterNotFoundAction``: Deny is an error under failurePolicy; Allow skips the policy."""

    DENY = "Deny"
    ALLOW = "Allow"


class PatchType(StrEnum):
    """``mutations[].patchType`` (MutatingAdmissionPolicy)."""

    JSON_PATCH = "JSONPatch"
    APPLY_CONFIGURATION = "ApplyConfiguration"


class StatusReason(StrEnum):
    """A validation's ``reason`` (``metav1.StatusReason``), the reason of the denial it causes."""

    UNAUTHORIZED = "Unauthorized"
    FORBIDDEN = "Forbidden"
    INVALID = "Invalid"
    REQUEST_ENTITY_TOO_LARGE = "RequestEntityTooLarge"

    @property
    def code(self) -> int:
        """The HTTP status of the denial, as the API server maps the reason (401, 403, 422, 413)."""
        return _REASON_CODES[self]


_REASON_CODES = {StatusReason.UNAUTHORIZED: 401, StatusReason.FORBIDDEN: 403, StatusReason.INVALID: 422,
                 StatusReason.REQUEST_ENTITY_TOO_LARGE: 413}


class Endpoint(StrEnum):
    """The two admission endpoints; the value is the path without its ``/``."""

    VALIDATE = "validate"
    MUTATE = "mutate"

    @property
    def path(self) -> str:
        """The HTTP path: ``/validate`` or ``/mutate``."""
        return f"/{self.value}"


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
        exception: the exception that exempted the request from this policy (``PolicyException ns/name``,
            :mod:`webhook.policy.exceptions`); ``""`` for none.
    """

    policy: str
    result: Result
    message: str = ""
    actions: frozenset[str] = frozenset()
    code: int = 403
    reason: str = "Forbidden"
    exception: str = ""

    @property
    def denies(self) -> bool:
        """Whether this result denies the request."""
        return self.result in (Result.FAIL, Result.ERROR) and Action.DENY in self.actions


__all__ = [
    "API_VERSION",
    "GROUP",
    "POLICY_KINDS",
    "REQUEST_OPERATIONS",
    "VERSION",
    "Action",
    "Decision",
    "Endpoint",
    "FailurePolicy",
    "OnUnsynced",
    "Operation",
    "ParameterNotFoundAction",
    "PatchType",
    "PolicyKind",
    "PolicyResult",
    "Result",
    "Scope",
    "StatusReason",
    "policy_key",
]
