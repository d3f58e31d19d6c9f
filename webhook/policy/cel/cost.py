"""Static estimates of CEL expressions: the largest value built and the work done, as polynomials (pure).

cel-expr-python 0.1.3 exposes no cost estimator and no runtime cost tracking; its only runtime
limit is cel-cpp's 10,000 comprehension iterations per evaluation, and it cannot interrupt a
native operation (nor release the GIL while it runs). Kubernetes bounds evaluation twice: an
estimated cost when a policy is written and a runtime cost budget. Tollgate bounds it with two
static estimates over a checked AST (:mod:`webhook.policy.cel.ast`), each a polynomial in ``N``,
the size of the data the expression reads (JSON bytes of the projected ``object``/``oldObject``,
``params``, ``namespaceObject``; every list length and string length is ≤ N):

* **size** — the largest value built. An expression is rejected when some value may grow faster
  than linearly (degree ≥ 2: ``s.replace('a', s)``) or by more than :data:`MAX_GROWTH` × N
  (26 nested ``cel.bind(x, x + x, ...)``: 2²⁶ × N).
* **work** — evaluation steps, in units of about 10 ns of cel-cpp time (measured: a
  comprehension iteration ~8 units, a list-building ``map``/``filter`` element ~130, a
  ``sets.contains`` pair ~0.6, a Python library call ~600-1,200), as a polynomial in B (the
  input's bytes) and C (the length of its largest list or map): a comprehension over the
  input's own lists (``object.spec.containers``, and ``map``/``filter`` of them) iterates at
  most C times, one over a derived list (``split``, ``findAll``, ``lists.range`` of a non-literal)
  at most B times; the elements of one list are disjoint parts of it, so per-element string work
  sums to B, not B × C. Literals count exactly: ``lists.range(50000)`` is 50,000 elements
  whatever the input. A policy whose work with no input (the part no input can shrink) exceeds
  :data:`MAX_STATIC_WORK` is refused at compile time; the server evaluates a request inline only
  when its plan's work at the request's actual B and C is under its inline budget
  (:mod:`webhook.policy.budget`), else in a worker process killed at the deadline.

Neither bound is exact: work per comprehension iteration assumes each element derives from a
distinct part of the input, and cel-cpp's iteration budget caps iterations at 10,000 anyway.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from webhook.policy.cel.ast import CheckedAst, Node

#: Largest degree-1 growth accepted: a value may be at most this many times the input size.
MAX_GROWTH = 256

#: Most work a policy may do whatever its input (the constant term of its work, in ~10 ns units):
#: 10⁷, Kubernetes' runtime cost budget per policy binding. A policy above it is not Ready.
MAX_STATIC_WORK = 10_000_000

#: Elements ``lists.range(n)`` may build when ``n`` is not a literal (``__tg_range_bound``'s limit).
_RANGE_LIMIT = 100_000

Poly = dict[int, int]  # degree → coefficient: size ≤ Σ coefficient · N^degree


def _max(*ps: Poly) -> Poly:
    out: Poly = {}
    for p in ps:
        for d, c in p.items():
            out[d] = max(out.get(d, 0), c)
    return out


_INPUT: Poly = {1: 1}
_ONE: Poly = {0: 1}

@dataclass(slots=True)
class Estimate:
    """The largest size bound found in an expression.

    Attributes:
        size: polynomial ``{degree: coefficient}`` bounding the largest value built, in bytes or
            elements, relative to the input size N.
        error: why the expression is rejected, or "" when it is accepted.
    """

    size: Poly = field(default_factory=dict)
    error: str = ""
    #: Evaluation work in ~10 ns units, a polynomial in the input's bytes B and largest collection C
    #: (see :data:`Work` and the module docstring).
    work: Work = field(default_factory=dict)
    #: The bound of the expression's value (for a variable: what expressions reading it see).
    value: Bound | None = None

    def max_bytes(self, input_bytes: int) -> int:
        """The size bound evaluated for a concrete input size (e.g. the AdmissionRequest's length)."""
        return sum(c * input_bytes ** d for d, c in self.size.items())

    @property
    def static_work(self) -> int:
        """The work no input can avoid (the constant term): literals, ``lists.range`` of literals."""
        return self.work.get((0, 0, 0), 0)


#: Work: ``{(degree in B, degree in C, degree in S): coefficient}``, where B is the input's size in bytes, C the
#: length of its largest list or map (comprehensions over the input's own lists iterate at most C times) and S
#: its longest string (string functions on the input's own strings scan at most S bytes).
Work = dict[tuple[int, int, int], int]


def work_at(work: Work, input_bytes: int, largest_collection: int, longest_string: int) -> int:
    """``work`` for an input of ``input_bytes`` bytes, its largest list or map, and its longest string."""
    return sum(c * input_bytes ** b * largest_collection ** k * longest_string ** t for (b, k, t), c in work.items())


def total(*works: Work) -> Work:
    """The sum of work estimates (programs evaluated one after another)."""
    out: Work = {}
    for w in works:
        for m, c in w.items():
            out[m] = out.get(m, 0) + c
    return out


def _const_size(node: Node) -> Poly:
    if node.const_kind in ("string", "bytes"):
        return {0: max(1, len(node.value))}
    return _ONE


def _literal_int(node: Node) -> int | None:
    """The int a ``lists.range`` argument is when it is a literal (through the rewrite's ``__tg_range_bound``)."""
    if node.name == "__tg_range_bound":
        node = node.args[0]
    return node.value if node.const_kind == "int" else None  # const_kind is "" for anything but a literal


#: The activation's variables (VAP's): everything else a free identifier can name is a type.
_INPUTS = frozenset({"object", "oldObject", "request", "params", "namespaceObject", "variables"})
#: The activation's variables holding the input's own data (``variables`` may hold derived lists).
_STRUCTURAL_INPUTS = frozenset({"object", "oldObject", "request", "params", "namespaceObject"})
_Mono = tuple[int, ...]
_MPoly = dict[_Mono, int]
_M_ONE: _MPoly = {(): 1}
_M_INPUT: _MPoly = {(1,): 1}
_M_COUNT: _MPoly = {(0, 1): 1}
_M_STRING: _MPoly = {(0, 0, 1): 1}


def _norm(m: _Mono) -> _Mono:
    end = len(m)
    while end and m[end - 1] == 0:
        end -= 1
    return m[:end]


def _m_add(*ps: _MPoly) -> _MPoly:
    out: _MPoly = {}
    for p in ps:
        for m, c in p.items():
            out[m] = out.get(m, 0) + c
    return out


def _m_mul(a: _MPoly, b: _MPoly) -> _MPoly:
    out: _MPoly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            width = max(len(ma), len(mb))
            m = _norm(tuple((ma[i] if i < len(ma) else 0) + (mb[i] if i < len(mb) else 0) for i in range(width)))
            out[m] = out.get(m, 0) + ca * cb
    return out


def _m_max(*ps: _MPoly) -> _MPoly:
    out: _MPoly = {}
    for p in ps:
        for m, c in p.items():
            out[m] = max(out.get(m, 0), c)
    return out


def _m_scale(p: _MPoly, k: int) -> _MPoly:
    return {m: c * k for m, c in p.items()}


def _m_pow(p: _MPoly, k: int) -> _MPoly:
    out = _M_ONE
    for _ in range(k):
        out = _m_mul(out, p)
    return out


def _m_constant(p: _MPoly) -> bool:
    return all(not m for m in p)


def _m_symbol(depth: int) -> _MPoly:
    """The element size of the comprehension at nesting ``depth`` (1-based; indexes 0-2 are B, C and S)."""
    return {_norm(tuple([0] * (depth + 2) + [1])): 1}


def _m_close(p: _MPoly, depth: int, elements: _MPoly, iterations: _MPoly, *, summed: bool) -> _MPoly:
    """Eliminate the element symbol at ``depth``: summed over the loop (work) or bounded by one element (size).

    ``elements`` bounds the elements' total size (the range's size), ``iterations`` their count.
    """
    index = depth + 2
    out: _MPoly = {}
    for m, c in p.items():
        k = m[index] if index < len(m) else 0
        rest = _norm(tuple(0 if i == index else e for i, e in enumerate(m)))
        if k == 0:
            term = _m_mul({rest: c}, iterations) if summed else {rest: c}
        else:
            term = _m_mul({rest: c}, _m_pow(elements, k))
        out = _m_add(out, term)
    return out


def _m_to_work(p: _MPoly) -> Work:
    out: Work = {}
    for m, c in p.items():
        key = (m[0] if m else 0, m[1] if len(m) > 1 else 0, m[2] if len(m) > 2 else 0)  # element symbols are gone
        out[key] = out.get(key, 0) + c
    return out


def _m_to_growth(p: _MPoly) -> Poly:
    """Like :func:`_m_to_poly`, but a count of the input's own collections (C) is not growth.

    A value repeated per container is bounded per request by the work budget (building it costs its size).
    """
    out: Poly = {}
    for m, c in p.items():
        degree = sum(m) - (m[1] if len(m) > 1 else 0)
        out[degree] = max(out.get(degree, 0), c)
    return out


def _m_to_poly(p: _MPoly) -> Poly:
    out: Poly = {}
    for m, c in p.items():
        degree = sum(m)  # sizes in bytes: a collection's count and an element's size are at most B
        out[degree] = max(out.get(degree, 0), c)
    return out


def _m_from_poly(p: Poly) -> _MPoly:
    return {_norm((d,)): c for d, c in p.items()}


@dataclass(frozen=True, slots=True)
class Bound:
    """What an expression's value may be, for the expressions that read it (``variables.<name>``).

    Attributes:
        size: bytes or elements, as a polynomial over ``(B, C)`` monomials.
        count: entries of the value when it is a list or map: ``{(0, 1): 1}`` (C) for the input's own lists,
            a polynomial for derived ones; None when only ``size`` bounds it.
        entries: entries as a result's size counts them, when tighter than ``count`` inside a comprehension:
            a list of the element's own data has at most the element's size (X) entries (see :func:`_entries`).
    """

    size: _MPoly
    count: _MPoly | None
    entries: _MPoly | None = None

    def size_at(self, input_bytes: int, largest_collection: int, longest_string: int) -> int:
        """``size`` for an input of ``input_bytes`` bytes, its largest list or map and its longest string.

        Raises:
            ValueError: the bound still names an enclosing comprehension's element (read inside a loop).
        """
        if any(len(m) > 3 for m in self.size):
            raise ValueError("the bound of a value inside a comprehension")
        return work_at(_m_to_work(self.size), input_bytes, largest_collection, longest_string)


def _structural(count: _MPoly | None) -> bool:
    """Whether a count bounds entries of the input's own data (only C terms: ``C``, ``3·C``, ...)."""
    return any(m for m in count or {}) and all(not m or (len(m) == 2 and m[0] == 0) for m in count or {})


def _entries(bound: Bound) -> _MPoly:
    """Entries of ``bound`` as a result's size counts them.

    Its count, unless the value is part of an enclosing comprehension's element, then its size. Every entry has
    a size of at least 1, so the size bounds the count; and, unlike the count C of the input's
    largest list, it adds up over the loop: the lists of each container, summed over the containers, are the
    containers' sizes (the input's size), not C × C.
    """
    if bound.entries is not None:
        return bound.entries
    if bound.count is None:
        return bound.size
    if _m_constant(bound.count):
        return bound.count
    in_element = any(len(m) > 3 for m in bound.count)  # an element symbol: counted inside a comprehension
    return bound.size if in_element else bound.count


def _parts(count: _MPoly) -> int:
    """How many of the input's own values a structural count stands for (``2·C``: two, as ``s + t``)."""
    return sum(c for m, c in count.items() if m)


def _copied(bound: Bound) -> _MPoly:
    """What concatenating ``bound`` copies: S characters or C entries per input value it joins, else its size."""
    if bound.count is not None and _structural(bound.count):
        return _m_scale(_m_add(_M_STRING, _M_COUNT), _parts(bound.count))
    return bound.size


def _scanned(bound: Bound) -> _MPoly:
    """The bytes a string function scans in ``bound``: S for each input string it joins, else its size."""
    if bound.count is not None and _structural(bound.count):
        return _m_scale(_M_STRING, _parts(bound.count))
    return bound.size


def _ceil_tenth(p: _MPoly) -> _MPoly:
    """``p / 10`` rounded up per term: a byte scanned or copied natively is ~1 ns, a tenth of a unit."""
    return {m: -(-c // 10) for m, c in p.items()}


# -- rules: each function's cost and result size -------------------------------------------------------------
#
# As cel-go's estimator (checker/cost.go: ``functionCost`` and ``sizeEstimate`` per overload) and Kubernetes'
# library estimator (k8s.io/apiserver/pkg/cel/library/cost.go: ``EstimateCallCost`` gives every library
# function a CostEstimate and a ResultSize), every function the environment declares has a :class:`Rule`: what a
# call costs beyond evaluating its operands, and how large its result may be. cel-cpp's native functions
# (standard operators and conversions, ext strings/lists/sets/math/encoders, optional) have theirs in
# :data:`NATIVE_RULES`; a Python library function has its rule in its ``Declaration``
# (:mod:`webhook.policy.cel.library._decl`), so none is declared without one. A call of a function that has no
# rule is refused at compile time (:func:`estimate` sets ``error``): the estimate never guesses.


@dataclass(frozen=True, slots=True)
class Call:
    """One call as a :class:`Rule` sees it.

    Attributes:
        name: the function (``_+_``, ``lowerAscii``, ``lists.range``, ...).
        operands: the receiver (for a member call) then the arguments, as checked AST nodes.
        bounds: the :class:`Bound` of each operand, in the same order.
    """

    name: str
    operands: tuple[Node, ...]
    bounds: tuple[Bound, ...]

    @property
    def sizes(self) -> list[_MPoly]:
        """Each operand's size bound."""
        return [b.size for b in self.bounds]

    def count(self, i: int) -> _MPoly:
        """Entries of operand ``i`` when it is a list or map (its size when its count is unknown)."""
        b = self.bounds[i]
        return b.count if b.count is not None else b.size

    def entries(self, i: int) -> _MPoly:
        """Entries of operand ``i`` for sizing a result: see :func:`_entries`."""
        return _entries(self.bounds[i])


CostRule = Callable[[Call], _MPoly]
SizeRule = Callable[[Call], Bound]


class Rule(NamedTuple):
    """A function's cost (work beyond its operands', ~10 ns units) and result-size rule.

    Attributes:
        cost: the call's own work, a polynomial over the B, C, S and element symbols of its operands' bounds.
        size: the result's :class:`Bound`.
    """

    cost: CostRule
    size: SizeRule


# The parametrised rules are small callable classes rather than closures, so that what they compute runs when a
# call is estimated (and a mutation of it shows in the tests: bench/mutation/setup-cost.cfg).


@dataclass(frozen=True, slots=True)
class _EitherCost:
    rules: tuple[Rule, ...]

    def __call__(self, c: Call) -> _MPoly:
        """The call's own work."""
        return _m_max(*(r.cost(c) for r in self.rules))


@dataclass(frozen=True, slots=True)
class _EitherSize:
    rules: tuple[Rule, ...]

    def __call__(self, c: Call) -> Bound:
        """The call's result size."""
        return Bound(_m_max(*(r.size(c).size for r in self.rules)), None)


def either(*rules: Rule) -> Rule:
    """One rule for a name with several implementations (a native and a Python overload): the larger of each."""
    return Rule(_EitherCost(rules), _EitherSize(rules))


# Cost rules.

@dataclass(frozen=True, slots=True)
class Fixed:
    """A constant cost (units per call)."""

    units: int

    def __call__(self, _c: Call) -> _MPoly:
        """The call's own work."""
        return {(): self.units}


def scan(c: Call) -> _MPoly:
    """A native pass over every string operand: a tenth of a unit per byte (``contains``, ``lowerAscii``)."""
    return _ceil_tenth(_m_add(*(_scanned(b) for b in c.bounds)))


@dataclass(frozen=True, slots=True)
class PerElement:
    """``units`` per entry of one list operand (``sort``: 10, ``@in``: 3 of its last operand, ``operand=-1``)."""

    units: int
    operand: int = 0

    def __call__(self, c: Call) -> _MPoly:
        """The call's own work."""
        return _m_scale(c.count(self.operand), self.units)  # -1: the last operand


@dataclass(frozen=True, slots=True)
class Builds:
    """``rule`` plus copying the result ``size`` builds (a tenth of a unit per byte: ``join``, ``replace``)."""

    rule: CostRule
    size: SizeRule

    def __call__(self, c: Call) -> _MPoly:
        """The call's own work."""
        return _m_add(self.rule(c), _ceil_tenth(self.size(c).size))


#: A call into Python (~6 µs measured for ``quantity()``): the crossing, plus converting its operands.
PYTHON_CALL = 600


@dataclass(frozen=True, slots=True)
class Python:
    """A Python library function: :data:`PYTHON_CALL`, 2 units per operand byte or entry, more per match.

    ``per_match`` units per receiver byte: ``findAll`` builds one Python string per match (~1,200 units each
    measured), at most one per byte.
    """

    per_match: int = 0
    #: Units of work the function does beyond converting its operands (an RBAC walk: ``authorizer.check``).
    fixed: int = 0

    def __call__(self, c: Call) -> _MPoly:
        """The call's own work."""
        scanned = [_copied(b) for b in c.bounds]  # converted into Python: S bytes or C entries of the input's own
        return _m_add({(): PYTHON_CALL + self.fixed}, _m_scale(_m_add(*scanned), 2),
                      _m_scale(scanned[0], self.per_match) if self.per_match else {})


def _pairwise(c: Call) -> _MPoly:
    """Ext sets compare every pair of elements (a unit per pair)."""
    return _m_mul(c.count(0), c.count(1))


def _equality(c: Call) -> _MPoly:
    """``==``/``!=`` stop at the smaller operand: a literal or scalar side makes it O(1)."""
    sizes = c.sizes
    if all(_m_constant(s) for s in sizes):
        return {}
    constant = [s for s in sizes if _m_constant(s)]
    return _m_max(*constant) if constant else _m_add(*sizes)


def _concat_cost(c: Call) -> _MPoly:
    """``+`` copies every element.

    Of the input's own data, a string of at most S characters or a list of at most C entries; not onto a
    comprehension's accumulator, which cel-cpp (and the chunked rewrite,
    :mod:`webhook.policy.cel.optimize`) extends in place: counted per element already.
    """
    if all(_m_constant(s) for s in c.sizes):
        return {}
    return _m_add(*(_copied(b) for b in c.bounds))


def _range_cost(c: Call) -> _MPoly:
    """``lists.range(n)`` builds n ints: 2 units each (a literal n counts exactly)."""
    return {(): 2 * _range_length(c)}


# Size rules.

def scalar(_c: Call) -> Bound:
    """A number, bool, null, timestamp, duration or type: constant size."""
    return Bound(_M_ONE, None)


def largest(c: Call) -> Bound:
    """A part or a same-sized transform of one operand (``lowerAscii``, ``trim``, ``substring``, ``url``)."""
    return Bound(_m_max(*c.sizes) or _M_ONE, None)


def keeps(c: Call) -> Bound:
    """The receiver's entries reordered, selected or wrapped (``sort``, ``distinct``, ``slice``, ``dyn``)."""
    return Bound(_m_max(*c.sizes), c.bounds[0].count, c.bounds[0].entries)


def element(c: Call) -> Bound:
    """An entry of the receiver (``l[i]``, ``m.f``, ``first``): at most its size; of the input's data, input data."""
    return Bound(c.sizes[0], _M_COUNT if _structural(c.bounds[0].count) else None)


@dataclass(frozen=True, slots=True)
class Plus:
    """``factor`` × the largest operand plus ``extra`` (``string(x)``: +24 for a number's digits)."""

    extra: int
    factor: int = 1

    def __call__(self, c: Call) -> Bound:
        """The call's result size."""
        return Bound(_m_add(_m_scale(_m_max(*c.sizes), self.factor), {(): self.extra}), None)


def _sum(c: Call) -> Bound:
    """``a + b``: both sizes; a list's entries add up."""
    counts = [b.count for b in c.bounds]
    known = [k for k in counts if k is not None]
    return Bound(_m_add(*c.sizes), _m_add(*known) if len(known) == len(counts) else None,
                 _m_add(*(_entries(b) for b in c.bounds)) if len(known) == len(counts) else None)


def _conditional(c: Call) -> Bound:
    """``p ? a : b``: as large as the larger branch, as many entries as the larger count."""
    branches = c.bounds[1:]
    known = [b.count for b in branches if b.count is not None]
    return Bound(_m_max(*(b.size for b in branches)), _m_max(*known) if len(known) == len(branches) else None,
                 _m_max(*(_entries(b) for b in branches)) if len(known) == len(branches) else None)


def _or_value(c: Call) -> Bound:
    """``opt.orValue(v)``/``opt.or(o)``: the optional's value or the alternative."""
    counts = [b.count for b in c.bounds]
    return Bound(_m_max(*c.sizes), _m_max(*(k for k in counts if k is not None))
                 if all(k is not None for k in counts) else None)


def _join(c: Call) -> Bound:
    """``list.join(sep)``: every element, and a separator between two (cel-go: ``list.size × elem + sep``)."""
    out = c.sizes[0]
    if len(c.bounds) > 1:
        out = _m_add(out, _m_mul(c.entries(0), c.sizes[1]))
    return Bound(out, None)


def _replace(c: Call) -> Bound:
    """``s.replace(old, new[, n])``: with ``old == ''`` each of the s + 1 positions gets ``new``."""
    s = c.sizes[0]
    return Bound(_m_add(s, _m_mul(_m_add(s, _M_ONE), c.sizes[2])), None)


def _split(c: Call) -> Bound:
    """``s.split(sep[, n])``: at most s + 1 parts (``split('')``: one per character), each at least 1."""
    s = c.sizes[0]
    parts = _m_add(s, _M_ONE)
    return Bound(_m_add(s, parts), parts)


def _format(c: Call) -> Bound:
    """``fmt.format(args)``: the format string and each argument rendered.

    A string quoted and escaped is at most twice its size, a number up to 24 characters per entry.
    """
    fmt = c.sizes[0]
    return Bound(_m_add(fmt, _m_scale(c.sizes[1], 2), _m_scale(c.entries(1), 24)), None)


def _range_length(c: Call) -> int:
    k = _literal_int(c.operands[0])
    return max(0, min(k, _RANGE_LIMIT)) if k is not None else _RANGE_LIMIT


def _range(c: Call) -> Bound:
    """``lists.range(n)``: n ints (a literal n exactly, else the rewrite's bound :data:`_RANGE_LIMIT`)."""
    n = max(1, _range_length(c))
    return Bound({(): n}, {(): n})


def _flatten(c: Call) -> Bound:
    """``l.flatten([depth])``: the nested entries, no more than the list's size."""
    return Bound(c.sizes[0], None)


def _map_insert(c: Call) -> Bound:
    """``cel.@mapInsert(m, k, v)`` (the step of ``transformMap``): the map and the new entry."""
    return Bound(_m_add(*c.sizes), None)


def _reverse_cost(c: Call) -> _MPoly:
    """``reverse()`` of a string scans it; of a list, a unit per entry."""
    return _m_add(scan(c), PerElement(1)(c))


def _split_cost(c: Call) -> _MPoly:
    """``split``: one part per separator found, and one more: 12 units each."""
    return _m_scale(_m_add(_scanned(c.bounds[0]), _M_ONE), 12)


def _input_sized(_c: Call) -> Bound:
    """Sized like the input: its bytes, its largest collection's entries."""
    return Bound(_M_INPUT, _M_COUNT)


_BASE = Fixed(0)
_SCALAR_RULE = Rule(_BASE, scalar)
_SCAN_SCALAR = Rule(scan, scalar)
_SCAN_LARGEST = Rule(scan, largest)
_JOIN = Rule(Builds(PerElement(2), _join), _join)
_REPLACE = Rule(Builds(scan, _replace), _replace)
_FORMAT = Rule(Builds(scan, _format), _format)
_QUOTE = Rule(Builds(scan, Plus(2, 6)), Plus(2, 6))
_ENCODE = Rule(Builds(scan, Plus(4, 2)), Plus(4, 2))

#: cel-cpp's natively implemented functions (standard definitions, ext strings/lists/sets/math/encoders,
#: optional, two-variable comprehensions' ``cel.@mapInsert``), by name: cost and result size. The macros
#: (:data:`MACROS`) expand to comprehensions, which :func:`estimate` sizes from their parts.
NATIVE_RULES: Mapping[str, Rule] = {
    **dict.fromkeys((
        # operators on scalars, comparisons, logic, conversions to scalars, time accessors
        "_&&_", "_||_", "!_", "-_", "_-_", "_*_", "_/_", "_%_", "_<_", "_<=_", "_>_", "_>=_",
        "@not_strictly_false", "int", "uint", "double", "bool",
        "duration", "timestamp", "type", "size", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear",
        "getFullYear", "getHours", "getMilliseconds", "getMinutes", "getMonth", "getSeconds", "hasValue",
        "optional.none", "math.abs", "math.bitAnd", "math.bitNot", "math.bitOr", "math.bitShiftLeft",
        "math.bitShiftRight", "math.bitXor", "math.ceil", "math.floor", "math.isFinite", "math.isInf",
        "math.isNaN", "math.round", "math.sign", "math.sqrt", "math.trunc", "math.greatest", "math.least",
        "math.@max", "math.@min"), _SCALAR_RULE),
    "_==_": Rule(_equality, scalar),
    "_!=_": Rule(_equality, scalar),
    "@in": Rule(PerElement(3, -1), scalar),
    **dict.fromkeys(("contains", "startsWith", "endsWith", "matches", "indexOf", "lastIndexOf"), _SCAN_SCALAR),
    **dict.fromkeys(("lowerAscii", "upperAscii", "trim", "substring", "charAt", "base64.decode"),
                    _SCAN_LARGEST),
    "bytes": Rule(scan, largest),
    "string": Rule(scan, Plus(24)),
    "_+_": Rule(_concat_cost, _sum),
    "_?_:_": Rule(_BASE, _conditional),
    **dict.fromkeys(("_[_]", "_[?_]", "_?._"), Rule(_BASE, element)),
    **dict.fromkeys(("first", "last"), Rule(_BASE, element)),
    "reverse": Rule(_reverse_cost, keeps),
    # sortBy(x, key) is the macro @sortByAssociatedKeys(list, list.map(x, key)).
    **dict.fromkeys(("sort", "sortBy", "@sortByAssociatedKeys", "distinct"), Rule(PerElement(10), keeps)),
    "slice": Rule(PerElement(1), keeps),
    "flatten": Rule(PerElement(2), _flatten),
    **dict.fromkeys(("dyn", "optional.of", "optional.ofNonZeroValue", "value"), Rule(_BASE, keeps)),
    **dict.fromkeys(("orValue", "or"), Rule(_BASE, _or_value)),
    "join": _JOIN,
    "replace": _REPLACE,
    "split": Rule(_split_cost, _split),
    "format": _FORMAT,
    "strings.quote": _QUOTE,
    "base64.encode": _ENCODE,
    "lists.range": Rule(_range_cost, _range),
    **dict.fromkeys(("sets.contains", "sets.intersects", "sets.equivalent"), Rule(_pairwise, scalar)),
    "cel.@mapInsert": Rule(Fixed(130), _map_insert),
    # ext regex (cel-go's, in Kyverno's environment): RE2 scans linearly; replace and extractAll build.
    "regex.replace": _REPLACE,
    "regex.extract": Rule(scan, largest),
    "regex.extractAll": Rule(Builds(scan, _split), _split),
}

#: Macros: cel-cpp expands them into comprehensions (``all``, ``map``, ``cel.bind``, ...) or selects (``has``);
#: :func:`estimate` bounds a comprehension from its range, step and result, so no call of these names remains.
MACROS = frozenset({"has", "all", "exists", "exists_one", "existsOne", "map", "filter", "transformList",
                    "transformMap", "transformMapEntry", "cel.bind", "optMap", "optFlatMap"})

#: Python library rules for the library modules' declarations (:mod:`webhook.policy.cel.library`).
#: A Python function returning a number, bool or other scalar.
PYTHON_SCALAR = Rule(Python(), scalar)
#: A Python function whose result is its operand or a part of it (a URL's host, a parsed quantity), plus 64 bytes.
PYTHON_PART = Rule(Python(), Plus(64))
#: A Python function returning a value up to twice its operand (``jsonpatch.escapeKey``: ``~`` → ``~0``).
PYTHON_DOUBLE = Rule(Python(), Plus(2, 2))
#: The text of a library value (``string(ip)``, ``string(cidr)``): canonical, no longer than the text the value holds.
PYTHON_TEXT = Rule(Python(), Plus(24))
#: ``url(s).getQuery()``: a map of lists, up to three entries' worth per byte of the URL.
PYTHON_QUERY = Rule(Python(), Plus(64, 3))
#: ``findAll``: at most one match per byte, each a Python string.
PYTHON_MATCHES = Rule(Python(1200), _split)
#: ``find``: one match at most the receiver.
PYTHON_MATCH = Rule(Python(1), Plus(1))
#: Format validation: a list of messages (Kubernetes' texts, each under 256 bytes, at most 8) naming the value.
PYTHON_MESSAGES = Rule(Python(), Plus(2048, 8))
#: Constant values (``format.dns1123Label()``).
PYTHON_CONSTANT = Rule(Python(), Plus(64))
#: A digest's hex text (``sha256``: 64 characters; 128 bounds every digest), whatever the input.
PYTHON_DIGEST = Rule(Python(), Plus(128))
#: A decoded certificate or request (``x509.decode``): its fields, hex-encoded at most twice the DER, itself at
#: most the PEM text; 4 × the text and 1 KiB of field names.
PYTHON_DECODED = Rule(Python(), Plus(1024, 4))
#: ``yaml.parse``: at most twice the text and 100,000 expanded nodes (kyverno_yaml's MAX_NODES). Not sound for
#: a long string aliased many times (at most MAX_ALIASES aliases; the nodes cap bounds the rest).
PYTHON_PARSED_YAML = Rule(Python(), Plus(100_000, 2))
#: ``resource.Get/List/ByIndex`` return cached objects: sized like the input (the cache is not measured per
#: request; a follow-up of issue 29 bounds it).
PYTHON_OBJECT = Rule(Python(), _input_sized)


def rule_table(declared: Mapping[str, Rule]) -> dict[str, Rule]:
    """Every rule the estimator knows: :data:`NATIVE_RULES` and the Python library's ``declared`` ones.

    A name with both a native and a Python implementation (``string``, ``indexOf``) gets :func:`either`.
    """
    table = dict(NATIVE_RULES)
    for name, rule in declared.items():
        table[name] = either(table[name], rule) if name in table else rule
    return table


def estimate(ast: CheckedAst, rules: Mapping[str, Rule] | None = None,
             variables: Mapping[str, Bound] | None = None) -> Estimate:
    """Estimate the largest value ``ast`` may build and the work it does (see the module docstring).

    Args:
        ast: the checked expression.
        rules: each function's :class:`Rule` (:func:`rule_table`); :data:`NATIVE_RULES` when None.
        variables: bounds of the policy's ``variables`` (each evaluated once, its work counted apart);
            an unknown variable is taken as a derived value as large as the input.

    Returns:
        An :class:`Estimate`; ``error`` is set when growth is super-linear or above
        :data:`MAX_GROWTH`, or when a function has no rule (work is judged by the caller, which knows the
        whole policy).
    """
    table = NATIVE_RULES if rules is None else rules
    worst: Poly = {}
    growth: Poly = {}
    known = variables or {}
    unknown: list[str] = []
    #: Each enclosing comprehension's iteration variable → (the range it iterates, the element's bound).
    iterating: dict[str, tuple[Node, Bound]] = {}

    def walk(node: Node, env: Mapping[str, Bound], depth: int) -> tuple[Bound, _MPoly]:
        """``(bound, work)`` of ``node`` inside ``depth`` enclosing comprehensions."""
        nonlocal worst, growth
        kind = node.kind
        work: _MPoly = _M_ONE
        bound: Bound
        if kind == "const":
            bound = Bound(_m_from_poly(_const_size(node)), None)
        elif kind == "ident":
            # The activation's variables are the input; other free names are types (map, list, int).
            found = env.get(node.name)
            if found is not None:
                bound = found
            elif node.name in _STRUCTURAL_INPUTS:
                bound = Bound(_M_INPUT, _M_COUNT)
            else:
                bound = Bound(_M_INPUT if node.name in _INPUTS else _M_ONE, None)
        elif kind == "select" and node.target is not None:  # (a select always has its operand)
            if node.target.kind == "ident" and node.target.name == "variables" and "variables" not in env:
                # Unknown here (compiled alone): as large as the input; the compiler estimates again with the
                # bounds of the policy's variables (webhook.policy.compiler) and refuses what they make grow.
                bound = known.get(node.name, Bound(_M_INPUT, _M_COUNT))
                work = _m_add(work, _M_ONE)
            else:
                target, target_work = walk(node.target, env, depth)
                work = _m_add(target_work, _M_ONE)
                # A field of the input's own data is input data: its lists have at most C entries.
                structural = _structural(target.count)
                in_element = structural and any(len(m) > 3 for m in target.size)
                bound = Bound(_M_ONE, None) if node.test_only else Bound(
                    target.size, _M_COUNT if structural else None, target.size if in_element else None)
        elif kind in ("list", "struct"):
            children = node.args if kind == "list" else [v for _k, v in node.entries] + [
                k for k, _v in node.entries if k is not None]
            parts = [walk(a, env, depth) for a in children]
            # Every entry's size is at least 1, so a list's size bounds its entries too.
            size = _m_add(*(p[0].size for p in parts)) if parts else _M_ONE
            assembled = _assembled_size(node, env)
            bound = Bound(assembled if assembled is not None else size, {(): max(1, len(children))})
            work = _m_add(_M_ONE, *(p[1] for p in parts))
        elif kind == "comprehension":
            bound, work = _comprehension(node, env, depth)
        else:
            bound, work = _call(node, env, depth)
        # No size from the checker's type: cel-cpp types the element of some ext lists results (distinct, slice,
        # flatten) as a type parameter that a later ``+`` binds to int, so ``l.distinct().map(x, x + x)`` checks as
        # list(int) while it builds strings. A call's size is its rule's (``size()`` and comparisons are scalar).
        # Sizes are judged against the input's bytes: an element is at most the whole input.
        worst = _max(worst, _m_to_poly(bound.size))
        growth = _max(growth, _m_to_growth(bound.size))
        return bound, work

    def _comprehension(node: Node, env: Mapping[str, Bound], depth: int) -> tuple[Bound, _MPoly]:
        rng, init, cond, step, res_node = node.args
        r, rng_work = walk(rng, env, depth)
        inner_depth = depth + 1
        element = Bound(_m_symbol(inner_depth), _M_COUNT if _structural(r.count) else None)
        inner = dict(env)
        inner[node.name] = element
        if node.iter_var2:
            inner[node.iter_var2] = element
        shadowed = iterating.get(node.name)
        iterating[node.name] = (rng, element)
        acc, init_work = walk(init, inner, inner_depth)
        # cel.bind(x, init, body) is a comprehension over [] whose accumulator holds init.
        accu = _accu_name(node)
        is_bind = rng.kind == "list" and not rng.args
        iterations: _MPoly = {} if is_bind else r.count if r.count is not None else r.size
        if accu and not is_bind:
            # What one iteration adds: the step with an empty accumulator (every macro's step is the accumulator
            # extended once, kept, or a scalar). The result is the initial value plus every iteration's addition,
            # as cel-go sizes map (list.size × element) and filter (at most list.size entries). The empty bound also
            # makes ``accu + [x]`` copy nothing: cel-cpp (and the chunked rewrite, webhook.policy.cel.optimize)
            # extends the accumulator in place, counted per element below.
            inner[accu] = Bound({}, {})
        elif accu:
            inner[accu] = acc
        _cond, cond_work = walk(cond, inner, inner_depth)
        step_bound, step_work = walk(step, inner, inner_depth)
        step_rule = table.get(step.name) if step.kind == "call" else None
        if accu and not is_bind and step_rule is not None and step_rule.size is scalar:
            inner[accu] = Bound(_m_max(acc.size, step_bound.size), None)  # all/exists: a bool, not accumulated
        elif accu and not is_bind:
            grown = _m_add(acc.size, _m_close(step_bound.size, inner_depth, r.size, _entries(r), summed=True))
            count = _m_add(acc.count or {}, iterations) if init.kind == "list" else None
            entries = _m_add(acc.count or {}, _entries(r)) if init.kind == "list" else None
            inner[accu] = Bound(grown, count, entries)
        res, res_work = walk(res_node, inner, inner_depth)
        if shadowed is None:
            iterating.pop(node.name, None)
        else:
            iterating[node.name] = shadowed
        # map/filter build a list element by element (their accumulator starts as a list): ~130 units each.
        per_iteration = _m_add(cond_work, step_work, {(): 130 if init.kind == "list" else 8})
        loop = _m_close(per_iteration, inner_depth, r.size, iterations, summed=True)
        once = _m_close(_m_add(init_work, res_work), inner_depth, r.size, r.size, summed=False)
        size = _m_close(res.size, inner_depth, r.size, r.size, summed=False)
        count = (res.count if is_bind else
                 _m_close(res.count, inner_depth, r.size, r.size, summed=False) if res.count is not None else None)
        entries = _m_close(res.entries, inner_depth, r.size, r.size, summed=False) if res.entries is not None else None
        return Bound(size, count, entries), _m_add(rng_work, once, loop)

    def _call(node: Node, env: Mapping[str, Bound], depth: int) -> tuple[Bound, _MPoly]:
        operands = ([node.target] if node.target is not None else []) + node.args
        walked = [walk(o, env, depth) for o in operands]
        work = _m_add(_M_ONE, *(w[1] for w in walked))
        rule = table.get(node.name)
        if rule is None:
            unknown.append(node.name)
            return Bound(_M_INPUT, None), work
        call = Call(node.name, tuple(operands), tuple(w[0] for w in walked))
        size = rule.size(call)
        if node.name == "_[_]" and len(operands) == 2 and operands[1].kind == "ident":
            # m[k] in a comprehension over m's keys: the entries of m are disjoint, like a list's elements.
            found = iterating.get(operands[1].name)
            if found is not None and _same(found[0], operands[0]) and env.get(operands[1].name) is found[1]:
                size = Bound(found[1].size, size.count, size.entries)
        return size, _m_add(work, rule.cost(call))

    root, root_work = walk(ast.root, {}, 0)
    result = Estimate(worst, work=_m_to_work(root_work), value=root)
    degree = max(growth, default=0)
    if unknown:
        result.error = (f"no cost rule for function {unknown[0]!r}: Tollgate cannot bound its evaluation "
                        "(webhook/policy/cel/cost.py)")
    elif degree >= 2:
        result.error = ("expression may build a value that grows faster than its input (e.g. "
                        "s.replace(x, s)); Tollgate rejects super-linear growth")
    elif growth.get(1, 0) > MAX_GROWTH:
        result.error = (f"expression may build a value {growth[1]} times the size of its input (e.g. a map or join "
                        f"repeating it, nested cel.bind doubling a string); the limit is {MAX_GROWTH}")
    return result


def _input_path(node: Node, env: Mapping[str, Bound]) -> tuple[str, ...] | None:
    """``("object", "spec", "template")`` for ``object.spec.template`` (plain or optional selects), else None."""
    if node.kind == "ident":
        return (node.name,) if node.name in _STRUCTURAL_INPUTS and node.name not in env else None
    if node.kind == "select" and node.target is not None and not node.test_only:
        path = _input_path(node.target, env)
        return (*path, node.name) if path is not None else None
    if (node.kind == "call" and node.name == "_?._" and len(node.args) == 2 and node.args[1].kind == "const"
            and isinstance(node.args[1].value, str)):
        path = _input_path(node.args[0], env)
        return (*path, node.args[1].value) if path is not None else None
    return None


def _assembled_parts(node: Node, env: Mapping[str, Bound], paths: list[tuple[str, ...]],
                     constants: list[_MPoly]) -> bool:
    """Collect the input paths and constants a literal is assembled from; False if it holds anything else."""
    path = _input_path(node, env)
    if path is not None:
        paths.append(path)
        return True
    if node.kind == "const":
        constants.append(_m_from_poly(_const_size(node)))
        return True
    if node.kind == "call" and node.name in ("orValue", "or") and node.target is not None and len(node.args) == 1:
        return (_assembled_parts(node.target, env, paths, constants)
                and _assembled_parts(node.args[0], env, paths, constants))
    if node.kind in ("list", "struct"):
        children = node.args if node.kind == "list" else [v for _k, v in node.entries] + [
            k for k, _v in node.entries if k is not None]
        constants.append({(): len(children) + 1})
        return all(_assembled_parts(c, env, paths, constants) for c in children)
    return False


def _assembled_size(node: Node, env: Mapping[str, Bound]) -> _MPoly | None:
    """The size of a list or map literal assembled only from disjoint parts of the input, else None.

    ``{'metadata': object.spec.template.?metadata, 'spec': object.spec.template.?spec.orValue({})}`` (a Pod
    made of a controller's template, as ``tollgate export`` writes it): the parts are distinct subtrees of
    the input document, none inside another, so together they are at most the input's size N, plus the
    literal's constants; summing them (N per entry) would call a restructuring of the input a growth.
    """
    paths: list[tuple[str, ...]] = []
    constants: list[_MPoly] = []
    if not _assembled_parts(node, env, paths, constants) or len(paths) < 2:
        return None
    ordered = sorted(set(paths))
    if len(ordered) != len(paths) or any(b[:len(a)] == a for a, b in itertools.pairwise(ordered)):
        return None  # a part repeated, or one inside another: not disjoint
    return _m_add(_M_INPUT, *constants)


def _shape(node: Node) -> tuple[Any, ...]:
    """What makes two nodes the same expression (ids aside)."""
    return (node.kind, node.name, node.value, node.const_kind, node.test_only,
            None if node.target is None else _shape(node.target), tuple(_shape(a) for a in node.args),
            tuple((None if k is None else _shape(k), _shape(v)) for k, v in node.entries))


def _same(a: Node, b: Node) -> bool:
    """Whether two nodes are the same expression."""
    return _shape(a) == _shape(b)


def _accu_name(node: Node) -> str:
    """The accumulator variable cel-cpp's macros and cel.bind use, read back from the AST."""
    return node.accu_var
