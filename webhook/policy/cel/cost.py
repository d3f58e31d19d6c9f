"""Static size estimate of CEL expressions: rejects super-linear string/list growth (pure).

cel-expr-python 0.1.3 exposes no cost estimator and no runtime cost tracking; its only runtime
limit is cel-cpp's 10,000 comprehension iterations per evaluation, and it cannot interrupt a
native string operation. Kubernetes bounds ``s.replace('a', s)`` chains and ``cel.bind`` doubling
through its runtime cost budget; Tollgate bounds them statically instead: :func:`estimate` walks a
checked AST (:mod:`webhook.policy.cel.ast`) and gives every node a size bound as a polynomial in
``N``, the size of the request's data (bytes; ``variables``, ``object``... are ≤ N). An expression
is rejected when some value may grow faster than linearly (degree ≥ 2: ``s.replace('a', s)``) or
by more than :data:`MAX_GROWTH` × N (26 nested ``cel.bind(x, x + x, ...)``: 2²⁶ × N).

What it does not bound: work and memory per comprehension iteration (each element is assumed to
derive from a distinct part of the input, so ``l.map(x, x + x)`` is 2 × N, not 2 × N × size(l));
the iteration budget caps the iteration count at 10,000 instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from webhook.policy.cel.ast import CheckedAst, Node

#: Largest degree-1 growth accepted: a value may be at most this many times the input size.
MAX_GROWTH = 64

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

    def max_bytes(self, input_bytes: int) -> int:
        """The bound evaluated for a concrete input size (e.g. the AdmissionRequest's length)."""
        return sum(c * input_bytes ** d for d, c in self.size.items())


def _const_size(node: Node) -> Poly:
    if node.const_kind in ("string", "bytes"):
        return {0: max(1, len(node.value))}
    return _ONE


def estimate(ast: CheckedAst) -> Estimate:
    """Estimate the largest value ``ast`` may build (see the module docstring).

    Returns:
        An :class:`Estimate`; ``error`` is set when growth is super-linear or above
        :data:`MAX_GROWTH`.
    """
    worst: Poly = {}

    def size(node: Node, env: Mapping[str, Poly]) -> Poly:
        nonlocal worst
        kind = node.kind
        if kind == "const":
            result = _const_size(node)
        elif kind == "ident":
            result = env.get(node.name, _INPUT)
        elif kind == "select":
            result = _ONE if node.test_only else size(node.target, env) if node.target else _INPUT
        elif kind == "list":
            result = _add(_ONE, *(size(a, env) for a in node.args))
        elif kind == "struct":
            parts = [size(v, env) for _k, v in node.entries] + [size(k, env) for k, _v in node.entries if k]
            result = _add(_ONE, *parts)
        elif kind == "comprehension":
            result = _comprehension(node, env)
        else:
            result = _call(node, env)
        worst = _max(worst, result)
        return result

    def _comprehension(node: Node, env: Mapping[str, Poly]) -> Poly:
        rng, init, cond, step, res = node.args
        r = size(rng, env)
        inner = dict(env)
        inner[node.name] = r  # iteration variable: an element, at most the range
        acc = size(init, inner)
        # cel.bind(x, init, body) is a comprehension over [] whose accumulator holds init.
        accu = _accu_name(node)
        if accu:
            inner[accu] = _max(acc, r)
        size(cond, inner)
        step_size = size(step, inner)
        if accu:
            inner[accu] = _max(acc, step_size)
        return size(res, inner)

    def _call(node: Node, env: Mapping[str, Poly]) -> Poly:
        operands = ([node.target] if node.target is not None else []) + node.args
        sizes = [size(o, env) for o in operands]
        name = node.name
        if not sizes:
            return _ONE
        if name in _SUM:
            return _add(*sizes)
        if name == "replace" and len(sizes) >= 3:
            return _add(sizes[0], _mul(sizes[0], sizes[2]))
        if name == "join":
            return _add(sizes[0], _mul(sizes[0], sizes[1])) if len(sizes) > 1 else sizes[0]
        if name in _SAME or name.startswith("@"):
            return _max(*sizes)
        return _max(*sizes) if any(d > 0 for s in sizes for d in s) else _ONE

    size(ast.root, {})
    result = Estimate(worst)
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
