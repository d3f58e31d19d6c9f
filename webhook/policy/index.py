"""The policy index: which compiled policies can match a request (pure; no I/O).

Maintained from the policy informer's add/update/delete events through
:meth:`PolicyIndex.upsert` / :meth:`PolicyIndex.remove`. Each Ready policy is
filed under every ``(apiGroup, resource, operation)`` its ``resourceRules``
name (wildcards filed under ``*``), plus the pod controllers' resources when
``autogen.podControllers`` applies to a pod rule, so that a request looks up
at most 12 buckets and never scans every policy. Exact matching (versions,
scope, subresources, excludes, selectors) is :mod:`webhook.policy.matching`'s.

A policy that is not Ready but whose match rules parse is filed too, carrying
its error, so that its failurePolicy answers what it selects; one whose match
rules are unreadable is kept in :meth:`PolicyIndex.states` only and counted
by :meth:`PolicyIndex.unmatchable`.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook.policy.compiler import CompiledPolicy, CompileResult, compile_policy
from webhook.policy.matching import resource_names, routed_rules
from webhook.policy.plan import Plan, PlanContext, build_plan
from webhook.policy.request import RequestCoordinates
from webhook.policy.vocabulary import PolicyKind
from webhook.policy.vocabulary import policy_key as vocabulary_policy_key

#: Plans kept (least recently used dropped first): one per distinct request coordinates.
MAX_PLANS = 4096

_Bucket = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class PolicyState:
    """What the index knows about one CR: the compiled policy (if Ready) and its condition."""

    key: str
    obj: dict[str, Any]
    result: CompileResult

    @property
    def ready(self) -> bool:
        """Whether the policy compiled (its Ready condition is True)."""
        return self.result.policy is not None


def policy_key(obj: dict[str, Any]) -> str:
    """The one identity of a policy CR: ``namespace/name`` for an AdmissionPolicy, ``name`` for a cluster one.

    The same string as client-go's ``MetaNamespaceKeyFunc`` and
    :attr:`PolicySpec.key`; used by the index, status, metrics and results.
    """
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") if obj.get("kind") == PolicyKind.NAMESPACED else None
    return vocabulary_policy_key(ns, str(meta.get("name")))


def _buckets(policy: CompiledPolicy) -> set[_Bucket]:
    # The pod controllers autogen adds are filed like any rule (their requests are evaluated on the template).
    return {(group, resource, op) for rule in routed_rules(policy.spec) for group in rule.api_groups
            for resource in rule.resources for op in rule.operations}


class PolicyIndex:
    """Compiled policies by (apiGroup, resource, operation).

    Single writer (the informer's handler task); readers on the same event
    loop see a consistent state because no method awaits.

    Args:
        on_pending: called (with no arguments) when a new plan has fused
            programs to compile or projections to compute, so the app can run
            :meth:`compile_pending` off the request path.
    """

    def __init__(self, *, on_pending: Callable[[], object] | None = None) -> None:
        self._states: dict[str, PolicyState] = {}
        self._buckets: dict[_Bucket, dict[str, CompiledPolicy]] = defaultdict(dict)
        self._filed: dict[str, set[_Bucket]] = {}
        self._plans: OrderedDict[RequestCoordinates, Plan] = OrderedDict()
        self._context = PlanContext()  # serials and memo specs shared by this index's plans
        self._pending: list[Plan] = []
        self.on_pending = on_pending

    def upsert(self, obj: dict[str, Any], compiled: CompileResult | None = None) -> PolicyState:
        """Compile ``obj`` and (re)file it; a broken policy is filed with its error if its rules parse.

        Args:
            obj: the policy object.
            compiled: ``compile_policy(obj)`` when the caller already has it (compiled off the event
                loop); None compiles here.

        Returns:
            The new :class:`PolicyState`, whose ``result.condition`` is the
            Ready condition to write to the CR's status.
        """
        key = policy_key(obj)
        result = compiled if compiled is not None else compile_policy(obj)
        self._forget_plans()
        self._unfile(key)
        state = PolicyState(key, obj, result)
        self._states[key] = state
        if result.matchable is not None:
            buckets = _buckets(result.matchable)
            for b in buckets:
                self._buckets[b][key] = result.matchable
            self._filed[key] = buckets
        return state

    def remove(self, key_or_obj: str | dict[str, Any]) -> None:
        """Forget a policy (by key or object); unknown keys are ignored."""
        key = key_or_obj if isinstance(key_or_obj, str) else policy_key(key_or_obj)
        self._forget_plans()
        self._unfile(key)
        self._states.pop(key, None)

    def _unfile(self, key: str) -> None:
        for b in self._filed.pop(key, ()):
            bucket = self._buckets.get(b)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._buckets[b]

    def state(self, key: str) -> PolicyState | None:
        """The state of one policy (Ready or not), or None."""
        return self._states.get(key)

    def states(self) -> list[PolicyState]:
        """Every known policy, sorted by key (for status and ``/readyz`` detail)."""
        return [self._states[k] for k in sorted(self._states)]

    def __len__(self) -> int:
        return len(self._states)

    def _forget_plans(self) -> None:
        self._plans.clear()
        self._pending.clear()

    def plan(self, coords: RequestCoordinates) -> Plan:
        """The evaluation plan for ``coords``, cached until any policy changes (see :mod:`webhook.policy.plan`).

        A new plan's projections are computed here (cheap, :meth:`Plan.project`); its fused programs are
        not: they are queued for :meth:`compile_pending`, and the per-policy path answers until then.
        """
        plan = self._plans.get(coords)
        if plan is not None:
            self._plans.move_to_end(coords)
            return plan
        plan = build_plan(coords, self.candidates(coords), context=self._context)
        plan.project()
        self._plans[coords] = plan
        if len(self._plans) > MAX_PLANS:
            self._plans.popitem(last=False)
        if plan.pending:
            self._pending.append(plan)
            if self.on_pending is not None:
                self.on_pending()
        return plan

    def compile_pending(self) -> bool:
        """Compile one queued fused program or a plan's projections (milliseconds at most); whether more remain."""
        while self._pending:
            if self._pending[0].compile_next():
                break
            self._pending.pop(0)
        while self._pending and not self._pending[0].pending:
            self._pending.pop(0)
        return bool(self._pending)

    def unmatchable(self) -> list[str]:
        """Keys of policies whose match rules cannot be read, so they select nothing (report loudly)."""
        return [k for k in sorted(self._states) if k not in self._filed]

    def candidates(self, coords: RequestCoordinates) -> list[CompiledPolicy]:
        """Policies (Ready or broken) that may select the request, in evaluation order: (name, namespace).

        Args:
            coords: the request's coordinates.
        """
        found: dict[str, CompiledPolicy] = {}
        for g in (coords.group, "*"):
            for r in resource_names(coords.resource, coords.sub_resource):
                for op in (coords.operation, "*"):
                    bucket = self._buckets.get((g, r, op))
                    if bucket:
                        found.update(bucket)
        return sorted(found.values(), key=lambda p: (p.spec.name, p.spec.namespace or ""))
