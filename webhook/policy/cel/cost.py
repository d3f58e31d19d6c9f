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

from collections.abc import Mapping
from dataclasses import dataclass, field

from webhook.policy.cel.ast import CheckedAst, Node

#: Largest degree-1 growth accepted: a value may be at most this many times the input size.
MAX_GROWTH = 64

#: Most work a policy may do whatever its input (the constant term of its work, in ~10 ns units):
#: 10⁷, Kubernetes' runtime cost budget per policy binding. A policy above it is not Ready.
MAX_STATIC_WORK = 10_000_000

#: Elements ``lists.range(n)`` may build when ``n`` is not a literal (``__tg_range_bound``'s limit).
_RANGE_LIMIT = 100_000

Poly = dict[int, int]  # degree → coefficient: size ≤ Σ coefficient · N^degree


def _add(*ps: Poly) -> Poly:
    out: Poly = {}
    for p in ps:
        for d, c in p.items():
            out[d] = out.get(d, 0) + c
    return out


def _mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for da, ca in a.items():
        for db, cb in b.items():
            out[da + db] = out.get(da + db, 0) + ca * cb
    return out


def _max(*ps: Poly) -> Poly:
    out: Poly = {}
    for p in ps:
        for d, c in p.items():
            out[d] = max(out.get(d, 0), c)
    return out


_INPUT: Poly = {1: 1}
_ONE: Poly = {0: 1}

#: Functions whose result is about as large as their receiver/arguments.
_SAME = frozenset({"lowerAscii", "upperAscii", "trim", "reverse", "substring", "charAt", "split", "string",
                   "bytes", "sort", "sortBy", "distinct", "flatten", "slice", "dyn", "orValue", "value",
                   "optional.of", "optional.ofNonZeroValue", "_?_:_", "_[_]", "_[?_]", "base64.decode",
                   "transformList", "filter", "map"})
#: Functions that build a result from the sizes of all their inputs.
_SUM = frozenset({"_+_", "format", "base64.encode", "quote", "strings.quote"})


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


def _scale(p: Poly, k: int) -> Poly:
    return {d: c * k for d, c in p.items()}


def _literal_int(node: Node) -> int | None:
    """The int a ``lists.range`` argument is when it is a literal (through the rewrite's ``__tg_range_bound``)."""
    if node.kind == "call" and node.name == "__tg_range_bound" and node.args:
        node = node.args[0]
    return node.value if node.kind == "const" and node.const_kind in ("int", "uint") else None


#: Work per element for list functions cel-cpp runs natively (units per element of the receiver).
_PER_ELEMENT = {"sort": 10, "sortBy": 10, "distinct": 10, "flatten": 2, "slice": 1, "reverse": 1, "first": 0,
                "last": 0, "join": 2, "@in": 3}
#: Functions over a string's characters, natively (units per 10 characters, rounded up: a scan is ~1 ns/char).
_STRING_SCAN = frozenset({"contains", "startsWith", "endsWith", "matches", "indexOf", "lastIndexOf", "lowerAscii",
                          "upperAscii", "trim", "substring", "charAt", "replace", "format", "quote",
                          "strings.quote", "base64.encode", "base64.decode", "reverse"})
#: Functions whose result may have one element per input character (units per element built).
_PER_OUTPUT_ELEMENT = {"split": 12}
#: Kubernetes library functions implemented in Python (webhook.policy.cel.library): each call crosses into
#: Python (~6 µs measured for quantity()); ``find``/``findAll`` also build one Python string per match.
_PYTHON_CALL = 600
_PYTHON_PER_MATCH = {"findAll": 1200, "find": 1}
#: The activation's variables (VAP's): everything else a free identifier can name is a type.
_INPUTS = frozenset({"object", "oldObject", "request", "params", "namespaceObject", "variables"})
#: The activation's variables holding the input's own data (``variables`` may hold derived lists).
_STRUCTURAL_INPUTS = frozenset({"object", "oldObject", "request", "params", "namespaceObject"})
#: List functions whose result is the receiver's elements, reordered or selected.
_KEEPS_STRUCTURE = frozenset({"sort", "sortBy", "distinct", "slice", "reverse", "orValue", "value", "dyn",
                              "optional.of", "optional.ofNonZeroValue", "filter"})
#: Checked types whose values have a constant size.
_SCALAR_TYPES = frozenset({"int", "uint", "double", "bool", "null_type", "google.protobuf.Timestamp",
                           "google.protobuf.Duration", "timestamp", "duration"})
#: The sets extension compares every pair of elements (units per pair).
_PAIRWISE = frozenset({"sets.contains", "sets.intersects", "sets.equivalent"})


# -- work: polynomials in B, C and one symbol per enclosing comprehension's element --------------------------
#
# A monomial is a tuple of exponents (B, C, S, X1, X2, ...): B is the input's bytes, C its largest collection,
# S its longest string, Xd the size of the element the comprehension at nesting depth d iterates with. When a
# loop is closed, the work of one iteration W(X) is summed over its elements: terms without X are multiplied by the
# iteration count (C for the input's own lists, the range's size r otherwise), and a term c·M·X^k (k ≥ 1) becomes
# c·M·r^k, since the elements of one list are disjoint parts of it (Σ Xᵢ^k ≤ (Σ Xᵢ)^k ≤ r^k). A string check
# on each container is then linear in the input, not quadratic.

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
    """

    size: _MPoly
    count: _MPoly | None


def _structural(count: _MPoly | None) -> bool:
    """Whether a count bounds entries of the input's own data (only C terms: ``C``, ``3·C``, ...)."""
    return any(m for m in count or {}) and all(not m or (len(m) == 2 and m[0] == 0) for m in count or {})


def _copied(bound: Bound) -> _MPoly:
    """What concatenating ``bound`` copies: S characters or C entries of the input's own data, else its size."""
    return _m_add(_M_STRING, _M_COUNT) if _structural(bound.count) else bound.size


def _scanned(bound: Bound) -> _MPoly:
    """The bytes a string function scans in ``bound``: S for one of the input's own strings, else its size."""
    return _M_STRING if _structural(bound.count) else bound.size


def estimate(ast: CheckedAst, python_functions: frozenset[str] = frozenset(),
             variables: Mapping[str, Bound] | None = None) -> Estimate:
    """Estimate the largest value ``ast`` may build and the work it does (see the module docstring).

    Args:
        ast: the checked expression.
        python_functions: names of functions implemented in Python (each call costs :data:`_PYTHON_CALL`).
        variables: bounds of the policy's ``variables`` (each evaluated once, its work counted apart);
            an unknown variable is taken as a derived value as large as the input.

    Returns:
        An :class:`Estimate`; ``error`` is set when growth is super-linear or above
        :data:`MAX_GROWTH` (work is judged by the caller, which knows the whole policy).
    """
    worst: Poly = {}
    known = variables or {}
    accumulators: set[str] = set()

    def walk(node: Node, env: Mapping[str, Bound], depth: int) -> tuple[Bound, _MPoly]:
        """``(bound, work)`` of ``node`` inside ``depth`` enclosing comprehensions."""
        nonlocal worst
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
        elif kind == "select":
            if node.target is None:
                bound = Bound(_M_INPUT, None)
            elif node.target.kind == "ident" and node.target.name == "variables" and "variables" not in env:
                bound = known.get(node.name, Bound(_M_INPUT, None))
                work = _m_add(work, _M_ONE)
            else:
                target, target_work = walk(node.target, env, depth)
                work = _m_add(target_work, _M_ONE)
                # A field of the input's own data is input data: its lists have at most C entries.
                bound = Bound(_M_ONE, None) if node.test_only else Bound(
                    target.size, _M_COUNT if _structural(target.count) else None)
        elif kind in ("list", "struct"):
            children = node.args if kind == "list" else [v for _k, v in node.entries] + [
                k for k, _v in node.entries if k is not None]
            parts = [walk(a, env, depth) for a in children]
            bound = Bound(_m_add(_M_ONE, *(p[0].size for p in parts)), {(): max(1, len(children))})
            work = _m_add(_M_ONE, *(p[1] for p in parts))
        elif kind == "comprehension":
            bound, work = _comprehension(node, env, depth)
        else:
            bound, work = _call(node, env, depth)
        if ast.type_of(node) in _SCALAR_TYPES:
            bound = Bound(_M_ONE, None)  # a number, bool, null, timestamp or duration: not its input's size
        # Sizes are judged against the input's bytes: an element is at most the whole input.
        worst = _max(worst, _m_to_poly(bound.size))
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
        acc, init_work = walk(init, inner, inner_depth)
        # cel.bind(x, init, body) is a comprehension over [] whose accumulator holds init.
        accu = _accu_name(node)
        is_bind = rng.kind == "list" and not rng.args
        if accu and not is_bind:
            accumulators.add(accu)
        if accu:
            inner[accu] = acc if is_bind else Bound(_m_max(acc.size, r.size), r.count)
        _cond, cond_work = walk(cond, inner, inner_depth)
        step_bound, step_work = walk(step, inner, inner_depth)
        if accu and not is_bind:
            inner[accu] = Bound(_m_max(acc.size, step_bound.size, r.size), r.count)
        res, res_work = walk(res_node, inner, inner_depth)
        # map/filter build a list element by element (their accumulator starts as a list): ~130 units each.
        per_iteration = _m_add(cond_work, step_work, {(): 130 if init.kind == "list" else 8})
        iterations: _MPoly = {} if is_bind else r.count if r.count is not None else r.size
        loop = _m_close(per_iteration, inner_depth, r.size, iterations, summed=True)
        once = _m_close(_m_add(init_work, res_work), inner_depth, r.size, r.size, summed=False)
        size = _m_close(res.size, inner_depth, r.size, r.size, summed=False)
        # map and filter keep at most as many entries as they iterate; cel.bind yields its body.
        count = res.count if is_bind else iterations if init.kind == "list" else None
        return Bound(size, count), _m_add(rng_work, once, loop)

    def _call(node: Node, env: Mapping[str, Bound], depth: int) -> tuple[Bound, _MPoly]:
        operands = ([node.target] if node.target is not None else []) + node.args
        walked = [walk(o, env, depth) for o in operands]
        bounds = [w[0] for w in walked]
        sizes = [b.size for b in bounds]
        work = _m_add(_M_ONE, *(w[1] for w in walked))
        name = node.name
        if not sizes:
            return Bound(_M_ONE, None), work
        if name == "lists.range":
            k = _literal_int(node.args[0]) if node.args else None
            n = max(0, min(k, _RANGE_LIMIT)) if k is not None else _RANGE_LIMIT
            return Bound({(): max(1, n)}, {(): max(1, n)}), _m_add(work, {(): 2 * n})
        counts = [b.count if b.count is not None else b.size for b in bounds]
        if name in _PAIRWISE and len(sizes) >= 2:
            return Bound(_M_ONE, None), _m_add(work, _m_mul(counts[0], counts[1]))
        extra: _MPoly
        if name in _PER_ELEMENT:
            extra = _m_scale(counts[-1] if name == "@in" else counts[0], _PER_ELEMENT[name])
        elif name in _PER_OUTPUT_ELEMENT:
            extra = _m_scale(_scanned(bounds[0]), _PER_OUTPUT_ELEMENT[name])
        elif name in _STRING_SCAN:
            extra = {m: -(-c // 10) for m, c in _m_add(*(_scanned(b) for b in bounds)).items()}
        elif name in python_functions:
            scanned = [_scanned(b) for b in bounds]
            extra = _m_add({(): _PYTHON_CALL}, _m_scale(_m_add(*scanned), 2),
                           _m_scale(scanned[0], _PYTHON_PER_MATCH.get(name, 0)))
        elif name in ("_==_", "_!=_") and not all(_m_constant(s) for s in sizes):
            # Equality stops at the smaller operand: a literal or scalar side makes it O(1).
            constant = [s for s in sizes if _m_constant(s)]
            extra = _m_max(*constant) if constant else _m_add(*sizes)
        elif name == "_+_" and not all(_m_constant(s) for s in sizes):
            # Concatenation copies every element (of the input's own data: a string of at most S characters or
            # a list of at most C entries), except onto a comprehension's accumulator, which cel-cpp (and the
            # chunked rewrite, webhook.policy.cel.optimize) extends in place: counted per element already.
            extra = _m_add(*(_copied(b) for o, b in zip(operands, bounds, strict=True)
                             if not (o.kind == "ident" and o.name in accumulators)))
        else:
            extra = {}
        work = _m_add(work, extra)
        if name == "_+_":
            known_counts = [b.count for b in bounds if b.count is not None]
            count = _m_add(*known_counts) if len(known_counts) == len(bounds) else None
            return Bound(_m_add(*sizes), count), work
        if name in _SUM:
            return Bound(_m_add(*sizes), None), work
        if name == "replace" and len(sizes) >= 3:
            return Bound(_m_add(sizes[0], _m_mul(sizes[0], sizes[2])), None), work
        if name == "join":
            return Bound(_m_add(sizes[0], _m_mul(sizes[0], sizes[1])) if len(sizes) > 1 else sizes[0], None), work
        if name == "_?_:_" and len(bounds) == 3:
            # One branch or the other: as large as the larger, as many entries as the larger count.
            branches = bounds[1:]
            known = [b.count for b in branches if b.count is not None]
            return Bound(_m_max(*(b.size for b in branches)),
                         _m_max(*known) if len(known) == len(branches) else None), work
        # Reordering or selecting a list keeps its count; a field or index of the input is input data.
        count = bounds[0].count if name in _KEEPS_STRUCTURE else None
        if name == "orValue" and len(bounds) > 1 and count is not None:
            count = _m_max(count, counts[1])
        if name in ("_[_]", "_[?_]", "_?._") and _structural(bounds[0].count):
            count = _M_COUNT
        if name in _SAME or name.startswith("@"):
            return Bound(_m_max(*sizes), count), work
        return Bound(_m_max(*sizes) if not all(_m_constant(s) for s in sizes) else _M_ONE, count), work

    root, root_work = walk(ast.root, {}, 0)
    result = Estimate(worst, work=_m_to_work(root_work), value=root)
    degree = max(worst, default=0)
    if degree >= 2:
        result.error = ("expression may build a value that grows faster than its input (e.g. "
                        "s.replace(x, s)); Tollgate rejects super-linear growth")
    elif worst.get(1, 0) > MAX_GROWTH:
        result.error = (f"expression may build a value {worst[1]} times the size of its input "
                        f"(e.g. nested cel.bind doubling a string); the limit is {MAX_GROWTH}")
    return result


def _accu_name(node: Node) -> str:
    """The accumulator variable cel-cpp's macros and cel.bind use, read back from the AST."""
    return node.accu_var
