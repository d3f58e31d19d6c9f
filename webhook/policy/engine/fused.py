"""Fused programs: the plan's groups of policies evaluated as one CEL program, looked up in the decision memo.

A group whose program is ``true`` passes every policy in it at once; anything
else (``false``, an error, the iteration budget) sends them down the
per-policy path, so messages, warnings and failurePolicy are unchanged
(:mod:`webhook.policy.plan`, :mod:`webhook.policy.memo`).

A scoped group (one policy with params, references, matchConditions or auditAnnotations) is evaluated under
the scope :func:`~webhook.policy.engine.prepare.bind` binds for the per-policy path, so its program reads the
same ``params`` and cached objects; when ``bind`` would answer instead (a cache not synced, no params found),
the group is not evaluated and the per-policy path gives that answer.
"""

from __future__ import annotations

from time import perf_counter

from webhook.policy import lookups as caches
from webhook.policy.cel.scope import reset_scope, set_current_scope
from webhook.policy.engine.audit_annotations import add_policy_annotations
from webhook.policy.engine.context import RequestContext
from webhook.policy.engine.outcome import EvaluationError
from webhook.policy.engine.prepare import Run, bind
from webhook.policy.matching import View
from webhook.policy.memo import DecisionMemo, memo_key
from webhook.policy.plan import FusedGroup, Plan
from webhook.policy.vocabulary import PolicyResult

__all__ = ["fused_passes"]


def _pass(group: FusedGroup, passes: dict[int, PolicyResult]) -> None:
    passes.update(group.pass_map)


def _scoped_eval(group: FusedGroup, ctx: RequestContext, annotations: dict[str, str] | None) -> bool | None:
    """Evaluate a scoped group's program under its policy's scope; whether it passed, None when not evaluated.

    Past the request's deadline nothing is evaluated (``prepare`` answers the policy as an error, as it does
    every policy it reaches after the deadline). A pass carries the policy's auditAnnotations, evaluated in
    the same scope as ``_validate`` evaluates them (:mod:`webhook.policy.engine.validate`): only when each is
    a string or null are they added to ``annotations``; an error, a non-string or no ``annotations`` to add
    them to sends the policy down the per-policy path, which reports them as it does today.
    """
    policy = group.scoped
    assert policy is not None
    if (policy.audit_annotations and annotations is None) or ctx.past_deadline():
        return None  # past the deadline: the per-policy path answers it as an error, as for any policy
    run = bind(policy, group.view, ctx)
    if not isinstance(run, Run):
        return None  # an unsynced cache or no params: the per-policy path answers
    scope = run.scope()
    token = set_current_scope(scope)
    try:
        if group.program.eval(run.activation).plain_value() is not True:
            return False
        found: dict[str, str] = {}
        try:
            add_policy_annotations(policy, run.activation, found)
        except EvaluationError:
            return False  # an error or a non-string: the per-policy path reports it
    finally:
        reset_scope(token)
    if annotations is not None:
        annotations.update(found)
    return True


def _memo_unions(plan: Plan, ctx: RequestContext, memo: DecisionMemo, tried: dict[View, list[int]],
                 passes: dict[int, PolicyResult]) -> tuple[set[int], list[tuple[int, bytes, tuple[int, ...]]]]:
    """Look the memoized groups of each view up together, by one key over the union of their reads.

    Returns:
        The groups a hit answered (their passes added to ``passes``), and each union that missed as
        ``(union serial, key, its groups)``, to be remembered with the groups that pass.
    """
    answered: set[int] = set()
    missed: list[tuple[int, bytes, tuple[int, ...]]] = []
    for view, members in tried.items():
        union = plan.memo_union(tuple(members)) if len(members) > 1 else None
        if union is None:
            continue
        obj, old = ctx.view_objects(view, projected=False)
        key = memo_key(union[1], obj, old, ctx.request_variable, ctx.namespace_object())
        if key is None:
            continue
        mask = memo.passed_set(union[0], key)
        if mask is None:
            missed.append((union[0], key, tuple(members)))
            continue
        for bit, i in enumerate(members):
            if mask >> bit & 1:  # the others did not pass on this key: evaluated below
                _pass(plan.groups[i], passes)
                answered.add(i)
    return answered, missed


def fused_passes(plan: Plan, ctx: RequestContext, memo: DecisionMemo | None,
                 durations: dict[str, float] | None = None,
                 annotations: dict[str, str] | None = None) -> dict[int, PolicyResult]:
    """Pass results of every compiled fused group whose program is ``true`` (see :mod:`webhook.policy.plan`).

    With ``durations``, each group that passes adds its program's time, shared equally, to each policy it
    decided (keyed by label); a group that does not pass costs its policies nothing here (they are then
    evaluated, and timed, one by one).

    With a ``memo``, a group whose program's value depends only on ``object``/``oldObject`` and fields it
    selects of ``request``/``namespaceObject`` is looked up there first by exactly what it reads
    (:mod:`webhook.policy.memo`), and remembered when it evaluates ``true``. The groups of one view are first
    looked up together, by one key over the union of their reads: a hit answers every group that passed on it.

    A scoped group's pass adds its policy's auditAnnotations to ``annotations`` (without it, such a group is
    left to the per-policy path).
    """
    passes: dict[int, PolicyResult] = {}
    if not plan.groups or not ctx.is_synced(caches.POLICIES) or ctx.past_deadline():
        return passes
    tried: dict[View, list[int]] = {}  # memoized groups to look up, by view
    if memo is not None:
        for i, group in enumerate(plan.groups):
            if group.program is not None and group.memo is not None and memo.worth_trying(group.serial):
                tried.setdefault(group.view, []).append(i)
    answered, missed = _memo_unions(plan, ctx, memo, tried, passes) if memo is not None else (set(), [])
    keyed = {i for members in tried.values() for i in members}
    keys: dict[tuple[int, View], bytes | None] = {}  # groups reading the same fields share a spec and a key
    passed: set[int] = set()
    for i, group in enumerate(plan.groups):
        if group.program is None or i in answered:
            continue
        key = None
        if memo is not None and group.memo is not None and i in keyed:
            spec_view = (id(group.memo), group.view)
            if spec_view in keys:
                key = keys[spec_view]
            else:
                obj, old = ctx.view_objects(group.view, projected=False)
                key = keys[spec_view] = memo_key(group.memo, obj, old, ctx.request_variable, ctx.namespace_object())
            if key is not None and memo.passed(group.serial, key):
                _pass(group, passes)
                passed.add(i)
                continue
        if not group.worth_evaluating():
            continue  # it almost never passes: its policies are decided per policy without a first try here
        started = perf_counter()
        try:
            if group.scoped is not None:
                passed_now = _scoped_eval(group, ctx, annotations)
                if passed_now is None:
                    continue
            else:
                passed_now = group.program.eval(ctx.activation(group.view)).plain_value() is True
        except RuntimeError:  # the iteration budget: decide per policy
            group.record(False)
            continue
        group.record(passed_now)
        if passed_now:
            _pass(group, passes)
            passed.add(i)
            if durations is not None:
                share = (perf_counter() - started) / len(group.passes)
                for result in group.passes:
                    durations[result.policy] = durations.get(result.policy, 0.0) + share
            if memo is not None and key is not None:
                memo.remember(group.serial, key)
    if memo is not None:
        for serial, key, members in missed:
            mask = sum(1 << bit for bit, i in enumerate(members) if i in passed)
            if mask:
                memo.remember_set(serial, key, mask)
    return passes
