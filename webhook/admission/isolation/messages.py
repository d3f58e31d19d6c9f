"""The messages the server and an evaluation worker exchange: one frozen dataclass per kind.

Both ends import this module, so a message has one definition: the server sends
:class:`Configure`, :class:`Warm`, :class:`Evaluate` and the answers to lookups
(:class:`LookupValue`, :class:`LookupRaised`); the worker sends :class:`Ready`,
:class:`Warmed`, :class:`LookupCall` and ends each review with :class:`Done`,
:class:`Missing` or :class:`Failed`. The conversation is spelled out in
:mod:`webhook.admission.isolation.worker`; the frames that carry the messages in
:mod:`webhook.admission.isolation.ipc`.

The cache reads a worker may ask for are the methods of the engine's
:class:`~webhook.policy.lookups.Lookups` protocol itself (:data:`LOOKUP_METHODS`):
the worker forwards whatever the engine calls, the server answers only those
names, and neither side lists them by hand.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from webhook.admission.handler import AdmissionDecision
from webhook.admission.limits import OutputLimits
from webhook.admission.review import AdmissionResponse
from webhook.policy import Decision, PolicyResult, Result
from webhook.policy.lookups import Lookups

#: The cache reads a worker may ask the server for: every public method of :class:`Lookups`.
LOOKUP_METHODS: frozenset[str] = frozenset(
    name for name, value in vars(Lookups).items() if callable(value) and not name.startswith("_"))

#: A candidate policy as sent to a worker: ``(token, policy object)``, the object left out (None)
#: when the server believes the worker has compiled that token already.
PolicyEntry: TypeAlias = tuple[str, dict[str, Any] | None]

#: One :class:`~webhook.policy.PolicyResult` as builtins (pickling the dataclass costs an order of
#: magnitude more): ``(policy, result, message, actions, code, reason, exception)``.
ResultRow: TypeAlias = tuple[str, str, str, tuple[str, ...], int, str, str]


class UnknownLookup(ValueError):
    """A :class:`LookupCall` named something that is not a method of :class:`Lookups` (a protocol error)."""


# Server → worker.

@dataclass(frozen=True, slots=True)
class Configure:
    """The first message: how the worker runs. Answered with :class:`Ready`.

    Attributes:
        memory_limit_bytes: ``RLIMIT_AS`` of the worker (0: unlimited).
        limits: output caps the worker applies to each decision.
        log_level: the server's log level name (``INFO``...).
        recycle_rss_bytes: ask to be replaced when resident above this after a review (0: never).
    """

    memory_limit_bytes: int
    limits: OutputLimits
    log_level: str
    recycle_rss_bytes: int


@dataclass(frozen=True, slots=True)
class Warm:
    """Compile these policy versions before serving. Answered with :class:`Warmed`."""

    policies: list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Evaluate:
    """Decide one review.

    Answered with any number of :class:`LookupCall` (each answered in turn), then :class:`Done`,
    :class:`Missing` or :class:`Failed`.

    Attributes:
        endpoint: ``validate`` or ``mutate``.
        request_json: the AdmissionRequest as JSON bytes (cheaper to send than the dict).
        policies: the candidates, see :data:`PolicyEntry`.
        prefetched: answers to lookups nearly every review makes, sent ahead.
        deadline: ``time.monotonic()`` (system-wide) past which the engine stops evaluating policies.
        exceptions: the source objects of the Ready exceptions naming a candidate (the worker compiles them,
            each version once), so a review decided in a worker is exempted as one decided inline.
        now: the server's time of the decision (aware UTC), which exceptions' ``expiresAt`` is compared with.
    """

    endpoint: str
    request_json: bytes
    policies: list[PolicyEntry]
    prefetched: dict[LookupCall, Any] = field(default_factory=dict)
    deadline: float | None = None
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    now: datetime.datetime | None = None


@dataclass(frozen=True, slots=True)
class LookupValue:
    """The answer to a :class:`LookupCall`."""

    value: Any


@dataclass(frozen=True, slots=True)
class LookupRaised:
    """The server's cache read raised; ``text`` says what (the worker's engine answers per failurePolicy)."""

    text: str


# Worker → server.

@dataclass(frozen=True, slots=True)
class Ready:
    """The worker is configured and serving."""

    pid: int


@dataclass(frozen=True, slots=True)
class Warmed:
    """The worker compiled what :class:`Warm` sent; ``compiled`` versions are now cached."""

    compiled: int


@dataclass(frozen=True, slots=True)
class LookupCall:
    """Read the server's caches: ``Lookups.<method>(*args)``. Hashable, so prefetched answers are keyed by it."""

    method: str
    args: tuple[Any, ...]

    @classmethod
    def of(cls, method: str, *args: Any) -> LookupCall:
        """A call of ``method``; Mapping arguments (a labels map) are sent as plain dicts."""
        return cls(method, tuple(dict(a) if isinstance(a, Mapping) and not isinstance(a, dict) else a
                                 for a in args))

    def apply(self, lookups: Lookups) -> Any:
        """Run this call on ``lookups`` (the server side).

        Raises:
            UnknownLookup: ``method`` is not a method of :class:`Lookups`.
        """
        if self.method not in LOOKUP_METHODS:
            raise UnknownLookup(f"unknown lookup {self.method!r}")
        return getattr(lookups, self.method)(*self.args)


@dataclass(frozen=True, slots=True)
class Done:
    """The review's decision.

    Attributes:
        response: the AdmissionResponse, already bounded by the output limits.
        decision: a :class:`~webhook.policy.Decision` value.
        results: one :data:`ResultRow` per selected policy.
        retire: the worker asks to be replaced (resident memory above the recycle threshold).
        durations: seconds each evaluated policy took in the worker, by label.
    """

    response: AdmissionResponse
    decision: str
    results: list[ResultRow]
    retire: bool = False
    durations: list[tuple[str, float]] = field(default_factory=list)

    @classmethod
    def of(cls, decision: AdmissionDecision, *, retire: bool = False) -> Done:
        """The message carrying ``decision`` (every field of each result, code and reason included)."""
        return cls(decision.response, str(decision.decision),
                   [(r.policy, str(r.result), r.message, tuple(r.actions), r.code, r.reason, r.exception)
                    for r in decision.results], retire, list(decision.durations))

    def admission_decision(self) -> AdmissionDecision:
        """The :class:`AdmissionDecision` this message carries (inverse of :meth:`of`)."""
        results = tuple(PolicyResult(policy, Result(result), message, frozenset(actions), code, reason, exception)
                        for policy, result, message, actions, code, reason, exception in self.results)
        return AdmissionDecision(self.response, Decision(self.decision), results,
                                 tuple((policy, seconds) for policy, seconds in self.durations),
                                 tuple(r for r in results if r.exception))


@dataclass(frozen=True, slots=True)
class Missing:
    """The worker has not compiled these tokens: send the review again with their objects."""

    tokens: list[str]


@dataclass(frozen=True, slots=True)
class Failed:
    """The worker caught an exception evaluating the review (it keeps serving unless ``retire``)."""

    text: str
    retire: bool = False


#: What the server may send.
ToWorker: TypeAlias = Configure | Warm | Evaluate | LookupValue | LookupRaised
#: What a worker may send.
FromWorker: TypeAlias = Ready | Warmed | LookupCall | Done | Missing | Failed
