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
or map, S their longest string. The params and the Namespace are cached objects, shared and never
changed, so their sizes are measured once per object (by identity, :func:`cached_size`). A plan
whose work is under budget even at the views' largest sizes for the request body's length
(:func:`body_bound`) plus the cached objects' is not measured at all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.policy.pruning import json_size
from webhook.policy.vocabulary import Endpoint

if TYPE_CHECKING:
    from webhook.policy.engine.context import RequestContext
    from webhook.policy.plan import Plan

__all__ = ["INLINE_WORK_BUDGET", "InputSize", "OverBudget", "body_bound", "cached_size", "estimated_work", "measure"]

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
    """The :class:`InputSize` of JSON-like ``values`` taken together (one walk, no serialization).

    Counted as :func:`webhook.policy.pruning.json_size` counts (its one definition), which the pruners also
    count while copying a request's views (:meth:`webhook.policy.pruning.Projection.apply_sized`).
    """
    return InputSize(*json_size(values))


def _plus(a: InputSize, b: InputSize) -> InputSize:
    """The size of ``a``'s and ``b``'s data taken together (what :func:`measure` of both gives)."""
    return InputSize(a.bytes + b.bytes, max(a.largest_collection, b.largest_collection),
                     max(a.longest_string, b.longest_string))


class _Same:
    """A value hashed and compared by identity, so that a ``functools`` cache can key on a dict."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value


@functools.lru_cache(maxsize=256)
def _measured_once(key: _Same) -> InputSize:
    # The cache holds the key, hence the object: its id is not reused while the entry lives.
    return measure((key.value,))


def cached_size(objects: Iterable[Any]) -> InputSize:
    """The :class:`InputSize` of cached objects (params ConfigMaps, Namespaces) taken together.

    Each object is measured once and remembered by identity (the 256 most recently used): the objects of
    the informers' stores, as :class:`webhook.policy.lookups.Lookups` hands them out, are shared and never
    changed in place (an update is a new object; :mod:`webhook.caches.decoded` keeps one dict per stored
    version of the compact stores). None (a missing object) is a scalar.

    Args:
        objects: the cached objects; each must not be changed after it is measured.

    Returns:
        What :func:`measure` gives for ``objects``.
    """
    size = None
    for obj in objects:
        one = _measured_once(_Same(obj)) if obj.__class__ is dict else measure((obj,))
        size = one if size is None else _plus(size, one)
    return size or InputSize()


#: Most :func:`measure` bytes a view adds beyond its part of the body: the keys and literals of the Pod that
#: :func:`webhook.policy.engine.context.synthesize_pod` or ``ephemeral_as_pod`` builds around a template's or an
#: ``EphemeralContainers`` object's parts (about 100, and the workload's namespace, at most 63 characters).
_VIEW_OVERHEAD = 256


def body_bound(body_bytes: int, views: int) -> InputSize:
    """An :class:`InputSize` no smaller than what :func:`measure` gives for ``views`` views of one request.

    Every value of a view is part of the request body (``object`` and ``oldObject`` are disjoint parts; a
    pruned copy only drops keys and empties maps), and :func:`measure` counts each value at most 4 times its
    compact JSON bytes plus 4 (a scalar counts 8 and takes at least 1 byte and a separator or a bracket;
    strings, keys and containers count no more than their JSON), so one view is at most 4 times the body's
    bytes plus :data:`_VIEW_OVERHEAD`; views of the same request (the object and its template's Pod) overlap,
    so they add up. A list or map of n entries takes at least n bytes, a string of n characters at least n.

    Args:
        body_bytes: the length of the request body (the AdmissionReview's JSON).
        views: how many views the plan evaluates (each counted whole).

    Returns:
        ``InputSize(views × (4 × body_bytes + 256), body_bytes, body_bytes)``.
    """
    return InputSize(views * (4 * body_bytes + _VIEW_OVERHEAD), max(1, body_bytes), max(1, body_bytes))


@functools.lru_cache(maxsize=256)
def _work_function(work: _Same) -> Callable[[int, int, int], int]:
    """:func:`webhook.policy.cel.cost.work_at` of ``work`` as one compiled expression of B, C and S.

    A plan's work is a new dict when the plan is built and never changed; its terms are ints (the cost model's
    coefficients and exponents), written out as literals (a quarter of ``work_at``'s generator's time).
    """
    terms = []
    for (b, k, t), c in work.value.items():
        factors = [repr(int(c)), *(name if e == 1 else f"{name} ** {int(e)}"
                                   for name, e in (("B", b), ("C", k), ("S", t)) if e)]
        terms.append(" * ".join(factors))
    function: Callable[[int, int, int], int] = eval(  # the source is generated from ints only
        compile(f"lambda B, C, S: {' + '.join(terms) or '0'}", "<work estimate>", "eval"), {})
    return function


def _cached_inputs(plan: Plan, ctx: RequestContext) -> list[Any]:
    """The cached objects the plan's programs can read: its policies' params and the request's Namespace."""
    found: list[Any] = []
    for policy, _view in plan.entries:
        ref = policy.spec.param_ref
        if ref is None:
            continue
        if ref.name is not None:
            found.append(ctx.lookups.get_configmap(ref.namespace or ctx.coords.namespace or "default", ref.name))
        elif ref.selector is not None:
            found.extend(ctx.lookups.list_configmaps(ref.namespace, ref.selector))
    found.append(ctx.namespace_object())
    return found


def estimated_work(plan: Plan, ctx: RequestContext, endpoint: Endpoint, *, body_bytes: int = 0,
                   budget: int | None = None) -> int:
    """The plan's estimated work for the request of ``ctx`` on ``endpoint`` (~10 ns units).

    Args:
        plan: the index's plan for the request's coordinates; ``ctx`` projected by it.
        ctx: the request (its pruned views are computed here and reused by the evaluation).
        endpoint: which programs are evaluated.
        body_bytes: the request body's length, if known: when the plan's work is under ``budget`` even at
            :func:`body_bound`'s sizes for the views (plus the params' and the Namespace's), the views are
            not measured and that bound is returned.
        budget: see ``body_bytes``.

    Returns:
        An upper estimate; 0 when the plan evaluates nothing.
    """
    work = plan.work if endpoint is Endpoint.VALIDATE else plan.mutation_work
    if not work:
        return 0
    cached = cached_size(_cached_inputs(plan, ctx))
    views = {v for _p, v in plan.entries}
    work_of = _work_function(_Same(work))
    if body_bytes and budget is not None and not all(ctx.is_projected(v) for v in views):
        # The request's views are parts of its body; the params and the Namespace come from the cache (a
        # Namespace with a long annotation must not hide behind a small Pod). A view kept whole would be walked
        # to be measured (a projected view's size comes with its pruning, which the evaluation binds anyway).
        crude = _plus(body_bound(body_bytes, len(views)), cached)
        bound = work_of(crude.bytes, crude.largest_collection, crude.longest_string)
        if bound <= budget:
            return bound
    total, largest, longest = cached.bytes, cached.largest_collection, cached.longest_string
    for view in views:
        b, c, s = ctx.view_size(view)
        total += b
        if c > largest:
            largest = c
        if s > longest:
            longest = s
    return work_of(total, largest, longest)
