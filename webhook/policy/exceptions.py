"""PolicyException and ClusterPolicyException: who is exempt from which policy, until when (pure; no I/O).

The one home of what an exception means, applied identically by admission, the background audit and
the CLI (each hands the engine an :class:`ExceptionSet` and a clock):

* :func:`compile_exception` parses a ``tollgate.dev/v1alpha1`` ``PolicyException`` (namespaced) or
  ``ClusterPolicyException`` (cluster-scoped) into the neutral :class:`CompiledException`, compiling its
  ``spec.matchConditions`` in the policies' CEL environment (``object``, ``oldObject``, ``request``,
  ``namespaceObject``) with the policies' bounds (expression length, static cost). A foreign exception
  (Kyverno's CEL ``PolicyException``) is converted into the same model by its format's home
  (:mod:`webhook.formats.kyverno.exceptions`); an :class:`ExceptionCache` is given its compile function.
* :meth:`ExceptionSet.exempt` decides, for one policy's non-passing result, whether an exception
  exempts the request: it names the policy (its label, :func:`webhook.policy.engine.outcome.label`),
  has not expired at ``now`` (compared at decision time, so an exception stops exempting at the
  instant ``spec.expiresAt`` passes, with no watch event), confines a ``PolicyException`` to objects in
  its own namespace (never a cluster-scoped object, never another namespace's, whatever policy it
  names), matches ``spec.match`` (``resourceRules``/``namespaceSelector``/``objectSelector``, decided by
  :mod:`webhook.policy.matching`, the only matcher) and every matchCondition is true (an error
  exempts nothing). The result becomes ``skip`` naming the exception, or with ``spec.mode: Audit``
  stays ``fail`` but is enforced as ``Audit`` only (admitted, still reported; gatekeeper#2161).
* :func:`exception_condition` is the status a leader writes: ``Ready=False`` with the spec path for
  a malformed or uncompilable exception, one naming no existing policy, or one without a reason;
  reason ``Expired`` once ``expiresAt`` has passed.

Kyverno's ``PolicyException`` (``kyverno/api/policies.kyverno.io/v1alpha1/policy_exception_types.go``)
has the same parts (``policyRefs``, ``matchConditions``); Kyverno applies ``spec.expiresAt`` only at
admission (kyverno#17473), which Tollgate does not follow: here every path compares with its clock.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from webhook.policy.cel import cost
from webhook.policy.cel import env as celenv
from webhook.policy.cel.env import T, environment
from webhook.policy.compiler import CompileError, Program, compile_expression
from webhook.policy.matching import rules_view, selectors_match
from webhook.policy.model import MAX_MATCH_CONDITIONS, PolicySpec, PolicySpecError, parse_policy_match
from webhook.policy.request import RequestCoordinates
from webhook.policy.status import ready_condition
from webhook.policy.vocabulary import Action, PolicyKind, PolicyResult, Result

__all__ = ["EXCEPTIONS_ANNOTATION_KEY", "EXCEPTION_KINDS", "CompiledException", "ExceptionCache",
           "ExceptionCompileResult", "ExceptionKind", "ExceptionMode", "ExceptionSet", "ExceptionSpecError",
           "compile_exception", "compile_match_conditions", "exception_condition", "exceptions_annotation",
           "parse_time"]

#: The ``auditAnnotations`` key of the exceptions that exempted a request (a JSON list).
EXCEPTIONS_ANNOTATION_KEY = "exceptions"
#: Longest ``spec.reason``.
MAX_REASON_LENGTH = 1024
#: Most entries in ``spec.policies``.
MAX_POLICIES = 64


class ExceptionKind(StrEnum):
    """The two exception kinds of ``tollgate.dev/v1alpha1``."""

    #: Namespaced: exempts only objects in its own namespace (delegable by namespaced RBAC).
    NAMESPACED = "PolicyException"
    #: Cluster-scoped: may select namespaces with ``spec.match``.
    CLUSTER = "ClusterPolicyException"


#: Both exception kinds, for membership tests on a document's ``kind``.
EXCEPTION_KINDS = frozenset(ExceptionKind)


class ExceptionMode(StrEnum):
    """``spec.mode``: ``Exempt`` (default) answers ``skip``; ``Audit`` admits but keeps reporting ``fail``."""

    EXEMPT = "Exempt"
    AUDIT = "Audit"


class ExceptionSpecError(ValueError):
    """The exception's spec is malformed; ``path`` is the spec path (``spec.policies[0].name``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


def parse_time(value: str) -> datetime.datetime:
    """An RFC 3339 timestamp (``2026-11-28T06:00:00Z``, offsets allowed) as an aware UTC datetime.

    Raises:
        ValueError: not RFC 3339 with a time zone.
    """
    parsed = datetime.datetime.fromisoformat(value.replace("z", "Z"))
    if parsed.tzinfo is None or "T" not in value.upper():
        raise ValueError(f"{value!r} is not an RFC 3339 timestamp with a time zone")
    return parsed.astimezone(datetime.UTC)


@dataclass(frozen=True, slots=True)
class CompiledException:
    """One exception, in the form every source converts into (Tollgate's two kinds, Kyverno's later).

    Attributes:
        kind: the source kind (``PolicyException``, ``ClusterPolicyException``, or a foreign kind).
        name: ``metadata.name``.
        namespace: ``metadata.namespace``; None for a cluster-scoped exception.
        policies: the labels of the policies it exempts from (``name``, ``namespace/name``).
        reason: ``spec.reason``: the owner's words, a ticket.
        mode: :class:`ExceptionMode`.
        expires_at: when it stops exempting (UTC); None for never.
        confined_to: the only namespace whose objects it may exempt (a namespaced exception's own);
            None: any, as ``match`` selects.
        match: the request selection (resource rules, selectors) as a policy's match part; None: every request.
        match_conditions: ``(name, program)`` pairs, all of which must be true.
        generation: ``metadata.generation``.
        source: the object it was compiled from (an evaluation worker compiles it again from this).
    """

    kind: str
    name: str
    namespace: str | None
    policies: frozenset[str]
    reason: str
    mode: ExceptionMode = ExceptionMode.EXEMPT
    expires_at: datetime.datetime | None = None
    confined_to: str | None = None
    match: PolicySpec | None = None
    match_conditions: tuple[tuple[str, Program], ...] = ()
    generation: int = 0
    source: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        """Store key: ``namespace/name`` or ``name``."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def label(self) -> str:
        """How results, annotations and reports name it: ``PolicyException team-a/debug``."""
        return f"{self.kind} {self.key}"

    def expired(self, now: datetime.datetime) -> bool:
        """Whether ``expiresAt`` has passed at ``now`` (an aware datetime): from that instant it exempts nothing."""
        return self.expires_at is not None and now >= self.expires_at

    def selects(self, request: Mapping[str, Any], coords: RequestCoordinates,
                namespace_object: Callable[[], dict[str, Any] | None]) -> bool:
        """The static part: namespace confinement, then ``spec.match`` (the policies' matcher)."""
        if self.confined_to is not None and not (coords.namespaced and coords.namespace == self.confined_to):
            return False  # a PolicyException never reaches a cluster-scoped object or another namespace
        if self.match is None:
            return True
        return (rules_view(self.match, coords) is not None
                and selectors_match(self.match, coords, request, namespace_object))


@dataclass(frozen=True, slots=True)
class ExceptionCompileResult:
    """What compiling an exception CR produced: the exception (None when broken) and its Ready condition."""

    exception: CompiledException | None
    condition: dict[str, Any]
    #: The policies it names (even when broken), for the "names no existing policy" check.
    policies: frozenset[str] = frozenset()


#: Every request: the match of an exception without ``spec.match.resourceRules``.
_ALL_RESOURCES = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*", "*/*"], "operations": ["*"]}]


def _match(spec: dict[str, Any], name: str) -> PolicySpec | None:
    raw = spec.get("match")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ExceptionSpecError("spec.match", "must be an object")
    match = dict(raw)
    if not match.get("resourceRules"):
        match["resourceRules"] = _ALL_RESOURCES
    try:
        # The policies' own parser, so rules and selectors mean exactly what they mean in a policy.
        return parse_policy_match({"kind": PolicyKind.CLUSTER, "metadata": {"name": name},
                                   "spec": {"match": match, "validations": []}})
    except PolicySpecError as e:
        raise ExceptionSpecError(e.path, e.detail) from None


def _policies(spec: dict[str, Any]) -> frozenset[str]:
    raw = spec.get("policies")
    if not isinstance(raw, list) or not raw:
        raise ExceptionSpecError("spec.policies", "at least one policy is required")
    if len(raw) > MAX_POLICIES:
        raise ExceptionSpecError("spec.policies", f"at most {MAX_POLICIES} entries")
    names: set[str] = set()
    for i, entry in enumerate(raw):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise ExceptionSpecError(f"spec.policies[{i}].name", "required: the policy's name "
                                                                 "(namespace/name for an AdmissionPolicy)")
        names.add(name.strip())
    return frozenset(names)


def compile_match_conditions(raw: Any, path: str = "spec.matchConditions") -> tuple[tuple[str, Program], ...]:
    """Compile an exception's matchConditions (``[{name, expression}]``) in the policies' CEL environment.

    For every source of exceptions: Tollgate's kinds here, a foreign kind (Kyverno's CEL PolicyException's
    ``spec.matchConditions``) in its format's converter, with its own ``path``.

    Raises:
        ExceptionSpecError: not a list of named expressions, a duplicate name, more than
            :data:`~webhook.policy.model.MAX_MATCH_CONDITIONS`.
        CompileError: an expression that does not compile or is not a bool (spec path and CEL position),
            or whose static cost exceeds :data:`~webhook.policy.cel.cost.MAX_STATIC_WORK`.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ExceptionSpecError(path, "must be a list")
    if len(raw) > MAX_MATCH_CONDITIONS:
        raise ExceptionSpecError(path, f"at most {MAX_MATCH_CONDITIONS} entries")
    out: list[tuple[str, Program]] = []
    for i, c in enumerate(raw):
        where = f"{path}[{i}]"
        name = c.get("name") if isinstance(c, dict) else None
        expression = c.get("expression") if isinstance(c, dict) else None
        if not isinstance(name, str) or not name:
            raise ExceptionSpecError(f"{where}.name", "required")
        if any(n == name for n, _ in out):
            raise ExceptionSpecError(f"{where}.name", f"duplicate name {name!r}")
        if not isinstance(expression, str) or not expression.strip():
            raise ExceptionSpecError(f"{where}.expression", "required")
        out.append((name, compile_expression(expression, f"{where}.expression", expect=(T.BOOL,),
                                             known_variables=frozenset())))
    static = cost.total(*(p.work for _, p in out)).get((0, 0, 0), 0)
    if static > cost.MAX_STATIC_WORK:
        worst = max((p for _, p in out), key=lambda p: p.work.get((0, 0, 0), 0))
        raise CompileError(worst.path, f"estimated cost {static:,} exceeds the budget of {cost.MAX_STATIC_WORK:,} "
                                       "whatever the input")
    return tuple(out)


def _head(obj: dict[str, Any]) -> tuple[ExceptionKind, str, str | None, dict[str, Any]]:
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in EXCEPTION_KINDS:
        raise ExceptionSpecError("kind", f"must be one of {sorted(EXCEPTION_KINDS)}, got {kind!r}")
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise ExceptionSpecError("metadata.name", "required")
    namespace = meta.get("namespace") if kind == ExceptionKind.NAMESPACED else None
    if kind == ExceptionKind.NAMESPACED and not (isinstance(namespace, str) and namespace):
        raise ExceptionSpecError("metadata.namespace", "required for PolicyException")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise ExceptionSpecError("spec", "required")
    return ExceptionKind(kind), name, namespace, spec


def _parse(obj: dict[str, Any]) -> CompiledException:
    kind, name, namespace, spec = _head(obj)
    policies = _policies(spec)
    reason = spec.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ExceptionSpecError("spec.reason", "required: who asked for it and why (a ticket)")
    if len(reason) > MAX_REASON_LENGTH:
        raise ExceptionSpecError("spec.reason", f"at most {MAX_REASON_LENGTH} characters")
    mode = spec.get("mode", ExceptionMode.EXEMPT.value)
    if not isinstance(mode, str) or mode not in set(ExceptionMode):
        raise ExceptionSpecError("spec.mode", f"must be one of {sorted(ExceptionMode)}, got {mode!r}")
    expires_at = None
    raw_expiry = spec.get("expiresAt")
    if raw_expiry is not None:
        try:
            if not isinstance(raw_expiry, str):
                raise ValueError(f"{raw_expiry!r} is not a string")
            expires_at = parse_time(raw_expiry)
        except ValueError as e:
            raise ExceptionSpecError("spec.expiresAt", f"must be an RFC 3339 timestamp: {e}") from None
    match = _match(spec, name)
    conditions = compile_match_conditions(spec.get("matchConditions"))
    generation = (obj.get("metadata") or {}).get("generation", 0)
    return CompiledException(
        kind=kind, name=name, namespace=namespace, policies=policies, reason=reason.strip(), mode=ExceptionMode(mode),
        expires_at=expires_at, confined_to=namespace, match=match, match_conditions=conditions,
        generation=generation if isinstance(generation, int) else 0, source=obj)


def compile_exception(obj: dict[str, Any]) -> ExceptionCompileResult:
    """Parse and compile an exception CR; never raises for bad input.

    Args:
        obj: a ``PolicyException`` or ``ClusterPolicyException`` as a raw dict.

    Returns:
        The exception and ``Ready=True`` (reason ``Compiled``); or no exception and ``Ready=False``
        with reason ``InvalidSpec`` (the spec path) or ``CompileError`` (the spec path and CEL position).
        A broken exception exempts nothing.
    """
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    generation = meta.get("generation") if isinstance(meta, dict) else None
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    try:
        named = _policies(spec)  # type: ignore[arg-type]
    except ExceptionSpecError:
        named = frozenset()
    try:
        exception = _parse(obj)
    except ExceptionSpecError as e:
        return ExceptionCompileResult(None, ready_condition(False, "InvalidSpec", str(e), generation), named)
    except CompileError as e:
        return ExceptionCompileResult(None, ready_condition(False, "CompileError", str(e), generation), named)
    summary = f"exempts from {', '.join(sorted(exception.policies))}"
    return ExceptionCompileResult(exception, ready_condition(True, "Compiled", summary, generation), named)


def exception_condition(result: ExceptionCompileResult, now: datetime.datetime,
                        policy_exists: Callable[[str], bool]) -> dict[str, Any]:
    """The Ready condition a leader writes for a compiled exception at ``now``.

    Args:
        result: :func:`compile_exception`'s result.
        now: the current time (aware).
        policy_exists: whether a policy with this label exists.

    Returns:
        The compile condition when broken; ``Ready=False`` reason ``UnknownPolicy`` naming
        ``spec.policies[i].name`` when a named policy does not exist; ``Ready=False`` reason ``Expired``
        once ``expiresAt`` has passed; else the compile condition (``Ready=True``).
    """
    exception = result.exception
    if exception is None:
        return result.condition
    generation = result.condition.get("observedGeneration")
    missing = sorted(p for p in exception.policies if not policy_exists(p))
    if missing:
        return ready_condition(False, "UnknownPolicy", f"spec.policies: no policy named {', '.join(missing)}",
                               generation)
    if exception.expired(now):
        assert exception.expires_at is not None
        return ready_condition(False, "Expired", f"spec.expiresAt: expired at "
                                                 f"{exception.expires_at.isoformat().replace('+00:00', 'Z')}; "
                                                 "it exempts nothing", generation)
    return result.condition


def _exception_activation(request: Mapping[str, Any], namespace_object: Callable[[], dict[str, Any] | None]) -> Any:
    """An activation over the whole request (the engine's is pruned to what the policies read)."""
    return environment().Activation({
        "object": request.get("object"), "oldObject": request.get("oldObject"),
        "request": {k: v for k, v in request.items() if k not in ("object", "oldObject")},
        "namespaceObject": namespace_object(), "params": None, "variables": None,
    })


def _conditions_hold(exception: CompiledException, activation: Callable[[], Any]) -> bool:
    for _name, program in exception.match_conditions:
        try:
            if celenv.evaluate(program.program, activation()) is not True:
                return False  # false, or not a bool
        except (celenv.EvaluationError, celenv.BudgetExceeded):
            return False  # an error exempts nothing
    return True


@dataclass(frozen=True, slots=True)
class ExceptionSet:
    """The Ready exceptions at one moment, by the policy label they name; immutable, shared by requests.

    Empty is falsy: with no exception the engine asks nothing more (``if exceptions``).
    """

    by_policy: Mapping[str, tuple[CompiledException, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, exceptions: Iterable[CompiledException]) -> ExceptionSet:
        """Index ``exceptions`` by policy label; each list ordered by kind then key (the first match names it)."""
        by_policy: dict[str, list[CompiledException]] = {}
        for e in sorted(exceptions, key=lambda e: (e.kind, e.key)):
            for policy in e.policies:
                by_policy.setdefault(policy, []).append(e)
        return cls({p: tuple(es) for p, es in by_policy.items()})

    def __bool__(self) -> bool:
        return bool(self.by_policy)

    def __len__(self) -> int:
        return len({e.key + e.kind for es in self.by_policy.values() for e in es})

    def exempting(self, policy: str, request: Mapping[str, Any], coords: RequestCoordinates,
                  namespace_object: Callable[[], dict[str, Any] | None], now: datetime.datetime,
                  ) -> CompiledException | None:
        """The first exception that exempts ``request`` from ``policy`` at ``now``, or None.

        Args:
            policy: the policy's label.
            request: the AdmissionRequest (``object``, ``oldObject``, ``userInfo``, ...).
            coords: its coordinates.
            namespace_object: returns the cached Namespace of the request (called only when needed).
            now: the decision's time (aware); an exception whose ``expiresAt`` is not after it exempts nothing.
        """
        candidates = self.by_policy.get(policy)
        if not candidates:
            return None
        activation: list[Any] = []

        def shared() -> Any:
            if not activation:
                activation.append(_exception_activation(request, namespace_object))
            return activation[0]

        for exception in candidates:
            if exception.expired(now) or not exception.selects(request, coords, namespace_object):
                continue
            if _conditions_hold(exception, shared):
                return exception
        return None

    def apply(self, result: PolicyResult, request: Mapping[str, Any], coords: RequestCoordinates,
              namespace_object: Callable[[], dict[str, Any] | None], now: datetime.datetime) -> PolicyResult:
        """``result`` as an exception changes it: ``skip`` naming it, or (mode Audit) enforced as Audit only.

        Only a ``fail``, ``warn`` or ``error`` result can be exempted; others are returned unchanged, as is
        a result no exception exempts.
        """
        if result.result in (Result.PASS, Result.SKIP):
            return result
        exception = self.exempting(result.policy, request, coords, namespace_object, now)
        if exception is None:
            return result
        if exception.mode is ExceptionMode.AUDIT:
            return replace(result, message=f"{result.message} (admitted by {exception.label}, mode Audit)",
                           actions=frozenset({Action.AUDIT}), exception=exception.label)
        return PolicyResult(result.policy, Result.SKIP, f"exempted by {exception.label}: {exception.reason}",
                            exception=exception.label)


def exceptions_annotation(results: Iterable[PolicyResult]) -> str | None:
    """The ``exceptions`` audit annotation: a JSON list of ``{"policy", "exception", "result"}``, or None."""
    used = [{"policy": r.policy, "exception": r.exception, "result": str(r.result)} for r in results if r.exception]
    return json.dumps(used, sort_keys=True) if used else None



#: Receives ``(exception object, Ready condition)`` whenever an exception's condition is (re)computed.
ExceptionStatusSink = Callable[[dict[str, Any], dict[str, Any]], object]


class ExceptionCache:
    """The exceptions an informer (or a set of files) holds, compiled on their events; never per request.

    A client-go ``ResourceEventHandler`` for the PolicyException and ClusterPolicyException informers
    (structural typing, as :class:`webhook.policy.events.PolicyEventHandler`). :attr:`current` is an
    immutable :class:`ExceptionSet` replaced on each change, so the request path reads one attribute.

    Args:
        policy_exists: whether a policy with this label exists (for the ``UnknownPolicy`` condition).
        status_sink: called with ``(obj, condition)`` for each exception (the leader's status writer), or None.
        now: the clock conditions are computed with (aware UTC).
        compile: compiles one exception object (default :func:`compile_exception`; a cache also fed a
            foreign source's exceptions is given that format's dispatcher, as
            ``webhook.formats.kyverno.exceptions.compile_any_exception``).
    """

    #: Runs on the event loop (the informer's ``sync_calls``): it maintains what the request path reads.
    sync_calls = "loop"

    def __init__(self, policy_exists: Callable[[str], bool] = lambda _p: True,
                 status_sink: ExceptionStatusSink | None = None,
                 now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
                 compile: Callable[[dict[str, Any]], ExceptionCompileResult] = compile_exception) -> None:
        self.policy_exists = policy_exists
        self.compile = compile
        self.status_sink = status_sink
        self.now = now
        self.current = ExceptionSet()
        self._compiled: dict[tuple[str, str], tuple[dict[str, Any], ExceptionCompileResult]] = {}
        #: Called with the labels of the policies whose exemptions changed (an exception came, changed,
        #: went or expired): the background audit re-evaluates them, the expiry task re-plans.
        self.listeners: list[Callable[[frozenset[str]], object]] = []

    def _notify(self, policies: frozenset[str]) -> None:
        for listener in self.listeners:
            listener(policies)

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]  # two sources' PolicyException kinds differ
        return f"{obj.get('kind')}.{group}", key

    def _rebuild(self) -> None:
        self.current = ExceptionSet.of(r.exception for _, r in self._compiled.values() if r.exception is not None)

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool = False) -> None:
        """Compile the exception, publish the new set and report its condition."""
        key = self._key(obj)
        old = self._compiled.get(key)
        same = old is not None and old[0].get("spec") == obj.get("spec")
        result = old[1] if old is not None and same else self.compile(obj)
        self._compiled[key] = (obj, result)
        self._rebuild()
        self.report(obj, result)
        if not same:
            self._notify(result.policies | (old[1].policies if old is not None else frozenset()))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """As :meth:`on_add` (a status-only update is not recompiled)."""
        self.on_add(new)

    def on_delete(self, obj: Any) -> None:
        """Forget the exception (a tombstone's ``obj`` is its last state)."""
        final = obj if isinstance(obj, dict) else getattr(obj, "obj", None)
        gone = self._compiled.pop(self._key(final), None) if isinstance(final, dict) else None
        if gone is not None:
            self._rebuild()
            self._notify(gone[1].policies)

    def report(self, obj: dict[str, Any], result: ExceptionCompileResult) -> None:
        """Hand the exception's condition at this moment to the status sink (if any)."""
        if self.status_sink is not None:
            self.status_sink(obj, exception_condition(result, self.now(), self.policy_exists))

    def report_all(self) -> None:
        """Report every exception's condition again (the set of policies changed: ``UnknownPolicy`` may flip)."""
        for obj, result in list(self._compiled.values()):
            self.report(obj, result)

    def recheck(self) -> None:
        """Report every exception's condition again, and tell listeners of the policies of expired ones.

        Called when an ``expiresAt`` passes (the decision paths compare with their clock and need nothing).
        """
        now = self.now()
        expired: set[str] = set()
        for obj, result in list(self._compiled.values()):
            self.report(obj, result)
            if result.exception is not None and result.exception.expired(now):
                expired |= result.exception.policies
        if expired:
            self._notify(frozenset(expired))

    def next_expiry(self, after: datetime.datetime) -> datetime.datetime | None:
        """The earliest ``expiresAt`` later than ``after`` (when a condition turns ``Expired``), or None."""
        times = [r.exception.expires_at for _, r in self._compiled.values()
                 if r.exception is not None and r.exception.expires_at is not None and r.exception.expires_at > after]
        return min(times, default=None)

    def results(self) -> list[tuple[dict[str, Any], ExceptionCompileResult]]:
        """Every exception object with its compile result, by kind and key (lint, reports)."""
        return [self._compiled[k] for k in sorted(self._compiled)]
