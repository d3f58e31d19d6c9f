"""Evaluation plans: what to evaluate for one set of request coordinates, decided once (pure; no I/O).

A :class:`Plan` is built per :class:`RequestCoordinates` from the index's
candidates and cached by the :class:`~webhook.policy.index.PolicyIndex`
until a policy changes. It holds

* the static half of matching, done once: each candidate with the view its
  resource rules select (isolation, rules, excludes, autogen) — only label
  selectors, params and matchConditions remain per request;
* **fused groups**: the candidates that are Ready, have
  validations but no auditAnnotations, selectors, paramRef, references, matchConditions or
  ``authorizer`` checks (which ask the policy's own authorizer),
  and whose expressions are self-contained, are evaluated together as one CEL program
  ``(v1) && (v2) && ...`` per object view, with identical conjuncts shared (Deny
  policies together, in chunks; a Warn- or Audit-only policy alone).
  CEL's ``&&`` is true only when every operand is true, so a ``true`` result
  proves that each of those policies passes; then the prebuilt pass results
  are used. Anything else — ``false``, an error, a non-bool, the iteration
  budget — sends the group down the per-policy path, which decides exactly as
  if there were no plan (property-tested in ``tests/unit/policy/test_plan.py``);
* **scoped groups**: a Ready policy with validations that the above leaves out only for its ``paramRef``,
  ``spec.references``, ``matchConditions`` or ``auditAnnotations`` (no selectors, no ``authorizer``) is
  a group of its own, ``(m1) && ... && (v1) && ...`` over the texts its matchConditions' and validations'
  own programs were compiled from (``Program.runtime_source``: variables inlined where the compiler could,
  else through the scope, as ``params`` always is), evaluated under the scope the per-policy path
  binds (:func:`webhook.policy.engine.prepare.bind`: params, references). ``true`` proves every
  matchCondition true and every validation true, so the policy passes (its auditAnnotations are then
  evaluated in the same scope and carried with the pass); anything else, an unsynced cache or missing
  params send it down the per-policy path (a false matchCondition is a skip there, not a pass). Their
  passes are never memoized (they depend on params and cached objects).

Fused programs cost milliseconds to compile, so a new plan's groups start
uncompiled; :meth:`Plan.compile_next` compiles one small chunk, and the app
runs that from a background task (``PolicyIndex.compile_pending``) so the
event loop is never stalled for long. Until a chunk is compiled, its
policies take the per-policy path.

The index computes a new plan's **projections** at once (they are cheap): per object view,
what every program the validating endpoint may evaluate on it can read of
``object``/``oldObject`` (the union of the policies' ``reads``,
:mod:`webhook.policy.projection`), so the request's activation binds them
pruned to that and cel-expr-python converts only those fields. After the groups compile, one step per group works out
what keys its passes in the **decision memo** (:mod:`webhook.policy.memo`): the union of its
policies' ``reads`` and the ``request``/``namespaceObject`` fields the program selects.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.cel import cost
from webhook.policy.cel.env import environment
from webhook.policy.compiler import CompiledPolicy
from webhook.policy.matching import View, has_selectors, rules_view
from webhook.policy.memo import HitRatio, MemoSpec, memo_spec, union_spec
from webhook.policy.projection import Tree, union_reads
from webhook.policy.pruning import Projection
from webhook.policy.request import RequestCoordinates
from webhook.policy.vocabulary import Action, PolicyResult, Result

#: Characters of fused CEL per program. Compiling a chunk holds the event loop (cel-cpp parse and plan,
#: then Tollgate's Python passes over the tree), so a chunk is kept small enough that one background step
#: stays a few milliseconds, at the price of a few more programs per plan (docs/performance.md has the
#: figures).
CHUNK_CHARS = 1000


def fusable(policy: CompiledPolicy) -> bool:
    """Whether a policy's validations can be evaluated as a fused program (see the module docstring).

    Deny policies share programs. A Warn- or Audit-only policy is written to report what it finds, so it is
    often false, and one false conjunct sends its whole group down the per-policy path: each gets a
    program of its own (:func:`shares_programs`).
    """
    spec = policy.spec
    return (policy.error is None and bool(policy.validations) and not policy.audit_annotations
            and not policy.match_conditions and spec.param_ref is None and not has_selectors(spec)
            and not spec.references and not policy.reads_authorizer
            and all(v.expression.fusable_source is not None for v in policy.validations))


def scoped_fusable(policy: CompiledPolicy) -> bool:
    """Whether a policy is fused as a scoped group of its own (see the module docstring).

    Ready, with validations, no selectors and no ``authorizer``, and not :func:`fusable` (which would share
    programs): its params, references, matchConditions and auditAnnotations are bound per request.
    """
    return (policy.error is None and bool(policy.validations) and not has_selectors(policy.spec)
            and not policy.reads_authorizer and not fusable(policy))


#: FusedGroup serials: a new group never shares decision-memo entries with an earlier one.
class PlanContext:
    """What the plans of one index share: serials for the decision memo and its interned key specs.

    A serial names a fused group (or a union of groups) in a :class:`~webhook.policy.memo.DecisionMemo`
    and is never reused, so a policy edit never reuses an old group's passes. A serial is 64 bits: a
    random 32-bit prefix drawn per context (and drawn again if its 32-bit counter ever wraps) followed by
    the counter, so contexts that meet in one memo (several indexes in a test, say) do not collide, without
    a process-wide counter.
    """

    __slots__ = ("_next", "_prefix", "specs")

    def __init__(self) -> None:
        self._prefix = secrets.randbits(32) << 32
        self._next = 0
        #: Memo key specs by what they read (see :func:`webhook.policy.memo.memo_spec`).
        self.specs: dict[str, MemoSpec] = {}

    def serial(self) -> int:
        """A serial no context is expected to have returned before (64 bits)."""
        if self._next >= 1 << 32:
            self._prefix, self._next = secrets.randbits(32) << 32, 0
        self._next += 1
        return self._prefix | (self._next - 1)


#: Evaluations of a fused program before its pass ratio may turn its evaluation off (see
#: :meth:`FusedGroup.worth_evaluating`), and the window they are counted over.
MIN_EVALUATIONS = 64
#: A program passing less than this share of its evaluations is no longer evaluated...
MIN_PASS_RATIO = 0.05
#: ...except once every this many requests.
PROBE_EVERY = 64


@dataclass(slots=True)
class FusedGroup:
    """Policies evaluated as one program over one view.

    Attributes:
        view: the object view the program reads.
        positions: the policies' positions in :attr:`Plan.entries`.
        passes: the prebuilt pass result of each of those policies.
        source: the fused CEL text (identical conjuncts once).
        program: the compiled program, or None until compiled (or when it would
            not compile: then it stays on the per-policy path).
        compiled: whether compilation was attempted.
        memo: what keys the program's passes in the decision memo (:mod:`webhook.policy.memo`),
            or None when its passes are not memoized (or not analysed yet).
        serial: this group's identity in the decision memo (never reused by its :class:`PlanContext`).
        context: the plans' shared context (serials, interned memo specs).
        reads: the union of the group's policies' ``reads`` (what the program can read, or more).
        analysed: whether :meth:`analyse` ran.
        scoped: for a scoped group (see the module docstring), its one policy, whose scope (params,
            references, variables) is bound around each evaluation; never memoized. None otherwise.
    """

    view: View
    positions: tuple[int, ...]
    passes: tuple[PolicyResult, ...]
    source: str
    program: Any = None
    compiled: bool = False
    memo: MemoSpec | None = None
    serial: int = -1
    reads: dict[str, Tree] = field(default_factory=dict)
    analysed: bool = False
    context: PlanContext = field(default_factory=PlanContext)
    scoped: CompiledPolicy | None = None
    #: ``positions`` → ``passes``, built once: what a pass adds to the request's results.
    pass_map: dict[int, PolicyResult] = field(init=False, default_factory=dict)
    #: How often the program passed lately (see :meth:`worth_evaluating`).
    outcomes: HitRatio = field(default_factory=lambda: HitRatio(MIN_EVALUATIONS, MIN_PASS_RATIO, PROBE_EVERY))

    def worth_evaluating(self) -> bool:
        """Whether to evaluate the program for this request, judged by how often it passed before.

        A program that almost never passes (a Warn- or Audit-only policy reporting what it finds on every request,
        say) only costs an evaluation before its policies take the per-policy path anyway. After
        :data:`MIN_EVALUATIONS` evaluations (counted over a sliding window of as many), one passing less than
        :data:`MIN_PASS_RATIO` of the time is evaluated once every :data:`PROBE_EVERY` requests, so a workload
        that changes is noticed (:class:`~webhook.policy.memo.HitRatio`, as the decision memo decides its
        lookups). Skipping is always safe: every policy of a group not proven passing is decided on the
        per-policy path.
        """
        return self.outcomes.worth_trying()

    def record(self, passed: bool) -> None:
        """Count one evaluation of the program and whether it passed."""
        self.outcomes.count(passed)

    def __post_init__(self) -> None:
        if self.serial < 0:
            self.serial = self.context.serial()
        self.pass_map = dict(zip(self.positions, self.passes, strict=True))

    def compile(self) -> None:
        """Compile the fused program (once); a failure leaves ``program`` None."""
        if self.compiled:
            return
        self.compiled = True
        try:
            self.program = environment().compile(self.source, disable_check=True)
        except RuntimeError:  # e.g. the parser's nesting limit: stay on the per-policy path
            self.program = None

    def analyse(self) -> None:
        """Work out what keys the compiled program's passes in the decision memo (once; a step of its own)."""
        if self.analysed or not self.compiled:
            return
        self.analysed = True
        if self.program is not None and self.scoped is None:
            self.memo = memo_spec(self.program.program.serialize(), self.reads, self.context.specs)


@dataclass(slots=True)
class Plan:
    """What to evaluate for one set of coordinates.

    Attributes:
        coords: the coordinates it was built for.
        entries: ``(policy, view)`` for every candidate whose rules select the
            coordinates, in evaluation order (policy name, then namespace).
        groups: fused groups over some of those entries.
        fused: positions covered by a group.
        projections: per view, the pruning of ``object``/``oldObject`` for
            every program the validating endpoint may evaluate on it (a view's
            None binds them whole); None until computed (see the module docstring).
        mutation_projections: the same for the programs the mutating endpoint evaluates (matchConditions
            and mutations), computed in the same step.
        memo_unions: the decision memo's unions of this plan's groups, by their indices (see :meth:`memo_union`).
        work: estimated work of evaluating every entry on /validate (:mod:`webhook.policy.cel.cost`).
        mutation_work: the same on /mutate.
    """

    coords: RequestCoordinates
    entries: tuple[tuple[CompiledPolicy, View], ...]
    groups: tuple[FusedGroup, ...] = ()
    fused: frozenset[int] = field(default_factory=frozenset)
    projections: dict[View, Projection | None] | None = None
    mutation_projections: dict[View, Projection | None] | None = None
    memo_unions: dict[tuple[int, ...], tuple[int, MemoSpec] | None] = field(default_factory=dict)
    context: PlanContext = field(default_factory=PlanContext)
    work: cost.Work = field(init=False)
    mutation_work: cost.Work = field(init=False)

    def __post_init__(self) -> None:
        self.work = cost.total(*(p.work for p, _v in self.entries if p.validating))
        self.mutation_work = cost.total(*(p.mutation_work for p, _v in self.entries if p.mutating))

    def memo_union(self, indices: tuple[int, ...]) -> tuple[int, MemoSpec] | None:
        """A serial of its own and the union spec of the groups at ``indices`` (one view), built once per set.

        See :func:`webhook.policy.memo.union_spec`; None when the union keeps the object whole.
        """
        found = self.memo_unions.get(indices, ...)
        if found is ...:
            specs = [self.groups[i].memo for i in indices]
            spec = union_spec([m for m in specs if m is not None]) if all(specs) else None
            found = self.memo_unions[indices] = None if spec is None else (self.context.serial(), spec)
        return found

    @property
    def pending(self) -> bool:
        """Whether some group is not compiled or analysed yet, or the projections are not computed."""
        return any(not g.analysed for g in self.groups) or self.projections is None

    def project(self) -> None:
        """Compute the projections now, unless they are (a union of the policies' reads: ~0.2 ms for 32 policies).

        :meth:`PolicyIndex.plan` calls this when it builds a plan: until a plan is projected, its requests bind
        and measure whole objects, and the inline work estimate (:mod:`webhook.policy.budget`) of the shipped
        policies on a Pod of 3 containers was then over the budget, sending it to a worker.
        """
        if self.projections is None:
            self.projections = _projections(self.entries)
            self.mutation_projections = _projections(self.entries, mutating=True)

    def compile_next(self) -> bool:
        """One background step; returns whether it did any.

        Compute the projections (when :meth:`project` was not called), else compile a group, else analyse a
        group for the decision memo.
        """
        if self.projections is None:
            self.project()
            return True
        for g in self.groups:
            if not g.compiled:
                g.compile()
                return True
        for g in self.groups:
            if not g.analysed:
                g.analyse()
                return True
        return False

    def compile_all(self) -> Plan:
        """Compile every group now (offline use); returns ``self``."""
        while self.compile_next():
            pass
        return self


def _projections(entries: tuple[tuple[CompiledPolicy, View], ...], *,
                 mutating: bool = False) -> dict[View, Projection | None]:
    """Per view, the union of the ``reads`` of the policies /validate evaluates on it.

    With ``mutating``, the union of the ``mutation_reads`` of the policies /mutate evaluates.
    """
    by_view: dict[View, list[dict[str, Tree] | None]] = {}
    for policy, view in entries:
        if not (policy.mutating if mutating else policy.validating) or policy.error is not None:
            continue  # never evaluated on this endpoint, or evaluates no CEL
        by_view.setdefault(view, []).append(policy.mutation_reads if mutating else policy.reads)
    return {view: Projection.of(union_reads(reads)) for view, reads in by_view.items()}


def _conjunct(policy: CompiledPolicy) -> list[str]:
    return [f"({v.expression.fusable_source})" for v in policy.validations]


def _group(entries: tuple[tuple[CompiledPolicy, View], ...], view: View, chunk: list[int],
           conjuncts: dict[str, None], context: PlanContext) -> FusedGroup | None:
    if not chunk:
        return None
    # A group of one policy still pays: its validations are one program, and a pass skips the per-policy
    # steps. A policy longer than CHUNK_CHARS is a group of its own (its compile step is as long as the
    # policy's own compile was).
    return FusedGroup(view, tuple(chunk), tuple(PolicyResult(entries[i][0].spec.key, Result.PASS) for i in chunk),
                      " && ".join(conjuncts), reads=union_reads(entries[i][0].reads for i in chunk),
                      context=context)


def _scoped_group(entries: tuple[tuple[CompiledPolicy, View], ...], view: View, position: int,
                  context: PlanContext) -> FusedGroup:
    policy = entries[position][0]
    programs = [p for _name, p in policy.match_conditions] + [v.expression for v in policy.validations]
    return FusedGroup(view, (position,), (PolicyResult(policy.spec.key, Result.PASS),),
                      " && ".join(f"({p.runtime_source})" for p in programs), context=context, scoped=policy)


def shares_programs(policy: CompiledPolicy) -> bool:
    """Whether a fusable policy joins other policies' programs (Deny) or gets its own (Warn/Audit only)."""
    return Action.DENY in policy.spec.validation_actions


def _groups(entries: tuple[tuple[CompiledPolicy, View], ...], *, validating: bool,
            context: PlanContext) -> tuple[FusedGroup, ...]:
    groups: list[FusedGroup | None] = []
    for view in (View.OBJECT, View.POD_TEMPLATE):
        chunk: list[int] = []
        conjuncts: dict[str, None] = {}  # ordered set: identical expressions are evaluated once
        for i, (policy, v) in enumerate(entries):
            if v is not view or not validating or not policy.validating:
                continue
            if scoped_fusable(policy):
                groups.append(_scoped_group(entries, view, i, context))
                continue
            if not fusable(policy):
                continue
            if not shares_programs(policy):
                groups.append(_group(entries, view, [i], dict.fromkeys(_conjunct(policy)), context))
                continue
            new = [c for c in _conjunct(policy) if c not in conjuncts]
            if chunk and sum(map(len, conjuncts)) + sum(map(len, new)) > CHUNK_CHARS:
                groups.append(_group(entries, view, chunk, conjuncts, context))
                chunk, conjuncts, new = [], {}, _conjunct(policy)
            chunk.append(i)
            conjuncts.update(dict.fromkeys(new))
        groups.append(_group(entries, view, chunk, conjuncts, context))
    return tuple(g for g in groups if g is not None)


def build_plan(coords: RequestCoordinates, candidates: list[CompiledPolicy], *, validating: bool = True,
               context: PlanContext | None = None) -> Plan:
    """A plan for ``coords`` over ``candidates`` (uncompiled; see :meth:`Plan.compile_next`).

    Args:
        coords: the request's coordinates.
        candidates: the index's candidates for them, in evaluation order.
        validating: build fused groups for the validating endpoint (mutations are never fused).
        context: shared with the other plans that use the same decision memo (a new one when None: such
            a plan must not share a memo with others).
    """
    context = context or PlanContext()
    entries = tuple((p, v) for p in candidates if (v := rules_view(p.spec, coords)) is not None)
    groups = _groups(entries, validating=validating, context=context)
    return Plan(coords, entries, groups, frozenset(i for g in groups for i in g.positions), context=context)


__all__ = ["CHUNK_CHARS", "FusedGroup", "Plan", "PlanContext", "build_plan", "fusable", "scoped_fusable"]
