"""How the server runs the handler: inline on the event loop, or in worker processes.

An *evaluator* is ``async (endpoint, request, timeout) -> AdmissionDecision`` and never
raises for an evaluation failure. Both kinds apply the output limits
(:mod:`webhook.admission.limits`). A failed evaluation (deadline passed,
worker out of memory, patch too large) is answered by
:meth:`AdmissionHandler.engine_failed`: the strictest ``failurePolicy`` among
the candidate policies, as a VAP answers a CEL error or an exceeded cost
budget; ``Ignore`` everywhere admits with a warning, otherwise the answer is
``allowed: false`` with code 500.

* :class:`InlineEvaluator` calls the handler synchronously (0 overhead, no
  deadline: a costly review blocks the loop; ``tollgate test`` and unit tests).
* :class:`IsolatedEvaluator` sends the review to an :class:`EvaluationPool`.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson

from webhook.admission.handler import AdmissionDecision, AdmissionHandler
from webhook.admission.isolation.pool import EvaluationAborted, EvaluationPool
from webhook.admission.limits import OutputLimits, bound_decision
from webhook.admission.review import AdmissionRequest, ReviewError
from webhook.policy.budget import OverBudget
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.request import RequestCoordinates

log = logging.getLogger("tollgate.admission")


class Evaluator(Protocol):
    """``await evaluator(endpoint, request, timeout, size=n)`` → :class:`AdmissionDecision`.

    Never raises for a failed evaluation (it is answered per failurePolicy);
    :class:`ReviewError` (e.g. 503 before the policy caches synced) propagates.
    ``size`` is the request body's length in bytes.
    """

    def __call__(self, endpoint: str, request: AdmissionRequest, timeout: float, *,
                 size: int = 0) -> Awaitable[AdmissionDecision]:
        """Decide ``request`` on ``endpoint`` (``validate``/``mutate``) within ``timeout`` seconds."""
        ...


def candidates_for(handler: AdmissionHandler, request: AdmissionRequest) -> list[CompiledPolicy]:
    """The policies whose rules select ``request`` (the handler's plan for its coordinates), in evaluation order."""
    return [policy for policy, _view in handler.index.plan(RequestCoordinates.of(request)).entries]


def exception_sources(handler: AdmissionHandler, candidates: list[CompiledPolicy],
                      ) -> tuple[list[dict[str, Any]], datetime.datetime | None]:
    """The source objects of the exceptions naming a candidate, and the decision's time; ``([], None)`` for none.

    A worker compiles these itself (compiled CEL does not cross processes) and compares their ``expiresAt``
    with the server's time, so a review decided in a worker is exempted exactly as one decided inline.
    """
    exceptions = handler.exceptions() if handler.exceptions is not None else None
    if not exceptions:
        return [], None
    found: dict[int, dict[str, Any]] = {}
    for policy in candidates:
        for e in exceptions.by_policy.get(policy.key, ()):
            if e.source is not None:
                found[id(e)] = dict(e.source)
    if not found:
        return [], None
    now = handler.clock() if handler.clock is not None else datetime.datetime.now(datetime.UTC)
    return list(found.values()), now


def failed_decision(handler: AdmissionHandler, request: AdmissionRequest,
                    candidates: list[CompiledPolicy] | None = None) -> Callable[[Exception], AdmissionDecision]:
    """A callback answering a failed evaluation of ``request`` per the candidates' failurePolicy.

    This is the hook for the handler's owner: it calls
    ``AdmissionHandler.engine_failed(uid, candidates, exc)``, whose answer is
    ``allowed`` + warning when every candidate says ``Ignore`` and
    ``errored`` (``allowed: false``, code 500) otherwise.
    """
    def answer(exc: Exception) -> AdmissionDecision:
        # The candidates are looked up only when a failure is answered (every review builds this callback).
        found = candidates
        if found is None:
            try:
                found = candidates_for(handler, request)
            except Exception:
                log.exception("candidate lookup failed", extra={"uid": request.get("uid")})
                found = []  # engine_failed answers fail-closed without candidates
        return handler.engine_failed(request["uid"], found, exc)

    return answer


class InlineEvaluator:
    """Run the handler on the calling thread (the event loop); ``timeout`` is not enforced.

    With a ``work_budget`` and an ``overflow`` evaluator, a review whose estimated evaluation work
    (:mod:`webhook.policy.budget`) exceeds the budget is handed to ``overflow`` (the worker pool, where
    the deadline is enforced) before anything is evaluated here: cel-cpp cannot be interrupted, so
    only a review estimated cheap may run on the event loop.

    Args:
        handler: decides reviews.
        limits: output caps.
        work_budget: the most estimated work evaluated inline; None: no estimate, everything inline.
        overflow: where a review over the budget goes (required for the budget to apply).
        on_overflow: called with the endpoint of each review handed over (metrics).
    """

    def __init__(self, handler: AdmissionHandler, limits: OutputLimits | None = None, *,
                 work_budget: int | None = None, overflow: Evaluator | None = None,
                 on_overflow: Callable[[str], None] | None = None) -> None:
        self.handler = handler
        self.limits = limits or OutputLimits()
        self.work_budget = work_budget if overflow is not None else None
        self.overflow = overflow
        self._on_overflow = on_overflow

    async def __call__(self, endpoint: str, request: AdmissionRequest, timeout: float, *,
                       size: int = 0) -> AdmissionDecision:
        """Evaluate ``request`` now (blocking the loop for as long as the engine takes), or hand it over."""
        try:
            decision = self.handler.decide(endpoint, request, time.monotonic() + timeout,
                                           work_budget=self.work_budget, body_bytes=size)
        except ReviewError:
            raise  # e.g. 503 before the policy caches synced: answered by the server, not per failurePolicy
        except OverBudget as over:
            assert self.overflow is not None  # a budget is set only with an overflow evaluator
            log.info("review over the inline budget, evaluated in a worker",
                     extra={"uid": request["uid"], "endpoint": endpoint, "estimate": over.work})
            if self._on_overflow is not None:
                self._on_overflow(endpoint)
            return await self.overflow(endpoint, request, timeout, size=size)
        except Exception as e:
            log.exception("evaluation failed", extra={"uid": request["uid"], "endpoint": endpoint})
            return failed_decision(self.handler, request)(e)
        return bound_decision(decision, self.limits, failed_decision(self.handler, request))


class IsolatedEvaluator:
    """Run the handler in an :class:`EvaluationPool`, with the deadline enforced.

    The candidates are chosen here from ``handler.index``; workers read
    ``handler.lookups`` (looked up per call, so a swapped ``lookups`` takes effect).

    Args:
        handler: supplies ``index``, ``lookups`` and ``engine_failed``.
        pool: a started pool.
        on_abort: called with ``(endpoint, reason)`` for each aborted evaluation (metrics).
    """

    def __init__(self, handler: AdmissionHandler, pool: EvaluationPool,
                 on_abort: Callable[[str, str], None] | None = None) -> None:
        self.handler = handler
        self.pool = pool
        self._on_abort = on_abort
        self._tokens: dict[str, tuple[dict[str, Any], str]] = {}

    def _token(self, policy: CompiledPolicy) -> tuple[str, dict[str, Any]] | None:
        state = self.handler.index.state(policy.key)
        if state is None:
            return None
        cached = self._tokens.get(policy.key)
        if cached is not None and cached[0] is state.obj:
            return cached[1], state.obj
        token = hashlib.sha256(orjson.dumps(state.obj, option=orjson.OPT_SORT_KEYS)).hexdigest()
        # Holding the object keeps its identity unique while it is cached.
        self._tokens[policy.key] = (state.obj, token)
        return token, state.obj

    async def __call__(self, endpoint: str, request: AdmissionRequest, timeout: float, *,
                       size: int = 0) -> AdmissionDecision:
        """Evaluate ``request`` in a worker within ``timeout`` seconds."""
        try:
            candidates = candidates_for(self.handler, request)
        except Exception as e:
            log.exception("candidate lookup failed", extra={"uid": request["uid"], "endpoint": endpoint})
            return self.handler.engine_failed(request["uid"], [], e)
        entries = [entry for p in candidates if (entry := self._token(p)) is not None]
        if len(self._tokens) > 4 * len(self.handler.index) + 64:
            self._tokens.clear()
        try:
            sources, now = exception_sources(self.handler, candidates)
            return await self.pool.evaluate(endpoint, dict(request), entries, self.handler.lookups, timeout,
                                            exceptions=sources, now=now)
        except EvaluationAborted as e:
            log.warning("evaluation aborted", extra={"uid": request["uid"], "endpoint": endpoint, "reason": e.reason,
                                                     "detail": str(e)})
            if self._on_abort is not None:
                self._on_abort(endpoint, e.reason)
            return self.handler.engine_failed(request["uid"], candidates, e)


class SizeRoutedEvaluator:
    """Small reviews inline, large ones in the isolated pool.

    A typical review (a few KiB) is cheapest inline, where it pays no round
    trip to a worker; what can hold the event loop for long is a large object
    (thousands of containers). Bodies above ``threshold_bytes`` therefore go to
    the pool, where the deadline is enforced by killing the worker; the rest
    are evaluated inline.

    Args:
        inline: the evaluator for small bodies.
        isolated: the evaluator for bodies over ``threshold_bytes``.
        threshold_bytes: body size from which a review is isolated.
    """

    def __init__(self, inline: Evaluator, isolated: Evaluator, threshold_bytes: int) -> None:
        self.inline = inline
        self.isolated = isolated
        self.threshold_bytes = threshold_bytes

    def __call__(self, endpoint: str, request: AdmissionRequest, timeout: float, *,
                 size: int = 0) -> Awaitable[AdmissionDecision]:
        """Route by ``size`` (the body's length in bytes)."""
        target = self.isolated if size > self.threshold_bytes else self.inline
        return target(endpoint, request, timeout, size=size)
