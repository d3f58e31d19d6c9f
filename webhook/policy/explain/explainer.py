"""Explain a decision: evaluate a request as the engine does, recording why at every step (pure; no I/O).

Built on the engine's own structures and steps, never on a policy's YAML, so it explains whatever
policy the engine evaluates: matching (:func:`~webhook.policy.matching.rules_view`,
:func:`~webhook.policy.matching.rule_matches`, :func:`~webhook.policy.matching.selectors_match`), the
steps before any expression (:func:`~webhook.policy.engine.prepare.prepare`: readiness, deadline,
cache sync, params), the policy's activation and :class:`~webhook.policy.cel.scope.VariableScope`, and
the engine's evaluation of each program (:func:`~webhook.policy.engine.values.bool_value`) and of
failure messages. Where the engine stops early (the first false matchCondition, the first error),
the explanation goes on and shows every matchCondition, variable, validation and auditAnnotation, and
for a false or failed one the values of its top-level operands
(:mod:`webhook.policy.explain.operands`), each evaluated as a separate program in the same activation
and scope; the result it derives is the engine's (``tests/unit/policy/test_explain.py`` checks this
on the shipped policies and the Kyverno Pod Security corpus). For ``/mutate`` the result and patch are
the engine's own (:func:`~webhook.policy.engine.evaluate_mutating`, one policy at a time in chain order).

The engine's decision path is untouched: nothing here runs unless an explanation is asked for.
Explaining costs more than deciding (every program runs, and the operands of failed ones once more):
:func:`explain_work` is :data:`EXPLAIN_WORK_FACTOR` times the engine's estimate
(:mod:`webhook.policy.budget`), and with ``work_budget`` a request over it raises
:class:`~webhook.policy.budget.OverBudget` before anything is evaluated. Splitting an expression into
its operands and compiling each operand costs work the engine's estimate does not count (a 5,000-character
expression: ~35 ms and ~60 ms); with ``work_budget`` what is left of it after :func:`explain_work` pays for
them (:func:`operand_work`), and an operand it cannot pay for is listed without a value.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import jsonpatch

from webhook.policy.budget import OverBudget, estimated_work
from webhook.policy.cel.scope import VariableScope, reset_scope, set_current_scope
from webhook.policy.compiler import CompiledPolicy, CompileError, Program, compile_expression
from webhook.policy.engine.context import RequestContext
from webhook.policy.engine.mutate import evaluate_mutating, mutation_order
from webhook.policy.engine.outcome import EvaluationError, error_result, label, record
from webhook.policy.engine.prepare import Run, prepare
from webhook.policy.engine.validate import _message as failure_message  # the engine's fallback rules, one home
from webhook.policy.engine.values import bool_value, cel_type_name, value
from webhook.policy.explain.match import match_trace
from webhook.policy.explain.operands import MAX_OPERANDS, Role, top_level_operands
from webhook.policy.explain.shown import show
from webhook.policy.explain.trace import (
    AnnotationTrace,
    ConditionTrace,
    Evaluated,
    Explanation,
    OperandTrace,
    PolicyTrace,
    ValidationTrace,
    VariableTrace,
)
from webhook.policy.lookups import Lookups
from webhook.policy.matching import View
from webhook.policy.model import Reference
from webhook.policy.plan import Plan, build_plan
from webhook.policy.projection import Tree, params_reads
from webhook.policy.pruning import project
from webhook.policy.vocabulary import Endpoint, PolicyResult, Result

__all__ = ["COMPILE_WORK", "COMPILE_WORK_PER_CHAR", "EXPLAIN_WORK_FACTOR", "MAX_OPERANDS_PER_EXPLANATION",
           "MAX_SPLIT_PATCHES", "SPLIT_WORK_PER_CHAR", "explain", "explain_mutating", "explain_validating",
           "explain_work", "operand_work", "params_read"]

#: How much more an explanation may evaluate than the decision: every program once; the top-level operands of a
#: false or failed one, which are disjoint parts of it (at most the program again); and for an operand that is an
#: ``all()``, the filter of the elements failing its predicate (at most that operand again).
EXPLAIN_WORK_FACTOR = 3
_SPENT = "not evaluated: the explanation's work budget is spent"
#: cel-cpp's status codes, which the engine leaves out of its messages (as here for a variable's error).
_STATUS = re.compile(r"\b(?:INVALID_ARGUMENT|NOT_FOUND|OUT_OF_RANGE|UNKNOWN|INTERNAL): ")
#: Most operands one explanation evaluates (each is compiled and evaluated on its own); later ones are listed
#: without a value.
MAX_OPERANDS_PER_EXPLANATION = 64
#: Estimated work (~10 ns units) of splitting an expression into its top-level operands, per character: the
#: operand parser measured 160-800 per character on 160-4,600-character expressions.
SPLIT_WORK_PER_CHAR = 1_000
#: Estimated work of compiling one operand (parse, check, cost and projection analyses): a fixed part and one
#: per character; measured 1.3-2.1 ms for 160-300 characters, 360-1,900 per character up to 4,600.
COMPILE_WORK = 200_000
COMPILE_WORK_PER_CHAR = 2_000
#: Most policies of a mutating chain whose own patch is shown: each is found by evaluating the chain up to
#: that policy again (so the chain's semantics are kept exactly), which costs another chain evaluation.
MAX_SPLIT_PATCHES = 8


def explain_work(plan: Plan, ctx: RequestContext, endpoint: Endpoint) -> int:
    """The estimated work (~10 ns units, :mod:`webhook.policy.budget`) of explaining ``ctx``'s request.

    :data:`EXPLAIN_WORK_FACTOR` times the engine's estimate for ``validate``; for ``mutate`` also one more
    chain per policy whose patch is shown (at most :data:`MAX_SPLIT_PATCHES`).
    """
    factor = EXPLAIN_WORK_FACTOR
    if endpoint is Endpoint.MUTATE:
        factor += min(sum(1 for p, _view in plan.entries if p.mutating), MAX_SPLIT_PATCHES)
    return factor * estimated_work(plan, ctx, endpoint)


def operand_work(text: str, *, split: bool) -> int:
    """The estimated work (~10 ns units) of splitting ``text`` into operands (``split``) or of compiling it as one."""
    if split:
        return SPLIT_WORK_PER_CHAR * len(text)
    return COMPILE_WORK + COMPILE_WORK_PER_CHAR * len(text)


def params_read(policy: CompiledPolicy) -> Tree:
    """What the programs an explanation of ``policy`` evaluates can read of its ``params``.

    Every matchCondition, variable, validation (and messageExpression), auditAnnotation and mutation
    (:func:`webhook.policy.projection.params_reads`; cached by the programs' expressions).
    """
    programs = [*(p for _name, p in policy.match_conditions), *(v.expression for v in policy.validations),
                *(v.message_expression for v in policy.validations if v.message_expression is not None),
                *(p for _key, p in policy.audit_annotations), *(p for _name, p in policy.mutations)]
    variables = tuple((name, v.program.serialize()) for name, v in policy.variables.items())
    return params_reads(tuple(p.program.program.serialize() for p in programs) + tuple(v for _n, v in variables),
                        variables)


def _summary(request: dict[str, Any]) -> dict[str, Any]:
    kind = request.get("kind") or {}
    resource = request.get("resource") or {}
    out: dict[str, Any] = {
        "uid": request.get("uid", ""), "kind": kind.get("kind", ""), "namespace": request.get("namespace", ""),
        "name": request.get("name") or ((request.get("object") or request.get("oldObject") or {}).get("metadata")
                                        or {}).get("name", ""),
        "operation": request.get("operation", ""),
        "resource": {k: resource.get(k, "") for k in ("group", "version", "resource")},
        "username": (request.get("userInfo") or {}).get("username", ""),
    }
    if request.get("subResource"):
        out["subResource"] = request["subResource"]
    return out


class _Explainer:
    """Explains policies on one request (one :class:`RequestContext`, as the engine shares one)."""

    def __init__(self, ctx: RequestContext, operand_budget: int | None = None) -> None:
        self.ctx = ctx
        self.operands_left = MAX_OPERANDS_PER_EXPLANATION
        #: Work left for splitting expressions and compiling operands (:func:`operand_work`); None: no limit.
        self.operand_budget = operand_budget

    def afford(self, work: int) -> bool:
        """Charge ``work`` to the operand budget; False (nothing charged) when it is not left."""
        if self.operand_budget is None:
            return True
        if work > self.operand_budget:
            return False
        self.operand_budget -= work
        return True

    # ------------------------------------------------------------------ expressions

    def operands(self, text: str, activation: Any, known: frozenset[str],
                 references: tuple[Reference, ...]) -> tuple[list[OperandTrace], int]:
        """The top-level operands of ``text`` with their values (at most :data:`MAX_OPERANDS`), and how many more."""
        if not self.afford(operand_work(text, split=True)):
            return [OperandTrace(text, Role.OPERAND, note=_SPENT)], 0
        found = top_level_operands(text)
        out: list[OperandTrace] = []
        taken: str | None = None
        for operand in found[:MAX_OPERANDS]:
            trace = OperandTrace(operand.text, operand.role)
            out.append(trace)
            if operand.role in (Role.THEN, Role.ELSE) and taken is not None and operand.role != taken:
                trace.note = "branch not taken"
                continue
            if self.operands_left <= 0:
                trace.note = f"not evaluated: the explanation's {MAX_OPERANDS_PER_EXPLANATION} operands are shown"
                continue
            if not self.afford(operand_work(operand.source, split=False)):
                trace.note = _SPENT
                continue
            self.operands_left -= 1
            try:
                program = compile_expression(operand.source, "(operand)", expect=(), known_variables=known,
                                             references=references)
            except CompileError as e:
                trace.note = "not evaluable on its own: " + str(e).removeprefix("(operand): ")
                continue
            try:
                result = value(program, activation)
            except EvaluationError as e:
                trace.error = str(e).removeprefix("(operand): ")
                continue
            trace.value = show(result)
            if operand.role == Role.CONDITION and isinstance(result, bool):
                taken = Role.THEN if result else Role.ELSE
        return out, max(len(found) - MAX_OPERANDS, 0)

    def evaluate(self, program: Program, run: Run, *, expect_bool: str | None, known: frozenset[str],
                 explain_true: bool = False) -> tuple[Evaluated, Any]:
        """Evaluate one program as the engine does; the operands when it is false, fails or (``explain_true``) holds.

        Returns:
            The evaluation's trace and its value (None when it failed).
        """
        evaluated = Evaluated(program.path, program.source)
        result: Any = None
        try:
            if expect_bool is not None:
                result = bool_value(program, run.activation, expect_bool)
            else:
                result = value(program, run.activation)
        except EvaluationError as e:
            evaluated.error = str(e)
        else:
            evaluated.value = show(result)
        if evaluated.error is not None or result is False or explain_true:
            evaluated.operands, evaluated.more_operands = self.operands(
                program.source, run.activation, known, run.policy.spec.references)
        return evaluated, result

    # ------------------------------------------------------------------ one policy

    def start(self, policy: CompiledPolicy, endpoint: Endpoint) -> tuple[PolicyTrace, Run | None]:
        """Matching, the steps before any expression, and matchConditions.

        Returns:
            The trace so far and the run to evaluate the policy's programs in; None when the result is
            already decided (set on the trace).
        """
        name = label(policy)
        match = match_trace(policy.spec, self.ctx)
        trace = PolicyTrace(name, str(endpoint), str(Result.SKIP), match.reason, [], match)
        if not match.selected or match.view is None:
            return trace, None
        # The engine's steps before matchConditions (selectors, readiness, deadline, sync, params), then the
        # conditions here, each one evaluated and shown.
        prepared = prepare(dataclasses.replace(policy, match_conditions=()), View(match.view), self.ctx)
        if prepared is None:  # the selectors did not match after all: say what the engine did
            match.selected = False
            return trace, None
        if isinstance(prepared, PolicyResult):
            self.decided(trace, prepared)
            trace.steps.append(prepared.message)
            return trace, None
        run = dataclasses.replace(prepared, policy=policy)
        if policy.spec.param_ref is not None:
            # Only what the policy's programs read of its params is bound, so no value shown (params, a variable,
            # an operand) holds a field of the ConfigMap it does not read; its programs' results are the same.
            run.params = project(run.params, params_read(policy))
            trace.params = show(run.params)
        if not policy.match_conditions:
            return trace, run
        false: str | None = None
        first_error: str | None = None
        for cond_name, program in policy.match_conditions:
            evaluated, result = self.evaluate(program, run, expect_bool="a matchCondition", known=frozenset())
            trace.conditions.append(ConditionTrace(cond_name, evaluated))
            if result is False and false is None:
                false = cond_name
            elif evaluated.error is not None and first_error is None:
                first_error = evaluated.error
        if false is not None:
            # Any false skips the policy, even when another condition errored.
            self.decided(trace, PolicyResult(name, Result.SKIP, f"matchCondition {false} is false"))
            return trace, None
        if first_error is not None:
            self.decided(trace, error_result(policy, first_error))
            return trace, None
        return trace, run

    @staticmethod
    def decided(trace: PolicyTrace, result: PolicyResult) -> None:
        trace.result = str(result.result)
        trace.message = result.message
        trace.actions = sorted(str(a) for a in result.actions)

    def variables(self, trace: PolicyTrace, run: Run, scope: VariableScope) -> None:
        """Every variable's value, in declaration order (the engine evaluates them lazily, with the same values).

        ``scope`` is the policy's scope, installed by the caller; its cache keeps the values for the programs.
        """
        policy = run.policy
        known = frozenset(policy.variables)
        for i, variable in enumerate(policy.spec.variables):
            evaluated = Evaluated(f"spec.variables[{i}].expression", variable.expression)
            try:
                evaluated.value = show(scope.variable(variable.name))
            except (RuntimeError, KeyError) as e:
                evaluated.error = _STATUS.sub("", str(e).strip("'"))
                evaluated.operands, evaluated.more_operands = self.operands(
                    variable.expression, run.activation, known, policy.spec.references)
            trace.variables.append(VariableTrace(variable.name, evaluated))

    def validate(self, policy: CompiledPolicy) -> tuple[PolicyTrace, list[str]]:
        """One policy on ``/validate``; returns its trace and the message-fallback warnings the engine would add."""
        trace, run = self.start(policy, Endpoint.VALIDATE)
        if run is None:
            return trace, []
        scope = run.scope()
        token = set_current_scope(scope)
        warnings: list[str] = []  # as the engine: fallbacks of the validations evaluated before the first error
        try:
            self.variables(trace, run, scope)
            known = frozenset(policy.variables)
            failures: list[tuple[str, int, str]] = []
            first_error: str | None = None
            for validation in policy.validations:
                evaluated, result = self.evaluate(validation.expression, run, expect_bool="a validation expression",
                                                  known=known)
                if evaluated.error is not None:
                    trace.validations.append(ValidationTrace(str(Result.ERROR), evaluated))
                    first_error = first_error or evaluated.error
                    continue
                if result:
                    trace.validations.append(ValidationTrace(str(Result.PASS), evaluated))
                    continue
                fallbacks: list[str] = []
                message = failure_message(validation, run, fallbacks)
                trace.validations.append(ValidationTrace(str(Result.FAIL), evaluated, message,
                                                         fallbacks[0] if fallbacks else None))
                if first_error is None:
                    warnings += fallbacks
                    failures.append((run.prefix + message, validation.code, validation.reason))
            for key, program in policy.audit_annotations:
                evaluated, result = self.evaluate(program, run, expect_bool=None, known=known)
                if evaluated.error is None and result is not None and not isinstance(result, str):
                    evaluated.error = (f"{program.path}: must evaluate to string or null, but evaluated to "
                                       f"{cel_type_name(result)}")
                first_error = first_error or evaluated.error
                trace.annotations.append(AnnotationTrace(key, evaluated))
        finally:
            reset_scope(token)
        if first_error is not None:
            self.decided(trace, error_result(policy, run.prefix + first_error))
        elif failures:
            _, code, reason = failures[0]
            self.decided(trace, PolicyResult(label(policy), Result.FAIL, "; ".join(f[0] for f in failures),
                                             policy.spec.validation_actions, code=code, reason=reason))
        else:
            self.decided(trace, PolicyResult(label(policy), Result.PASS))
        return trace, warnings



def explain_validating(request: dict[str, Any], policies: Sequence[CompiledPolicy], lookups: Lookups, *,
                       deadline: float | None = None, work_budget: int | None = None) -> Explanation:
    """Explain the validating endpoint's decision on ``request``.

    Args:
        request: the AdmissionRequest as on the wire (never mutated).
        policies: the policies to explain, in evaluation order (the index's candidates, or any list: a
            policy whose rules do not select the request is explained as not selected). Policies without
            validations or auditAnnotations are left out, as the endpoint does not evaluate them.
        lookups: the caches.
        deadline: ``time.monotonic()`` after which remaining policies are errors (as the engine).
        work_budget: when set, the most :func:`explain_work` the request may have; above it nothing is
            evaluated and :class:`~webhook.policy.budget.OverBudget` is raised. What it leaves pays for
            splitting and compiling operands (:func:`operand_work`); operands beyond it have no value.

    Returns:
        The explanation; its ``allowed``, ``message``, ``warnings`` and the results of the selected
        policies are those :func:`~webhook.policy.engine.evaluate_validating` decides.

    Raises:
        OverBudget: only with ``work_budget``.
    """
    ctx = RequestContext(request, lookups, deadline=deadline)
    policies = [p for p in policies if p.validating]
    left = _check_budget(build_plan(ctx.coords, policies, validating=False), ctx, Endpoint.VALIDATE, work_budget)
    explainer = _Explainer(ctx, left)
    out = Explanation(_summary(request), str(Endpoint.VALIDATE), True)
    denials: list[PolicyResult] = []
    audit_failures: list[dict[str, object]] = []
    for policy in policies:
        trace, fallbacks = explainer.validate(policy)
        out.policies.append(trace)
        out.warnings += fallbacks
        if not trace.match.selected:
            continue
        result = PolicyResult(trace.policy, Result(trace.result), trace.message, frozenset(trace.actions))
        warned = len(out.warnings)
        record(result, out.warnings, audit_failures)
        trace.warnings += fallbacks + out.warnings[warned:]
        if result.denies:
            denials.append(result)
    if denials:
        out.allowed = False
        out.message = "; ".join(f"{r.policy}: {r.message}" for r in denials)
    return out


def explain_mutating(request: dict[str, Any], policies: Sequence[CompiledPolicy], lookups: Lookups, *,
                     deadline: float | None = None, work_budget: int | None = None) -> Explanation:
    """Explain the mutating endpoint on ``request``.

    Matching, matchConditions and variables are explained as for :func:`explain_validating`; each
    policy's result (``mutated``, ``no change``, an error), the decision and the patch are
    :func:`~webhook.policy.engine.evaluate_mutating`'s over the same policies, which chains them
    (tenants' AdmissionPolicies first) and stops at a denial. What each policy changed is the difference
    between the chain's object before and after it (the chain evaluated again up to that policy, for at
    most :data:`MAX_SPLIT_PATCHES` policies that mutated).

    Raises:
        OverBudget: only with ``work_budget``.
    """
    ctx = RequestContext(request, lookups, deadline=deadline)
    policies = [p for p in policies if p.mutating]
    left = _check_budget(build_plan(ctx.coords, policies, validating=False), ctx, Endpoint.MUTATE, work_budget)
    ordered = [p for p, _view in mutation_order([(p, View.OBJECT) for p in policies])]
    outcome = evaluate_mutating(request, ordered, lookups, deadline=deadline)
    results = {r.policy: r for r in outcome.results}
    patches = _split_patches(request, ordered, results, lookups, deadline) if outcome.allowed else {}
    explainer = _Explainer(ctx, left)
    out = Explanation(_summary(request), str(Endpoint.MUTATE), outcome.allowed, outcome.message,
                      list(outcome.warnings), patch=outcome.patch if outcome.patch else None)
    for policy in ordered:
        trace, run = explainer.start(policy, Endpoint.MUTATE)
        out.policies.append(trace)
        if run is None:
            continue
        if run.view is not View.OBJECT:
            trace.message = "mutations apply to the request's own object, not the Pod of a template"
            continue
        scope = run.scope()
        token = set_current_scope(scope)
        try:
            explainer.variables(trace, run, scope)
        finally:
            reset_scope(token)
        result = results.get(trace.policy)
        if result is None:
            trace.message = "not evaluated: an earlier policy denied the request"
            continue
        explainer.decided(trace, result)
        trace.patch = patches.get(trace.policy)
        trace.warnings += [w for w in outcome.warnings if w.startswith(f"{trace.policy}: ")]
    return out


def _split_patches(request: dict[str, Any], ordered: list[CompiledPolicy], results: dict[str, PolicyResult],
                   lookups: Lookups, deadline: float | None) -> dict[str, list[dict[str, Any]]]:
    """Each mutating policy's own JSONPatch: the chain up to it evaluated again, diffed with the chain before it."""
    original = request.get("object")
    changed = [i for i, p in enumerate(ordered) if (r := results.get(label(p))) is not None
               and r.result is Result.PASS and r.message == "mutated"]
    if not isinstance(original, dict) or len(changed) > MAX_SPLIT_PATCHES:
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    before: Any = original
    for i in changed:
        step = evaluate_mutating(request, ordered[:i + 1], lookups, deadline=deadline)
        after = jsonpatch.apply_patch(original, step.patch) if step.patch else original
        out[label(ordered[i])] = jsonpatch.make_patch(before, after).patch
        before = after
    return out


def explain(endpoint: Endpoint | str, request: dict[str, Any], policies: Sequence[CompiledPolicy], lookups: Lookups,
            *, deadline: float | None = None, work_budget: int | None = None) -> Explanation:
    """:func:`explain_validating` or :func:`explain_mutating`, by ``endpoint``.

    Raises:
        ValueError: ``endpoint`` is not ``validate`` or ``mutate``.
        OverBudget: only with ``work_budget``.
    """
    if Endpoint(endpoint) is Endpoint.VALIDATE:
        return explain_validating(request, policies, lookups, deadline=deadline, work_budget=work_budget)
    return explain_mutating(request, policies, lookups, deadline=deadline, work_budget=work_budget)


def _check_budget(plan: Plan, ctx: RequestContext, endpoint: Endpoint, budget: int | None) -> int | None:
    """The work ``budget`` leaves for operands after evaluating (None without a budget).

    Raises:
        OverBudget: :func:`explain_work` exceeds ``budget``.
    """
    if budget is None:
        return None
    work = explain_work(plan, ctx, endpoint)
    if work > budget:
        raise OverBudget(work, budget)
    return budget - work
