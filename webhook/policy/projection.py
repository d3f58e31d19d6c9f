"""Projection: bind only the fields of ``object``/``oldObject`` the programs can read (pure; no I/O).

cel-expr-python converts a bound variable whole into CEL values on its first access, in time
proportional to its JSON nodes. Policies read a few fields, so a plan (:mod:`webhook.policy.plan`)
binds the request's object pruned to what its programs can read.

**Field trees.** :func:`reads` analyses parse trees (:mod:`webhook.policy.cel.ast`) and returns, per
root variable, a :data:`Tree`: :data:`ALL` (keep the whole value) or a dict from segment to subtree.
A segment is a field name (that key of a map), ``"*"`` (every list element and every map value:
all keys are kept), or ``"#"`` (what one-variable iteration yields: every list element, every map
*key* — all keys are kept, their values only by other segments). E.g.
``{"spec": {"containers": {"*": {"image": ALL}}}, "metadata": {"labels": ALL}}``. A segment with the
empty subtree ``{}`` keeps that value's presence and type but none of its contents: a map becomes
``{}``, a list keeps its length with each element emptied, a scalar is kept.
:mod:`webhook.policy.pruning` (:func:`~webhook.policy.pruning.project`,
:class:`~webhook.policy.pruning.Projection`) builds the pruned copy.

**Soundness.** Every sub-expression evaluated on the projected object yields the same value or the
same error as on the whole object. The analysis is an abstract evaluation: for every sub-expression it
computes what its value may be (a set of :data:`_Entry`: the subtree at ``root.path``, a literal
list/map holding such subtrees, a known string constant, or something else), and marks paths in two
strengths:

* *shallow* — the path was evaluated (selected, indexed, tested with ``has()``, iterated), its
  ``type()`` or ``size()`` taken, or it was compared with a literal (``x == 'a'``, ``x != null``).
  Keeping the key with its type suffices: a scalar is always kept whole and a map or list keeps its
  type, so presence, type errors and comparisons with literals come out the same;
* *deep* (:data:`ALL`) — the value is used as a whole: passed to any function or operator not listed
  below (``==`` between two non-literals, ``in``, ``string()``, ``join()``, library functions...) or
  returned by the program. Unknown functions are deep, so nothing is pruned that one could observe.

Values flow unchanged through ``?:``, ``+`` (list concatenation; strings and numbers are scalars,
kept whole), ``dyn()``, optionals (``.?f``, ``[?k]``, ``optional.of``, ``orValue``, ``or``,
``value``), ``slice``, ``flatten``, list and map literals, ``cel.bind`` and comprehension accumulators
(iterated to a fixpoint). A comprehension keeps every element, or every key of a map, of what it
iterates (``"#"``; a two-variable one ``"*"``), so iteration counts, map keys and the iteration
budget are unchanged; ``size(x)`` likewise. ``has(x.f)`` keeps ``x.f``'s presence. An index whose
value is a known string (``x['k']``, or ``x[?f]`` with ``f`` ranging over a literal list of strings)
selects those keys; any other index reads ``"*"``. The root used bare (``object == oldObject``,
``string(object)``) keeps the root whole. ``__tg_var("x")`` (a variable routed through the
per-policy scope) is the value of ``x``'s program, analysed where it is used; an unknown variable,
an unknown expression kind, or an accumulator without a fixpoint within :data:`MAX_ROUNDS` keeps
every root whole. ``__tg_params()`` reads no object.

**Params.** :func:`params_reads` runs the same analysis with ``params`` (``__tg_params()``, the policy's
ConfigMap or selected ConfigMaps) as its one root: what an explanation may show of a policy's params
(:mod:`webhook.policy.explain`), the fields it reads and nothing else.

Conversion is the one thing a pruned copy cannot reproduce: a value cel-expr-python refuses to
convert (a tuple, an int above 2**64) fails the whole object's activation even where no expression
reads it, while the projected object may leave it out. JSON as orjson parses it never holds one.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping
from typing import TypeAlias

from webhook.policy.cel.ast import Node, decode_expr, expr_bytes

__all__ = ["ALL", "EACH", "KEYS", "MAX_ROUNDS", "PARAMS", "READS_CACHE_SIZE", "ROOTS", "Tree", "params_reads", "reads",
           "reads_of", "union", "union_reads"]


class _All(enum.Enum):
    ALL = "ALL"

    def __repr__(self) -> str:
        return "ALL"


#: Keep the whole value.
ALL = _All.ALL

#: A field tree: :data:`ALL`, or segment (a field name, :data:`EACH`, :data:`KEYS`) → subtree.
Tree: TypeAlias = "dict[str, Tree] | _All"

#: The segment for every list element and every map value.
EACH = "*"
#: The segment for what one-variable iteration yields: every list element, every map key.
KEYS = "#"

#: The variables a projection prunes.
ROOTS = ("object", "oldObject")
#: The root of :func:`params_reads`: the value of ``__tg_params()``.
PARAMS = "params"

#: Rounds of a comprehension accumulator's fixpoint before the analysis gives up (keeps every root whole).
MAX_ROUNDS = 8

#: One thing a value may be: ``(root, path, prefix)``.
#:
#: * ``root`` in :data:`ROOTS`, empty ``prefix``: the value *is* the (pruned) subtree at ``root.path``;
#: * ``root`` :data:`_CONST`, empty ``prefix``: the value is exactly the string ``path[0]``;
#: * ``root`` :data:`_OPAQUE`: some other value, read from no object;
#: * a non-empty ``prefix``: the value is a list/map literal holding the above at ``prefix``
#:   (:data:`EACH`: a list element; a key; :data:`_ANY_KEY`: under a computed key), e.g.
#:   ``[object.spec]`` is ``("object", ("spec",), ("*",))``.
_Entry: TypeAlias = tuple[str, tuple[str, ...], tuple[str, ...]]
_Value: TypeAlias = frozenset[_Entry]
_CONST = "\x00const"
_OPAQUE_ROOT = "\x00opaque"
_ANY_KEY = "\x00any"
_OPAQUE: _Entry = (_OPAQUE_ROOT, (), ())
_OTHER: _Value = frozenset({_OPAQUE})


class _Whole(Exception):
    """What is read cannot be bounded: keep every root whole."""


def _step(value: _Value, seg: str) -> _Value:
    """What selecting ``seg`` (a field name, :data:`EACH` or :data:`KEYS`) from a value may give.

    Inside a literal, a list element is reached by :data:`EACH` and :data:`KEYS` only (a field of a
    list is an error, not a value); a map literal's value by its key or :data:`EACH`, while
    :data:`KEYS` yields its keys; a value under a computed key by anything.
    """
    out: set[_Entry] = set()
    for root, path, prefix in value:
        if not prefix:
            out.add((root, (*path, seg), ()) if _is_root(root) else _OPAQUE)
            continue
        head, inner = prefix[0], (root, path, prefix[1:])
        if head == EACH:
            if seg in (EACH, KEYS):
                out.add(inner)
        elif head == _ANY_KEY:
            out.add(inner)
            if seg == KEYS:
                out.add(_OPAQUE)
        elif seg in (head, EACH):
            out.add(inner)
        elif seg == KEYS:
            out.add((_CONST, (head,), ()))
    return frozenset(out)


def _is_root(root: str) -> bool:
    """Whether an entry's ``root`` is a variable's (:data:`ROOTS`, :data:`PARAMS`), not a constant or opaque."""
    return not root.startswith("\x00")


def _field(name: str) -> str:
    """The segment for the field ``name``: a field literally named ``*`` or ``#`` is read as :data:`EACH`."""
    return EACH if name in (EACH, KEYS) else name


def _wrap(value: _Value, seg: str) -> _Value:
    """The value placed in a list literal (:data:`EACH`) or at key ``seg`` of a map literal."""
    return frozenset((root, path, (seg, *prefix)) for root, path, prefix in value)


def _strings(value: _Value) -> list[str] | None:
    """The strings ``value`` can be when it is one of known string constants, else None."""
    if not value or any(root != _CONST or prefix for root, _path, prefix in value):
        return None
    return [path[0] for _root, path, _prefix in value]


def _is_string(node: Node) -> bool:
    return node.kind == "const" and isinstance(node.value, str)


class _Reads:
    """One analysis: the trees marked so far (see the module docstring).

    Args:
        variables: name → the ``cel.expr.Expr`` (:func:`_expr`) of each program ``__tg_var("name")``
            evaluates (decoded and analysed on first use, as the engine evaluates them lazily).
    """

    def __init__(self, variables: Mapping[str, bytes], roots: tuple[str, ...] = ROOTS) -> None:
        self.trees: dict[str, Tree] = {root: {} for root in roots}
        self.variables = variables
        self.values: dict[str, _Value | None] = {}  # None while being analysed (a cycle keeps everything)

    def variable(self, name: str) -> _Value:
        """What ``__tg_var(name)`` may be: its program's value, its reads marked once."""
        if name not in self.values:
            expr = self.variables.get(name)
            if expr is None:
                raise _Whole
            self.values[name] = None
            self.values[name] = self.value(decode_expr(expr), {})
        value = self.values[name]
        if value is None:
            raise _Whole
        return value

    # -- marking ------------------------------------------------------------------------------

    def mark(self, value: _Value, *, deep: bool) -> None:
        """Keep every object path ``value`` may be: whole (``deep``), or present with its type."""
        for root, path, _prefix in value:
            if root in self.trees:  # other roots are followed (paths grow) but marked by their own analysis
                self._mark(root, path, deep)

    def _mark(self, root: str, path: tuple[str, ...], deep: bool) -> None:
        node = self.trees[root]
        if node is ALL:
            return
        if not path:
            if deep:
                self.trees[root] = ALL
            return
        for seg in path[:-1]:
            child = node.get(seg)
            if child is ALL:
                return
            if child is None:
                child = node[seg] = {}
            node = child
        last = path[-1]
        if deep:
            node[last] = ALL
        elif last not in node:
            node[last] = {}

    def select(self, value: _Value, seg: str) -> _Value:
        """Select ``seg``: the evaluation reads that path, so it is kept present."""
        out = _step(value, seg)
        self.mark(out, deep=False)
        return out

    # -- evaluation ---------------------------------------------------------------------------

    def value(self, node: Node, env: dict[str, _Value]) -> _Value:
        """What ``node``'s value may be, marking what its evaluation reads."""
        kind = node.kind
        if kind == "const":
            return frozenset({(_CONST, (node.value,), ())}) if _is_string(node) else _OTHER
        if kind == "ident":
            return self._ident(node.name, env)
        if kind == "select":
            base = self.value(node.target, env) if node.target is not None else _OTHER
            out = self.select(base, _field(node.name))
            return _OTHER if node.test_only else out
        if kind == "list":
            elements: set[_Entry] = set()
            for element in node.args:
                elements |= _wrap(self.value(element, env), EACH)
            return frozenset(elements)
        if kind == "struct":
            return self._struct(node, env)
        if kind == "comprehension":
            return self._comprehension(node, env)
        if kind == "call":
            return self._call(node, env)
        raise _Whole  # an expression kind this analysis does not know

    def use(self, node: Node, env: dict[str, _Value]) -> None:
        """Evaluate ``node`` and use its value as a whole."""
        self.mark(self.value(node, env), deep=True)

    def _ident(self, name: str, env: dict[str, _Value]) -> _Value:
        if not name.startswith(".") and name in env:
            return env[name]
        bare = name.lstrip(".")
        if bare in ROOTS:
            return frozenset({(bare, (), ())})
        head = bare.split(".", 1)[0]
        if head in ROOTS or head == "variables":
            raise _Whole  # a qualified name over a root, or variables evaluated elsewhere
        return _OTHER

    def _struct(self, node: Node, env: dict[str, _Value]) -> _Value:
        if node.name:  # a message literal: used whole
            for key, val in node.entries:
                if key is not None:
                    self.use(key, env)
                self.use(val, env)
            return _OTHER
        out: set[_Entry] = set()
        for key, val in node.entries:
            seg = _ANY_KEY
            if key is not None:
                self.use(key, env)
                if _is_string(key) and key.value not in (EACH, KEYS):
                    seg = key.value
            out |= _wrap(self.value(val, env), seg)
        return frozenset(out)

    def _comprehension(self, node: Node, env: dict[str, _Value]) -> _Value:
        iter_range, accu_init, condition, step, result = node.args
        iterated = self.value(iter_range, env)
        inner = dict(env)
        if node.iter_var2:  # (index, element) or (key, value): every key is kept by EACH
            inner[node.name] = _OTHER
            inner[node.iter_var2] = self.select(iterated, EACH)
        else:  # an element, or a key
            inner[node.name] = self.select(iterated, KEYS)
        accu = self.value(accu_init, env)
        for _ in range(MAX_ROUNDS):
            inner[node.accu_var] = accu
            self.use(condition, inner)
            grown = accu | self.value(step, inner)
            if grown == accu:
                break
            accu = grown
        else:
            raise _Whole
        return self.value(result, {**env, node.accu_var: accu})

    def _call(self, node: Node, env: dict[str, _Value]) -> _Value:
        name, target, args = node.name, node.target, node.args
        if target is not None and target.kind == "ident" and target.name not in env \
                and target.name.lstrip(".") not in ROOTS:
            name, target = f"{target.name.lstrip('.')}.{name}", None  # a namespaced function: optional.of
        if target is None:
            if name == "_?_:_" and len(args) == 3:
                self.use(args[0], env)
                return self.value(args[1], env) | self.value(args[2], env)
            if name == "_+_":  # concatenation keeps elements; a sum of strings is a new string
                return frozenset(_OPAQUE if root == _CONST and not prefix else (root, path, prefix)
                                 for a in args for root, path, prefix in self.value(a, env))
            if name in ("dyn", "optional.of") and len(args) == 1:
                return self.value(args[0], env)
            if name in ("_[_]", "_[?_]") and len(args) == 2:
                return self._index(args[0], args[1], env)
            if name == "_?._" and len(args) == 2 and _is_string(args[1]):
                return self.select(self.value(args[0], env), _field(args[1].value))
            if name == "size" and len(args) == 1:
                self.select(self.value(args[0], env), KEYS)
                return _OTHER
            if name == "type" and len(args) == 1:
                self.mark(self.value(args[0], env), deep=False)
                return _OTHER
            if name in ("_==_", "_!=_") and len(args) == 2 and "const" in (args[0].kind, args[1].kind):
                for a in args:
                    self.mark(self.value(a, env), deep=False)
                return _OTHER
            if name == "optional.none" and not args:
                return _OTHER
            if name == "__tg_params" and not args:
                return frozenset({(PARAMS, (), ())})
            if name == "__tg_var":
                if len(args) == 1 and _is_string(args[0]):
                    return self.variable(args[0].value)
                raise _Whole
        else:
            if name == "size" and not args:
                self.select(self.value(target, env), KEYS)
                return _OTHER
            if name in ("orValue", "or") and len(args) == 1:
                return self.value(target, env) | self.value(args[0], env)
            if name == "value" and not args:
                return self.value(target, env)
            if name == "hasValue" and not args:
                self.mark(self.value(target, env), deep=False)
                return _OTHER
            if name == "slice" and len(args) == 2:
                for a in args:
                    self.use(a, env)
                return self.value(target, env)
            if name == "flatten" and not args:
                return self._flatten(self.value(target, env))
        # Anything else uses its receiver and arguments whole.
        if target is not None:
            self.use(target, env)
        for a in args:
            self.use(a, env)
        return _OTHER

    def _index(self, container: Node, key: Node, env: dict[str, _Value]) -> _Value:
        base = self.value(container, env)
        index = self.value(key, env)
        strings = _strings(index)
        if strings is not None:
            out: set[_Entry] = set()
            for s in strings:
                out |= self.select(base, _field(s))
            return frozenset(out)
        self.mark(index, deep=True)
        return self.select(base, EACH)  # a list position, or any key of a map

    def _flatten(self, value: _Value) -> _Value:
        """``flatten()``: the result's elements are the elements' elements (or the elements themselves)."""
        self.select(value, KEYS)  # flatten inspects each element's type
        out = set(value)
        for root, path, prefix in value:
            if prefix:
                out.add((root, path, prefix[1:]))
            elif _is_root(root):
                out.add((root, (*path, EACH), ()))
        return frozenset(out)


def reads(*roots: Node, variables: Mapping[str, bytes] | None = None) -> dict[str, Tree]:
    """What programs can read from each root variable, the value of each used whole.

    Args:
        roots: parse trees (``celast.decode(expression.serialize()).root``; checked trees work too).
        variables: ``Expression.serialize()`` of the programs ``__tg_var("name")`` evaluates, by name
            (a policy's ``variables``, which its expressions reach when they are routed through the
            per-policy scope); decoded only when used.

    Returns:
        ``{"object": tree, "oldObject": tree}``; a root they never read has the tree ``{}``, and both
        are :data:`ALL` when the analysis cannot bound what is read.
    """
    try:
        analysis = _Reads({name: expr_bytes(serialized) for name, serialized in (variables or {}).items()})
        for root in roots:
            analysis.use(root, {})
    except (_Whole, RecursionError, ValueError, IndexError):  # ValueError, IndexError: did not decode
        return dict.fromkeys(ROOTS, ALL)
    return analysis.trees


#: Program sets whose :func:`reads_of` is kept (a policy recompiled unchanged is then a lookup).
READS_CACHE_SIZE = 1024


def reads_of(programs: tuple[bytes, ...], variables: tuple[tuple[str, bytes], ...] = ()) -> dict[str, Tree]:
    """:func:`reads` of serialized programs, cached by their expressions; the trees are shared: do not modify them.

    Args:
        programs: ``Expression.serialize()`` of each program.
        variables: ``(name, Expression.serialize())`` of the programs ``__tg_var(name)`` evaluates.
    """
    try:
        # Only the Expr identifies a program: its source info and type maps serialize in varying order.
        exprs = tuple(expr_bytes(serialized) for serialized in programs)
        named = tuple((name, expr_bytes(serialized)) for name, serialized in variables)
    except (ValueError, IndexError):  # not serialized expressions (IndexError: truncated)
        return dict.fromkeys(ROOTS, ALL)
    return _reads_of_exprs(exprs, named)


@functools.lru_cache(maxsize=READS_CACHE_SIZE)
def _reads_of_exprs(exprs: tuple[bytes, ...], variables: tuple[tuple[str, bytes], ...]) -> dict[str, Tree]:
    if len(exprs) == 1:
        return _reads_of_expr(exprs[0], variables)
    # Marks only ever grow and never depend on one another, so the analysis of several programs is the union
    # of each one's: each is cached on its own, and editing one expression of a policy re-analyses that one.
    return union_reads(_reads_of_expr(expr, variables) for expr in exprs)


@functools.lru_cache(maxsize=4 * READS_CACHE_SIZE)
def _reads_of_expr(expr: bytes, variables: tuple[tuple[str, bytes], ...]) -> dict[str, Tree]:
    analysis = _Reads(dict(variables))
    try:
        analysis.use(decode_expr(expr), {})
    except (_Whole, RecursionError, ValueError, IndexError):
        return dict.fromkeys(ROOTS, ALL)
    return analysis.trees


def params_reads(programs: tuple[bytes, ...], variables: tuple[tuple[str, bytes], ...] = ()) -> Tree:
    """What ``programs`` (and the ``variables`` programs they reach) can read of ``params`` (``__tg_params()``).

    The analysis of :func:`reads` with :data:`PARAMS` as its root; cached by the programs' expressions, the tree
    shared: do not modify it.

    Args:
        programs: ``Expression.serialize()`` of each program.
        variables: ``(name, Expression.serialize())`` of the programs ``__tg_var(name)`` evaluates.

    Returns:
        The field tree of ``params``: ``{}`` when no program reads it, :data:`ALL` when the analysis cannot bound
        what is read.
    """
    try:
        exprs = tuple(expr_bytes(serialized) for serialized in programs)
        named = tuple((name, expr_bytes(serialized)) for name, serialized in variables)
    except (ValueError, IndexError):
        return ALL
    return _params_reads_of_exprs(exprs, named)


@functools.lru_cache(maxsize=READS_CACHE_SIZE)
def _params_reads_of_exprs(exprs: tuple[bytes, ...], variables: tuple[tuple[str, bytes], ...]) -> Tree:
    analysis = _Reads(dict(variables), (PARAMS,))
    try:
        for expr in exprs:
            analysis.use(decode_expr(expr), {})
    except (_Whole, RecursionError, ValueError, IndexError):
        return ALL
    return analysis.trees[PARAMS]


def union_reads(many: Iterable[Mapping[str, Tree] | None]) -> dict[str, Tree]:
    """Per root, what any of ``many`` reads (:func:`reads` results; None, or a missing root, keeps it whole)."""
    trees: dict[str, Tree] = {root: {} for root in ROOTS}
    for reads_ in many:
        for root in ROOTS:
            trees[root] = union(trees[root], (reads_ or {}).get(root, ALL))
    return trees


def union(a: Tree, b: Tree) -> Tree:
    """A tree that keeps what ``a`` or ``b`` keeps (neither is modified)."""
    if a is ALL or b is ALL:
        return ALL
    out = dict(a)
    for key, sub in b.items():
        out[key] = union(out[key], sub) if key in out else sub
    return out
