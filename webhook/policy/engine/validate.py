"""The validating endpoint: validations, messages, audit annotations; one decision per request.

As the API server's ValidatingAdmissionPolicy validator: ``true`` passes,
``false`` fails with the message (``messageExpression`` → ``message`` →
``failed expression: <expr>``; a messageExpression that errors or yields a
non-string, blank, multi-line or over-long value falls back, and the fallback
is reported as a warning); a non-bool result is an evaluation error, handled
per ``failurePolicy`` (:mod:`webhook.policy.engine.outcome`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any

from webhook.policy.budget import OverBudget, estimated_work
from webhook.policy.cel.scope import reset_scope, set_current_scope
from webhook.policy.compiler import CompiledPolicy, CompiledValidation
from webhook.policy.engine.audit_annotations import add_policy_annotations
from webhook.policy.engine.context import RequestContext
from webhook.policy.engine.fused import fused_passes
from webhook.policy.engine.outcome import (
    EvaluationError,
    ValidationOutcome,
    add_audit_failures,
    error_result,
    label,
    record,
)
from webhook.policy.engine.prepare import Run, prepare
from webhook.policy.engine.values import bool_value, cel_type_name, value
from webhook.policy.lookups import Lookups
from webhook.policy.memo import DecisionMemo
from webhook.policy.plan import Plan, build_plan
from webhook.policy.vocabulary import Endpoint, PolicyResult, Result

if TYPE_CHECKING:
    from webhook.policy.exceptions import ExceptionSet

__all__ = ["MAX_MESSAGE_BYTES", "check_budget", "evaluate_validating", "plan_of"]

#: Longest messageExpression result used as a message (the API server's
#: ``MaxEvaluatedMessageExpressionSizeBytes``, 5 KiB); longer ones fall back.
MAX_MESSAGE_BYTES = 5 * 1024


def check_budget(plan: Plan, ctx: RequestContext, endpoint: Endpoint, budget: int | None, body_bytes: int) -> None:
    """Raise :class:`OverBudget` when ``budget`` is set and the request's estimated work exceeds it."""
    if budget is None:
        return
    work = estimated_work(plan, ctx, endpoint, body_bytes=body_bytes, budget=budget)
    if work > budget:
        raise OverBudget(work, budget)


def plan_of(policies: Sequence[CompiledPolicy] | Plan, ctx: RequestContext) -> Plan:
    """``policies`` when already a plan, else the plan built for the request's coordinates."""
    return policies if isinstance(policies, Plan) else build_plan(ctx.coords, list(policies))


def _message(validation: CompiledValidation, run: Run, warnings: list[str]) -> str:
    """The failure message of a false validation, with the validator's fallbacks."""
    program = validation.message_expression
    if program is not None:
        problem = None
        try:
            computed = value(program, run.activation)
        except EvaluationError as e:
            problem = str(e)
        else:
            if not isinstance(computed, str):
                problem = f"{program.path}: must evaluate to string, but evaluated to {cel_type_name(computed)}"
            elif "\n" in computed.strip():
                problem = f"{program.path}: the message contains a line break"
            elif len(computed.strip().encode()) > MAX_MESSAGE_BYTES:
                problem = f"{program.path}: the message is longer than {MAX_MESSAGE_BYTES} bytes"
            elif computed.strip():
                return computed.strip()
        if problem is not None:
            warnings.append(f"{label(run.policy)}: {problem}; used the fallback message")
    if validation.message and validation.message.strip():
        return validation.message.strip()
    return "failed expression: " + validation.expression.source.strip()


def _validate(run: Run, warnings: list[str], annotations: dict[str, str]) -> PolicyResult:
    policy = run.policy
    name = label(policy)
    failures: list[tuple[str, int, str]] = []
    token = set_current_scope(run.scope())
    try:
        for validation in policy.validations:
            if bool_value(validation.expression, run.activation, "a validation expression"):
                continue
            failures.append((run.prefix + _message(validation, run, warnings), validation.code, validation.reason))
        add_policy_annotations(policy, run.activation, annotations)
    except EvaluationError as e:
        return error_result(policy, run.prefix + str(e))
    finally:
        reset_scope(token)
    if not failures:
        return PolicyResult(name, Result.PASS)
    _, code, reason = failures[0]
    return PolicyResult(name, Result.FAIL, "; ".join(f[0] for f in failures), policy.spec.validation_actions,
                        code=code, reason=reason)


def evaluate_validating(request: dict[str, Any], policies: Sequence[CompiledPolicy] | Plan, lookups: Lookups, *,
                        deadline: float | None = None, memo: DecisionMemo | None = None,
                        work_budget: int | None = None, body_bytes: int = 0,
                        exceptions: ExceptionSet | None = None,
                        now: Callable[[], datetime.datetime] | None = None) -> ValidationOutcome:
    """Decide an AdmissionRequest on the validating endpoint.

    Args:
        request: the ``AdmissionRequest`` as on the wire (camelCase: ``uid``,
            ``kind``, ``resource``, ``subResource``, ``namespace``,
            ``operation``, ``userInfo``, ``object``, ``oldObject``, ...). Never mutated.
        policies: the index's plan for the request's coordinates
            (:meth:`PolicyIndex.plan`), or candidate policies in evaluation
            order (name order; broken ones included), evaluated one by one.
        lookups: the caches.
        deadline: ``time.monotonic()`` after which remaining policies are errors.
        memo: the decision memo fused groups' passes are looked up in and remembered in; None for none.
        work_budget: when set, the most estimated work (:mod:`webhook.policy.budget`) the request may have;
            above it nothing is evaluated and :class:`~webhook.policy.budget.OverBudget` is raised.
        body_bytes: the request body's length (lets a clearly cheap plan skip measuring; see ``work_budget``).
        exceptions: the Ready PolicyExceptions (:mod:`webhook.policy.exceptions`); a policy's ``fail``,
            ``warn`` or ``error`` result an exception exempts becomes ``skip`` naming it (or, mode Audit,
            is enforced as Audit only). None or empty: nothing more is asked.
        now: the clock exceptions' ``expiresAt`` is compared with (aware UTC), read at most once, when an
            exception names a policy that did not pass; default: the system clock.

    Returns:
        The decision; a denial's message joins every denying policy's message
        as ``"<policy>: <message>"``.

    Raises:
        OverBudget: only with ``work_budget``.
    """
    ctx = RequestContext(request, lookups, deadline=deadline)
    plan = plan_of(policies, ctx)
    ctx.project(plan.projections)
    check_budget(plan, ctx, Endpoint.VALIDATE, work_budget, body_bytes)
    out = ValidationOutcome()
    denials: list[PolicyResult] = []
    audit_failures: list[dict[str, object]] = []
    durations = out.durations
    passes = fused_passes(plan, ctx, memo, durations, out.audit_annotations)
    results = out.results
    decided_at: datetime.datetime | None = None
    for position, (policy, view) in enumerate(plan.entries):
        result: PolicyResult | None = passes.get(position)
        if result is not None:  # a prebuilt pass: nothing to record, never denies
            results.append(result)
            continue
        if not policy.validating:
            continue
        started = perf_counter()
        prepared = prepare(policy, view, ctx)
        if prepared is None:
            continue
        result = prepared if isinstance(prepared, PolicyResult) else _validate(prepared, out.warnings,
                                                                               out.audit_annotations)
        durations[result.policy] = durations.get(result.policy, 0.0) + perf_counter() - started
        if (exceptions and result.result is not Result.PASS and result.result is not Result.SKIP
                and result.policy in exceptions.by_policy):
            if decided_at is None:
                decided_at = now() if now is not None else datetime.datetime.now(datetime.UTC)
            result = exceptions.apply(result, ctx.request, ctx.coords, ctx.namespace_object, decided_at)
        results.append(result)
        record(result, out.warnings, audit_failures)
        if result.denies:
            denials.append(result)
    add_audit_failures(out.audit_annotations, audit_failures)
    if denials:
        out.allowed = False
        out.code, out.reason = denials[0].code, denials[0].reason
        out.message = "; ".join(f"{r.policy}: {r.message}" for r in denials)
    return out
