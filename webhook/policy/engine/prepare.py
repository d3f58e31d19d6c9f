"""The steps before a policy's expressions run: selectors, readiness, deadline, sync, params, matchConditions.

As the API server's ValidatingAdmissionPolicy dispatcher: ``matchConditions``
are evaluated first and any ``false`` skips the policy, otherwise any error
(a non-bool result included) is an evaluation error; ``onUnsynced`` answers for
a policy whose caches have not synced; ``paramRef`` is read from the
ConfigMap cache, and no params under ``parameterNotFoundAction: Deny`` is an
error subject to failurePolicy; ``autogen.podControllers`` binds ``object`` to
a Pod built from a workload's template, and messages are prefixed with the
template path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.policy import lookups as caches
from webhook.policy.cel.scope import VariableScope, reset_scope, set_current_scope
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.engine.authorization import PolicyAuthorizer
from webhook.policy.engine.context import RequestContext
from webhook.policy.engine.outcome import EvaluationError, error_result, label
from webhook.policy.engine.references import References
from webhook.policy.engine.values import bool_value
from webhook.policy.matching import View, has_selectors, selectors_match
from webhook.policy.model import RBAC_REFERENCES
from webhook.policy.vocabulary import Action, OnUnsynced, ParameterNotFoundAction, PolicyResult, Result

__all__ = ["Run", "bind", "params_of", "prepare"]


def _unsynced_cache(policy: CompiledPolicy, ctx: RequestContext) -> str | None:
    needed = [caches.POLICIES]
    if not policy.spec.namespace_selector.empty:
        needed.append(caches.NAMESPACES)
    if policy.spec.param_ref is not None:
        needed.append(caches.CONFIGMAPS)
    needed.extend(r.cache for r in policy.spec.references)
    if policy.reads_authorizer:
        needed.extend(r.cache for r in RBAC_REFERENCES)
    for cache in needed:
        if not ctx.is_synced(cache):
            return cache
    return None


_NOT_FOUND = object()


def params_of(policy: CompiledPolicy, ctx: RequestContext) -> Any:
    """The policy's ``params`` from the ConfigMap cache (paramRef by name or selector).

    Returns:
        None without a paramRef; the ConfigMap (by name; the request's namespace when
        ``paramRef.namespace`` is empty), or the list of selected ConfigMaps; or the
        ``_NOT_FOUND`` sentinel when nothing is cached, which ``parameterNotFoundAction`` decides.
    """
    ref = policy.spec.param_ref
    if ref is None:
        return None
    if ref.name is not None:
        ns = ref.namespace or ctx.coords.namespace or "default"
        cm = ctx.lookups.get_configmap(ns, ref.name)
        return _NOT_FOUND if cm is None else cm
    assert ref.selector is not None
    found = ctx.lookups.list_configmaps(ref.namespace, ref.selector)
    return found if found else _NOT_FOUND


@dataclass(slots=True)
class Run:
    """One selected policy, ready to evaluate: its view, params, activation and references."""

    policy: CompiledPolicy
    view: View
    params: Any
    activation: Any
    prefix: str
    references: References | None = None
    authorizer: PolicyAuthorizer | None = None

    def scope(self, activation: Any | None = None) -> VariableScope:
        """The policy's variables, params, references and authorizer over ``activation`` (default: the run's)."""
        return VariableScope(self.policy.variables, self.activation if activation is None else activation,
                             self.params, self.references, self.authorizer)


def prepare(policy: CompiledPolicy, view: View, ctx: RequestContext) -> Run | PolicyResult | None:
    """Selectors, then the steps before validation: broken policy, deadline, sync, params, matchConditions.

    Args:
        policy: a candidate whose resource rules select the request (see :class:`Plan`).
        view: the view those rules chose.
        ctx: the request.

    Returns:
        A run to evaluate, a final result, or None when the policy does not apply.
    """
    if has_selectors(policy.spec) and not selectors_match(policy.spec, ctx.coords, ctx.request,
                                                          ctx.namespace_object):
        return None
    name = label(policy)
    if policy.error is not None:
        return error_result(policy, f"policy is not ready: {policy.error}")
    if ctx.past_deadline():
        return error_result(policy, "request deadline exceeded before the policy was evaluated")
    bound = bind(policy, view, ctx)
    if isinstance(bound, PolicyResult):
        return bound
    run, activation = bound, bound.activation
    if policy.match_conditions:
        token = set_current_scope(run.scope())
        try:
            first_error: str | None = None
            for cond_name, program in policy.match_conditions:
                try:
                    if not bool_value(program, activation, "a matchCondition"):
                        # Any false skips the policy, even when another condition errored.
                        return PolicyResult(name, Result.SKIP, f"matchCondition {cond_name} is false")
                except EvaluationError as e:
                    first_error = first_error or str(e)
            if first_error is not None:
                return error_result(policy, first_error)
        finally:
            reset_scope(token)
    return run


def bind(policy: CompiledPolicy, view: View, ctx: RequestContext) -> Run | PolicyResult:
    """The steps between readiness and matchConditions: the caches' sync, params, and the policy's scope.

    The one place a policy's ``params``, ``spec.references`` and authorizer are bound for an evaluation: both
    :func:`prepare` (the per-policy path) and a scoped fused group (:mod:`webhook.policy.engine.fused`) bind them
    here, so a fused program sees exactly what the policy's own programs see.

    Args:
        policy: a Ready candidate whose rules and selectors select the request.
        view: the view those rules chose.
        ctx: the request.

    Returns:
        The run (its activation, params, references, authorizer, message prefix), or the final result when a
        cache the policy reads has not synced (``onUnsynced``) or no params were found
        (``parameterNotFoundAction``: Deny is an error subject to failurePolicy, as the API server's
        ``validating/dispatcher.go``).
    """
    name = label(policy)
    cache = _unsynced_cache(policy, ctx)
    if cache is not None:
        action = policy.spec.on_unsynced
        msg = f"cache {cache} has not synced (onUnsynced: {action})"
        if action is OnUnsynced.DENY:
            return PolicyResult(name, Result.FAIL, msg, frozenset({Action.DENY}))
        return PolicyResult(name, Result.SKIP, msg,
                            frozenset({Action.WARN}) if action is OnUnsynced.WARN else frozenset())
    params = params_of(policy, ctx)
    if params is _NOT_FOUND:
        ref = policy.spec.param_ref
        assert ref is not None
        what = f"ConfigMap {ref.name}" if ref.name else "any ConfigMap selected by paramRef.selector"
        msg = f"spec.paramRef: no params found: {what}"
        if ref.parameter_not_found_action is ParameterNotFoundAction.DENY:
            # VAP: "no matched parameters will be subject to the failurePolicy of the policy".
            return error_result(policy, msg)
        return PolicyResult(name, Result.SKIP, msg)
    activation = ctx.activation(view)
    prefix = ".".join(ctx.coords.template or ()) + ": " if view is View.POD_TEMPLATE else ""
    return Run(policy, view, params, activation, prefix,
               References(policy, ctx.lookups) if policy.spec.references else None,
               PolicyAuthorizer(policy.spec, ctx.lookups) if policy.reads_authorizer else None)
