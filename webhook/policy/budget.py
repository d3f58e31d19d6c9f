"""What a request may cost to evaluate, and whether that is cheap enough for the event loop (pure; no I/O).

cel-expr-python holds the GIL while cel-cpp evaluates and offers no way to stop an evaluation, so
the only bound on a runaway expression is a process that can be killed. The server therefore
evaluates a review inline (on the event loop, no IPC) only when its plan's estimated work
(:mod:`webhook.policy.cel.cost`), at the sizes of what this request's programs actually read, is
under a budget (:data:`INLINE_WORK_BUDGET` by default); otherwise the engine raises
:class:`OverBudget` before evaluating anything, and the server evaluates the review in a worker
killed at the review's deadline, whose failure is answered per failurePolicy, as Kubernetes
answers a CEL cost error.

The sizes are those of the data the plan's programs can read: ``object``/``oldObject`` pruned by
the plan's projections (the same pruned copies the evaluation then binds), the ConfigMaps its
policies take as ``params``, and the request's Namespace: B their JSON bytes, C their largest list
or map, S their longest string. A plan whose work is under budget even with B, C and S all equal
to the request body's size is not measured at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.policy.cel import cost
from webhook.policy.vocabulary import Endpoint

if TYPE_CHECKING:
    from webhook.policy.engine.context import RequestContext
    from webhook.policy.plan import Plan

__all__ = ["INLINE_WORK_BUDGET", "InputSize", "OverBudget", "estimated_work", "measure"]

#: Most estimated work (~10 ns units, :mod:`webhook.policy.cel.cost`) a review may have and still be evaluated
#: on the event loop: 5·10⁷. The estimate is a worst case, far above what ordinary objects cost, so the budget
#: sits above what the shipped policies estimate on an ordinary Pod and below what quadratic work on a large
#: string or a large params list crossed with the object estimates (docs/performance.md has the figures).
INLINE_WORK_BUDGET = 50_000_000


class OverBudget(Exception):
    """The review's estimated work exceeds the budget it was evaluated with; nothing was evaluated.

    Attributes:
        work: the estimate (~10 ns units).
        budget: the budget it exceeded.
    """

    def __init__(self, work: int, budget: int) -> None:
        super().__init__(f"estimated evaluation cost {work:,} exceeds the inline budget of {budget:,}")
        self.work = work
        self.budget = budget


@dataclass(frozen=True, slots=True)
class InputSize:
    """How large the data a request's programs read is.

    Attributes:
        bytes: JSON bytes (B), approximated: strings and keys by length, scalars 8, containers 2.
        largest_collection: entries of the largest list or map (C; at least 1).
        longest_string: characters of the longest string or key (S; at least 1).
    """

    bytes: int = 0
    largest_collection: int = 1
    longest_string: int = 1


def measure(values: Iterable[Any]) -> InputSize:
    """The :class:`InputSize` of JSON-like ``values`` taken together (one walk, no serialization)."""
    total = 0
    largest = longest = 1
    stack = list(values)
    pop, extend = stack.pop, stack.extend
    while stack:
        v = pop()
        kind = v.__class__
        if kind is str:
            n = len(v)
            total += n + 2
            if n > longest:
                longest = n
        elif kind is dict or (kind is not list and isinstance(v, dict)):
            n = len(v)
            total += 2
            if n > largest:
                largest = n
            for key in v:
                n = len(key)
                total += n + 3
                if n > longest:
                    longest = n
            extend(v.values())
        elif kind is list or isinstance(v, list):
            n = len(v)
            total += 2
            if n > largest:
                largest = n
            extend(v)
        else:
            total += 8
    return InputSize(total, largest, longest)


def _params(plan: Plan, ctx: RequestContext) -> list[Any]:
    found: list[Any] = []
    for policy, _view in plan.entries:
        ref = policy.spec.param_ref
        if ref is None:
            continue
        if ref.name is not None:
            found.append(ctx.lookups.get_configmap(ref.namespace or ctx.coords.namespace or "default", ref.name))
        elif ref.selector is not None:
            found.extend(ctx.lookups.list_configmaps(ref.namespace, ref.selector))
    return found


def estimated_work(plan: Plan, ctx: RequestContext, endpoint: Endpoint, *, body_bytes: int = 0,
                   budget: int | None = None) -> int:
    """The plan's estimated work for the request of ``ctx`` on ``endpoint`` (~10 ns units).

    Args:
        plan: the index's plan for the request's coordinates; ``ctx`` projected by it.
        ctx: the request (its pruned views are computed here and reused by the evaluation).
        endpoint: which programs are evaluated.
        body_bytes: the request body's length, if known: when the plan's work is under ``budget`` even with
            B = C = S = ``body_bytes`` (plus what its params measure), the request is not measured and that
            bound is returned.
        budget: see ``body_bytes``.

    Returns:
        An upper estimate; 0 when the plan evaluates nothing.
    """
    work = plan.work if endpoint is Endpoint.VALIDATE else plan.mutation_work
    if not work:
        return 0
    params = _params(plan, ctx)
    if body_bytes and budget is not None:
        # The request's views are parts of its body; params come from the cache: measured (a ConfigMap is
        # small, the views of a large object are not: 10-18% of /validate's CPU when any policy read
        # params, issue 34).
        extra = measure(params) if params else InputSize()
        crude = cost.work_at(work, body_bytes + extra.bytes, max(body_bytes, extra.largest_collection),
                             max(body_bytes, extra.longest_string))
        if crude <= budget:
            return crude
    data: list[Any] = params
    for view in {v for _p, v in plan.entries}:
        data.extend(ctx.view_objects(view))
    data.append(ctx.namespace_object())
    size = measure(data)
    return cost.work_at(work, size.bytes, size.largest_collection, size.longest_string)
