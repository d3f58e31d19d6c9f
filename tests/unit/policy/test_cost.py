"""The CEL cost estimate is an upper bound: every function has a rule, and generated expressions stay under it.

As cel-go's estimator (checker/cost.go) and Kubernetes' library estimator (k8s.io/apiserver/pkg/cel/library/
cost.go), every function the environment declares has a cost and a result-size rule
(:mod:`webhook.policy.cel.cost`); the property test evaluates generated expressions over sized inputs and holds
the estimate above the size of what they build and above a model of the work they do.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cel_expr_python import cel
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.unit.policy.helpers import policy
from webhook.policy import compile_policy
from webhook.policy.budget import measure
from webhook.policy.cel import ast as celast
from webhook.policy.cel import cost, library, rewrites, scope
from webhook.policy.cel.env import T, environment
from webhook.policy.cel.library._decl import function, member

ENV = environment()


# -- the attack of issue 29 ----------------------------------------------------------------------------------------

def _nested(depth: int, inner: str = "object.metadata.name") -> str:
    for _ in range(depth):
        inner = f"lists.range(20).map(i, {inner}).join('')"
    return inner


def test_map_and_join_are_sized_by_count_times_element() -> None:
    # One level: twenty copies of the name. The old estimate sized the map like its range (20) and the join like
    # one element: below what evaluation builds.
    estimated = ENV.compile(_nested(1)).estimated
    assert estimated is not None and estimated.value is not None
    name = "x" * 50
    built = len(ENV.compile(_nested(1)).eval(ENV.Activation({"object": {"metadata": {"name": name}}})).value())
    size = measure([{"metadata": {"name": name}}])
    assert built == 1000
    assert estimated.value.size_at(size.bytes, size.largest_collection, size.longest_string) >= built


def test_nested_map_join_in_one_expression_is_refused_at_compile_time() -> None:
    result = compile_policy(policy("nest", kind="AdmissionPolicy", namespace="team-a",
                                   validations=[{"expression": f"size({_nested(5)}) > 0"}]))
    assert result.policy is None
    message = result.condition["message"]
    assert message.startswith("spec.validations[0].expression:"), message
    assert "times the size of its input" in message


def test_nested_map_join_through_variables_is_refused_at_compile_time() -> None:
    # The tenant policy: each variable repeats the previous one twenty times (5 deep: 20⁵ × the name,
    # 3.6-4.4 s and 1.6 GB evaluated inline). The second variable is already 400 times the input.
    variables = [{"name": "v0", "expression": "object.metadata.name"}]
    variables += [{"name": f"v{i}", "expression": f"lists.range(20).map(i, variables.v{i - 1}).join('')"}
                  for i in range(1, 6)]
    result = compile_policy(policy("nest", kind="AdmissionPolicy", namespace="team-a", variables=variables,
                                   validations=[{"expression": "size(variables.v5) > 0"}]))
    assert result.policy is None
    message = result.condition["message"]
    assert message.startswith("spec.variables[2].expression:"), message
    assert "400 times the size of its input" in message
    assert result.matchable is not None and result.matchable.error  # answered per failurePolicy, not ignored


def test_one_repetition_is_accepted_with_its_size() -> None:
    result = compile_policy(policy("once", validations=[{"expression": f"size({_nested(1)}) > 0"}]))
    assert result.policy is not None, result.condition


@pytest.mark.parametrize(("expression", "built"), [
    ("['a', 'b', 'c'].join('--')", 7),  # a separator between two elements
    ("'aaa'.replace('a', 'xyz')", 9),  # each match replaced
    ("'abc'.replace('', '--')", 11),  # the empty string matches at each of the 4 positions
    ("'a,b,,c'.split(',').size() == 4 ? ['', '', '', ''] : []", 4),  # split's parts may be empty
    ("'%s-%s'.format([12345678, 'ab'])", 11),  # a number is rendered in digits
    ("strings.quote('a\\x01')", 4),
    ("base64.encode(b'abcd')", 8),
])
def test_results_are_sized_by_their_rule(expression: str, built: int) -> None:
    estimated = ENV.compile(expression).estimated
    assert estimated is not None and estimated.value is not None
    assert estimated.value.size_at(1, 1, 1) >= built


def test_a_result_is_sized_by_its_rule_not_by_the_checkers_type() -> None:
    # cel-cpp checks `l.distinct().map(x, x + x)` as list(int) (distinct's type parameter bound by `+`), yet it
    # builds strings twice the input's: found by the property test below.
    compiled = ENV.compile("object.l.distinct().map(x, cel.bind(y, x, y + y))")
    obj = {"l": ["XX"]}
    assert compiled.eval(ENV.Activation({"object": obj})).plain_value() == ["XXXX"]
    assert compiled.estimated is not None and compiled.estimated.value is not None
    size = measure([obj])
    assert compiled.estimated.value.size_at(size.bytes, size.largest_collection, size.longest_string) >= 4


def test_rule_table_adds_the_python_rules_and_combines_a_shared_name() -> None:
    table = cost.rule_table({"string": cost.PYTHON_TEXT, "newFunction": cost.PYTHON_SCALAR})
    assert table["newFunction"] is cost.PYTHON_SCALAR and table["lowerAscii"] is cost.NATIVE_RULES["lowerAscii"]
    big = cost.Bound({(1,): 3}, None)
    call = cost.Call("string", (celast.Node(kind="ident", name="x"),), (big,))
    native, python = cost.NATIVE_RULES["string"], cost.PYTHON_TEXT
    assert table["string"].cost(call) == {(): cost.PYTHON_CALL, (1,): 6}  # the Python overload's, the larger
    assert native.cost(call) == {(1,): 1}
    assert table["string"].size(call).size == {(1,): 3, (): 24} == python.size(call).size
    assert cost.either(native, python).size(call) == table["string"].size(call)


def test_a_python_rule_never_lowers_the_native_rule_of_the_same_name() -> None:
    cheap = cost.Rule(cost.Fixed(0), cost.scalar)
    table = cost.rule_table({"lowerAscii": cheap})
    call = cost.Call("lowerAscii", (celast.Node(kind="ident", name="x"),), (cost.Bound({(1,): 1}, None),))
    assert table["lowerAscii"].size(call).size == {(1,): 1, (): 1}  # the larger of both: the input, not 1
    assert table["lowerAscii"].cost(call) == {(): 0, (1,): 1}


def test_total_adds_up_work_and_a_bound_inside_a_loop_has_no_size_at() -> None:
    assert cost.total({(0, 0, 0): 1, (1, 0, 0): 2}, {(1, 0, 0): 3, (0, 1, 0): 4}) == {
        (0, 0, 0): 1, (1, 0, 0): 5, (0, 1, 0): 4}
    assert cost.Bound({(1, 0, 1): 2, (): 1}, None).size_at(10, 3, 5) == 101
    with pytest.raises(ValueError, match="comprehension"):
        cost.Bound({(0, 0, 0, 1): 1}, None).size_at(10, 3, 5)


# -- every function has a rule -------------------------------------------------------------------------------------

def test_a_library_function_cannot_be_declared_without_a_rule() -> None:
    with pytest.raises(TypeError, match="rule"):
        member("noRule", "tg_no_rule", T.BOOL, [T.STRING], lambda s: True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="rule"):
        function("noRule", "tg_no_rule", T.BOOL, [T.STRING], lambda s: True)  # type: ignore[call-arg]


def test_a_call_without_a_rule_is_refused() -> None:
    ast = celast.decode(ENV.compile("object.metadata.name.lowerAscii() == 'a'").checked)
    rules = {name: rule for name, rule in ENV.rules.items() if name != "lowerAscii"}
    assert "lowerAscii" in cost.estimate(ast, rules).error
    assert cost.estimate(ast, ENV.rules).error == ""
    assert cost.estimate(ast).error == ""  # the native rules by default
    python = celast.decode(ENV.compile("quantity(object.s).isInteger()").checked)
    assert "'quantity'" in cost.estimate(python).error


def _declarations() -> list[Any]:
    return [*library.declarations(), *scope.declarations(), *rewrites.declarations()]


def test_every_python_declaration_carries_its_rule() -> None:
    for d in _declarations():
        assert isinstance(d.rule, cost.Rule), d.name
        assert ENV.rules[d.name] is not None


_NAME = re.compile(rb"[a-z][A-Za-z0-9]*(?:\.@?[a-z][A-Za-z0-9]*)?|(?:[a-z]+\.)?@[a-z][A-Za-z]+|_[^A-Za-z0-9 ]{1,2}_")


@functools.cache
def _native_names() -> frozenset[str]:
    """Identifier-like strings of cel-expr-python's native modules: every native function's name is among them."""
    root = Path(cel.__file__).resolve().parent
    found: set[str] = set()
    for so in [root / Path(cel.__file__).name, *root.glob("ext/*.so")]:
        for chunk in re.findall(rb"[\x21-\x7e]{2,40}", so.read_bytes()):
            if _NAME.fullmatch(chunk):
                found.add(chunk.decode())
    return frozenset(found)


def _declared(name: str) -> bool:
    """Whether the environment declares a function ``name`` (global or member, with 0-3 arguments)."""
    for k in range(4):
        args = ", ".join(["dyn(1)"] * k)
        # A qualified name (math.greatest) is a global function; as a member call it would be a select.
        for text in (f"{name}({args})",) + (() if "." in name else (f"dyn(1).{name}({args})",)):
            try:
                ENV.env.compile(text)
                return True
            except RuntimeError as e:
                if "undeclared reference" not in str(e) and "reserved" not in str(e) and "Syntax" not in str(e):
                    return True
    return False


def test_every_function_the_environment_declares_has_a_rule() -> None:
    # cel-expr-python lists no declarations, so the environment is enumerated by probing every name its native
    # modules and Tollgate's libraries could declare (global or member, 0-3 arguments).
    candidates = _native_names() | {d.name for d in _declarations()} | set(cost.NATIVE_RULES)
    declared = {n for n in candidates if not n.startswith(("_", "@")) and "@" not in n and _declared(n)}
    assert {"lowerAscii", "lists.range", "sets.contains", "base64.encode", "math.greatest", "quantity",
            "strings.quote", "format", "join", "split", "replace", "url", "isSorted"} <= declared
    missing = sorted(n for n in declared if n not in ENV.rules and n not in cost.MACROS)
    assert not missing, f"no cost rule for {missing} (webhook/policy/cel/cost.py NATIVE_RULES)"


#: Every operator and macro: their expansions call operators and runtime internals (``@in``, ``math.@max``,
#: ``@sortByAssociatedKeys``, ``cel.@mapInsert``, ``@not_strictly_false``) that cannot be called by name.
OPERATORS_AND_MACROS = [
    "1 + 2 - 3 * 4 / 5 % 6 > 0", "-1 < 0 && !false || 1 <= 2", "1 >= 0 && 1 != 2 && 1 == 1", "'a' in ['a']",
    "{'a': 1}.?a.orValue(0) > 0", "[1][?0].hasValue()", "object.x[?0].or(optional.none()).hasValue()",
    "(true ? [1] : [2])[0] == 1", "[1].all(x, x > 0)", "[1].exists(x, x > 0)", "[1].exists_one(x, x > 0)",
    "[1].map(x, x).size() == 1", "[1].map(x, x > 0, x).size() == 1", "[1].filter(x, x > 0).size() == 1",
    "[1].sortBy(x, -x)[0] == 1", "math.greatest(1, 2) == 2", "math.least([1, 2]) == 1",
    "{'a': 1}.transformMap(k, v, v + 1).size() == 1", "[1].transformList(i, v, v).size() == 1",
    "{'a': 1}.transformMapEntry(k, v, {k: v}).size() == 1", "cel.bind(x, 1, x + 1) == 2",
    "optional.of(1).optMap(x, x + 1).orValue(0) == 2", "optional.of(1).optFlatMap(x, optional.of(x)).hasValue()",
    "has(object.a)", "[1].all(i, v, v > 0)", "[1].exists(i, v, v > 0)", "[1].existsOne(i, v, v > 0)",
    "{'a': 1}.a == 1", "b'a' + b'b' == b'ab'", "duration('1s') + duration('1s') > duration('1s')",
]


@pytest.mark.parametrize("expression", OPERATORS_AND_MACROS)
def test_every_operator_and_macro_expansion_has_a_rule(expression: str) -> None:
    compiled = ENV.compile(expression)  # a call without a rule is refused here
    names = {n.name for n in celast.decode(compiled.checked).root.walk() if n.kind == "call"}
    assert names <= set(ENV.rules), names - set(ENV.rules)


def test_every_native_rule_names_a_declared_function() -> None:
    # No stale entries: each name of the table is declared (operators and macro internals are checked by use).
    stale = [n for n in cost.NATIVE_RULES if not n.startswith(("_", "@", "!", "-")) and "@" not in n
             and not _declared(n)]
    assert not stale, stale


# -- the property: generated expressions stay under their estimate -------------------------------------------------

@dataclass(frozen=True)
class Expr:
    """A generated CEL expression, its Python model and the model's work proxy (see :func:`_run`)."""

    text: str
    run: Callable[[dict[str, Any], list[int]], Any]


def _size(v: Any) -> int:
    """A value's size as the estimate counts it: a string's bytes, a list's entries' sizes, at least 1."""
    if isinstance(v, str):
        return max(1, len(v.encode()))
    if isinstance(v, list):
        return max(1, sum(_size(e) for e in v))
    return 1


def _built(ticks: list[int], v: Any, per_entry: int = 0) -> Any:
    """Charge the work proxy for building ``v``: a step, and a tenth of a unit per byte of a new string or
    ``per_entry`` units per entry of a new list (whose entries are shared, not copied)."""
    ticks[0] += 1 + (per_entry * len(v) if isinstance(v, list) else _size(v) // 10)
    return v


def _leaf_strings(names: tuple[str, ...]) -> st.SearchStrategy[Expr]:
    options = [st.just(Expr("object.s", lambda env, t: env["object"]["s"])),
               st.sampled_from(["a", "b,a", "xyz"]).map(lambda s: Expr(repr(s), lambda env, t, s=s: s))]
    options += [st.just(Expr(n, lambda env, t, n=n: env[n])) for n in names]
    return st.one_of(options)


def _strings(depth: int, names: tuple[str, ...]) -> st.SearchStrategy[Expr]:
    if depth <= 0:
        return _leaf_strings(names)
    s, lst = _strings(depth - 1, names), _lists(depth - 1, names)

    def concat(a: Expr, b: Expr) -> Expr:
        return Expr(f"({a.text} + {b.text})", lambda env, t: _built(t, a.run(env, t) + b.run(env, t)))

    def join(xs: Expr, sep: str) -> Expr:
        return Expr(f"{xs.text}.join({sep!r})", lambda env, t: _built(t, sep.join(xs.run(env, t)), 2))

    def replace(a: Expr, old: str, b: Expr) -> Expr:
        return Expr(f"{a.text}.replace({old!r}, {b.text})",
                    lambda env, t: _built(t, a.run(env, t).replace(old, b.run(env, t))))

    def lower(a: Expr) -> Expr:
        return Expr(f"{a.text}.lowerAscii()", lambda env, t: _built(t, a.run(env, t).lower()))

    def fmt(a: Expr, b: Expr) -> Expr:
        return Expr(f"'%s-%s'.format([{a.text}, {b.text}])",
                    lambda env, t: _built(t, f"{a.run(env, t)}-{b.run(env, t)}"))

    def count(xs: Expr) -> Expr:
        return Expr(f"string(size({xs.text}))", lambda env, t: _built(t, str(len(xs.run(env, t)))))

    def choose(a: Expr, b: Expr) -> Expr:
        return Expr(f"(size({a.text}) > 2 ? {a.text} : {b.text})",
                    lambda env, t: a.run(env, t) if len(a.run(env, t)) > 2 else b.run(env, t))

    def bind(a: Expr) -> Expr:
        return Expr(f"cel.bind(x, {a.text}, x + x)", lambda env, t: _built(t, a.run(env, t) * 2))

    return st.one_of(
        _leaf_strings(names),
        st.builds(concat, s, s),
        st.builds(join, lst, st.sampled_from(["", ",", "--"])),
        st.builds(replace, s, st.sampled_from(["a", ","]), s),
        st.builds(lower, s),
        st.builds(fmt, s, s),
        st.builds(count, lst),
        st.builds(choose, s, s),
        st.builds(bind, s),
    )


def _lists(depth: int, names: tuple[str, ...]) -> st.SearchStrategy[Expr]:
    own = st.just(Expr("object.l", lambda env, t: env["object"]["l"]))
    if depth <= 0:
        return own
    s, lst = _strings(depth - 1, names), _lists(depth - 1, names)
    var = f"v{depth}"
    inner = _strings(depth - 1, (*names, var))

    def split(a: Expr, sep: str) -> Expr:
        return Expr(f"{a.text}.split({sep!r})", lambda env, t: _built(t, a.run(env, t).split(sep), 12))

    def mapped(xs: Expr, body: Expr) -> Expr:
        def run(env: dict[str, Any], t: list[int]) -> Any:
            return _built(t, [body.run({**env, var: e}, t) for e in xs.run(env, t)], 130)
        return Expr(f"{xs.text}.map({var}, {body.text})", run)

    def filtered(xs: Expr, needle: str) -> Expr:
        def run(env: dict[str, Any], t: list[int]) -> Any:
            return _built(t, [e for e in xs.run(env, t) if needle in e], 130)
        return Expr(f"{xs.text}.filter({var}, {var}.contains({needle!r}))", run)

    def ranged(n: int, body: Expr) -> Expr:
        return Expr(f"lists.range({n}).map({var}, {body.text})",
                    lambda env, t: _built(t, [body.run(env, t) for _ in range(n)], 130))

    def concat(a: Expr, b: Expr) -> Expr:
        return Expr(f"({a.text} + {b.text})", lambda env, t: _built(t, a.run(env, t) + b.run(env, t)))

    def pair(a: Expr, b: Expr) -> Expr:
        return Expr(f"[{a.text}, {b.text}]", lambda env, t: _built(t, [a.run(env, t), b.run(env, t)]))

    def distinct(xs: Expr) -> Expr:
        return Expr(f"{xs.text}.distinct()", lambda env, t: _built(t, list(dict.fromkeys(xs.run(env, t))), 10))

    outer = _strings(depth - 1, names)
    return st.one_of(
        own,
        st.builds(split, s, st.sampled_from([",", "a"])),
        st.builds(mapped, lst, inner),
        st.builds(filtered, lst, st.sampled_from(["a", ","])),
        st.builds(ranged, st.integers(0, 8), outer),
        st.builds(concat, lst, lst),
        st.builds(pair, s, s),
        st.builds(distinct, lst),
    )


_ALPHABET = st.text(alphabet="ab,X", max_size=12)
_OBJECTS = st.fixed_dictionaries({"s": _ALPHABET, "l": st.lists(_ALPHABET, max_size=6)})
#: Largest value the model may build before the case is skipped (keeps the test fast).
_MAX_MODEL_SIZE = 20_000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(expr=st.one_of(_strings(4, ()), _lists(4, ()).map(lambda e: Expr(f"{e.text}", e.run))), obj=_OBJECTS)
def test_the_estimate_bounds_what_generated_expressions_build_and_do(expr: Expr, obj: dict[str, Any]) -> None:
    ticks = [0]
    want = expr.run({"object": obj}, ticks)
    assume(_size(want) <= _MAX_MODEL_SIZE)
    try:
        compiled = ENV.compile(expr.text)
    except RuntimeError as e:
        refusal = str(e)
        # cel-cpp's checker refuses a few generated shapes (a dyn list's element unified with an int): not ours.
        assume("no matching overload" not in refusal)
        assert "size of its input" in refusal or "faster than its input" in refusal, (expr.text, refusal)
        return  # refused at compile time: nothing is evaluated
    got = compiled.eval(ENV.Activation({"object": obj}))
    assert got.type() != T.ERROR, (expr.text, got.value())
    assert got.plain_value() == want, expr.text  # the model is CEL's semantics
    estimated = compiled.estimated
    assert estimated is not None and estimated.value is not None and not estimated.error
    size = measure([obj])
    bound = estimated.value.size_at(size.bytes, size.largest_collection, size.longest_string)
    assert bound >= _size(want), (expr.text, obj, bound, _size(want))
    assert estimated.max_bytes(size.bytes) >= _size(want), expr.text
    work = cost.work_at(estimated.work, size.bytes, size.largest_collection, size.longest_string)
    assert work >= ticks[0], (expr.text, obj, work, ticks[0])


# -- the model's figures, pinned -------------------------------------------------------------------------------

#: One or more expressions per rule and per branch of the walk: their estimates are pinned below, so a change to
#: any rule's cost or size shows here (regenerate PINNED with the snippet in :func:`_pinned`'s docstring).
PINNED_CORPUS = [
    "object.s.lowerAscii()", "object.s.upperAscii()", "object.s.trim()", "object.s.substring(1)",
    "object.s.charAt(0)", "object.s.contains('a')", "object.s.startsWith('a')", "object.s.endsWith('a')",
    "object.s.matches('a+')", "object.s.indexOf('a')", "object.s.lastIndexOf('a')", "base64.decode(object.s)",
    "base64.encode(bytes(object.s))", "string(object.n)", "string(object.s)", "object.s + object.t",
    "object.l + object.l", "[object.s, 'a'] + object.l", "object.b ? object.s : 'x'", "object.b ? object.l : []",
    "object.l[0]", "object.m['k']", "object.?m.orValue({})", "object.l[?0].orValue('a')",
    "optional.of(object.s).value()", "optional.ofNonZeroValue(object.s).or(optional.of('x')).value()",
    "object.l.first().orValue('')", "object.l.last()", "object.l.reverse()", "object.s.reverse()",
    "object.l.sort()", "object.l.sortBy(x, x)", "object.l.distinct()", "object.l.slice(0, 1)",
    "[[1], [2]].flatten()", "object.l.flatten()", "dyn(object.l)", "object.l.join(',')", "object.l.join()",
    "object.s.replace('a', 'bb')", "object.s.replace('a', 'bb', 2)", "object.s.split(',')",
    "object.s.split(',', 2)", "'%s'.format([object.s])", "'%d'.format([object.n])", "strings.quote(object.s)",
    "lists.range(10)", "lists.range(object.n)", "lists.range(5).map(i, i * 2)", "lists.range(-3)",
    "sets.contains(object.l, ['a'])", "sets.intersects(object.l, object.l)", "sets.equivalent(object.l, [])",
    "{'a': 1}.transformMap(k, v, v + 1)", "object.m.transformMapEntry(k, v, {v: k})", "object.l == ['a']",
    "object.l != object.l", "object.n == 1", "object.s == object.t", "'a' in object.l",
    "size(object.l) + object.n * 2 - 1 > 0 && !object.b || object.n % 2 == 0", "math.greatest(object.n, 1)",
    "math.least([1, object.n])", "timestamp('2024-01-01T00:00:00Z').getFullYear()",
    "duration('1s') < duration('2s')", "int(object.s)", "double(object.n)",
    "quantity(object.s).isInteger()", "quantity('1Gi').add(quantity(object.s))", "url(object.s).getHost()",
    "url(object.s).getQuery()", "isURL(object.s)", "ip(object.s).family()", "string(ip(object.s))",
    "cidr(object.s).masked()", "object.s.find('a+')", "object.s.findAll('a')", "object.s.findAll('a', 2)",
    "semver(object.s).major()", "jsonpatch.escapeKey(object.s)", "object.l.isSorted()", "object.l.min()",
    "[1, 2].sum()", "object.l.indexOf('a')", "format.dns1123Label().validate(object.s)",
    "format.named('dns1123Label').hasValue()", "object.spec.containers.all(c, c.name != '')",
    "object.spec.containers.exists(c, c.name == 'a')", "object.spec.containers.exists_one(c, c.name == 'a')",
    "object.spec.containers.map(c, c.name)", "object.spec.containers.filter(c, c.name.startsWith('a'))",
    "object.spec.containers.map(c, c.name != '', c.image)", "object.m.map(k, k + object.m[k])",
    "object.m.map(k, object.m.map(k, object.m[k]))", "object.m.map(k, object.l.map(k, k + 'a'))",
    "object.m.map(k, object.t + object.m[k])",
    "object.spec.containers.map(c, c.ports.map(p, p.name).join('/')).join(',')",
    "object.spec.containers.map(c, c.name + ' (privileged)').join(', ')",
    "object.spec.containers.map(c, string(c.ports.size()))", "cel.bind(x, object.s, x + x)",
    "cel.bind(x, object.l, x.map(y, y + 'a'))", "lists.range(20).map(i, object.s).join('')",
    "lists.range(20).map(i, lists.range(20).map(j, object.s).join('')).join('')",
    "object.s.replace('a', object.s)", "object.l.all(i, v, i < 10 && v != '')",
    "object.l.transformList(i, v, v + string(i))", "object.spec.containers.map(c, c.name + object.s)",
    "has(object.s) ? object.l.size() : 0", "object.l.map(x, [x, x]).flatten()",
    "{'a': object.s, 'b': object.t}", "[object.s, object.t].map(x, x.size())", "params.l.map(x, x + 'a')",
    "variables.v.map(x, x + 'a')", "request.userInfo.username.lowerAscii()", "object.spec.containers[0].name",
    "object.spec.containers.filter(c, c.name != '').map(c, c.image.split(':')).size()",
    "object.m.map(k, object.p[k])", "object.m.map(k, object.m.x[k])", "object.m.x.map(k, object.m.y[k])",
    "object.m.map(k, object.m[k + 'a'])", "object.l.map(k, object.m.map(j, object.m[k]))",
    "object.m.map(k, {'a': object.s}[k])", "lists.range(2 + 1)", "lists.range(3).map(i, object.m['a'][i])",
    "object.m.map(k, object.l.map(j, object.m[j]))", "[object.s].map(k, object.m.map(k, object.m[k]))",
    "object.m.map(k, object.m.map(j, object.m[k] + object.m[j]))", "object.m.map(k, dyn(object.m)[k])",
    "dyn(object.m).map(k, dyn(object.m)[k])", "dyn(object.m).map(k, dyn(object.p)[k])",
    "object.m.a.map(k, object.p.a[k])", "object.m.a.map(k, object.m.a[k])", "lists.range(math.abs(5))",
    "sets.contains(object.l + [object.s], object.l + [object.s])", "object.l.map(x, x.split(',').join('-'))",
    "object.spec.containers.map(c, c.args.join(' '))", "'a' in variables.v", "object.l + variables.v",
    "(object.l + variables.v).map(x, x)", "resource.List('v1', 'configmaps', '').items.map(x, x.metadata.name)",
    "lists.range(3).map(i, lists.range(2).map(j, object.s.split(',')).map(p, p.join('/')))",
    "b'abcdef' + bytes(object.s)", "object.spec.containers.map(c, c.args.sort().join(' '))",
    "{'a': object.s}.map(k, {'a': object.s}[k])", "{'a': object.s}.map(k, {'b': object.t}[k])",
    "{'a': object.s}.map(k, {'a': object.t}[k])", "object.l.map(x, x.split(',') + ['a'])",
    "variables.v.map(x, x).map(y, y + 'a')", "dyn(variables).v.map(x, x + 'a')",
    "object.spec.containers.map(variables, variables.name)", "cel.bind(y, object.m, y).a",
]


def _pinned(expression: str) -> tuple[Any, ...]:
    """The estimate of ``expression``, as pinned: ``(worst size, work, value size, count, entries, error)``.

    To regenerate: ``print({e: _pinned(e) for e in PINNED_CORPUS})`` and review the change.
    """
    ast = celast.decode(ENV.env.compile(rewrites.rewrite_source(expression)).serialize())
    e = cost.estimate(ast, ENV.rules)

    def items(p: Any) -> Any:
        return None if p is None else tuple(sorted(p.items()))

    value = e.value
    assert value is not None
    return (items(e.size), items(e.work), items(value.size), items(value.count), items(value.entries),
            e.error.split(";")[0], e.static_work, e.max_bytes(100))


#: ``_pinned`` of each expression of :data:`PINNED_CORPUS`.
PINNED: dict[str, tuple[Any, ...]] = {
    'object.s.lowerAscii()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 0, 1), 1)), (((1,), 1),), None, None, '', 3, 100),
    'object.s.upperAscii()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 0, 1), 1)), (((1,), 1),), None, None, '', 3, 100),
    'object.s.trim()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 0, 1), 1)), (((1,), 1),), None, None, '', 3, 100),
    'object.s.substring(1)':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 0, 1), 1)), (((), 1), ((1,), 1)), None, None, '', 5, 101),
    'object.s.charAt(0)':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 0, 1), 1)), (((), 1), ((1,), 1)), None, None, '', 5, 101),
    "object.s.contains('a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 0, 1), 1)), (((), 1),), None, None, '', 5, 101),
    "object.s.startsWith('a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 0, 1), 1)), (((), 1),), None, None, '', 5, 101),
    "object.s.endsWith('a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 0, 1), 1)), (((), 1),), None, None, '', 5, 101),
    "object.s.matches('a+')":
        (((0, 2), (1, 1)), (((0, 0, 0), 5), ((0, 0, 1), 1)), (((), 1),), None, None, '', 5, 102),
    "object.s.indexOf('a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 606), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 1),), None, None, '', 606, 101),
    "object.s.lastIndexOf('a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 606), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 1),), None, None, '', 606, 101),
    'base64.decode(object.s)':
        (((1, 1),), (((0, 0, 0), 3), ((0, 0, 1), 1)), (((1,), 1),), None, None, '', 3, 100),
    'base64.encode(bytes(object.s))':
        (((0, 4), (1, 2)), (((0, 0, 0), 5), ((0, 0, 1), 1), ((1, 0, 0), 2)), (((), 4), ((1,), 2)), None, None, '', 5,
         204),
    'string(object.n)':
        (((0, 24), (1, 1)), (((0, 0, 0), 603), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 24), ((1,), 1)), None, None, '',
         603, 124),
    'string(object.s)':
        (((0, 24), (1, 1)), (((0, 0, 0), 603), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 24), ((1,), 1)), None, None, '',
         603, 124),
    'object.s + object.t':
        (((1, 2),), (((0, 0, 0), 5), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((1,), 2),), (((0, 1), 2),), (((0, 1), 2),),
         '', 5, 200),
    'object.l + object.l':
        (((1, 2),), (((0, 0, 0), 5), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((1,), 2),), (((0, 1), 2),), (((0, 1), 2),),
         '', 5, 200),
    "[object.s, 'a'] + object.l":
        (((0, 1), (1, 2)), (((0, 0, 0), 8), ((0, 0, 1), 1), ((0, 1, 0), 1), ((1, 0, 0), 1)), (((), 1), ((1,), 2)),
         (((), 2), ((0, 1), 1)), (((), 2), ((0, 1), 1)), '', 8, 201),
    "object.b ? object.s : 'x'":
        (((0, 1), (1, 1)), (((0, 0, 0), 6),), (((), 1), ((1,), 1)), None, None, '', 6, 101),
    'object.b ? object.l : []':
        (((0, 1), (1, 1)), (((0, 0, 0), 6),), (((), 1), ((1,), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)),
         '', 6, 101),
    'object.l[0]':
        (((0, 1), (1, 1)), (((0, 0, 0), 4),), (((1,), 1),), (((0, 1), 1),), None, '', 4, 101),
    "object.m['k']":
        (((0, 1), (1, 1)), (((0, 0, 0), 4),), (((1,), 1),), (((0, 1), 1),), None, '', 4, 101),
    'object.?m.orValue({})':
        (((0, 1), (1, 1)), (((0, 0, 0), 5),), (((), 1), ((1,), 1)), (((), 1), ((0, 1), 1)), None, '', 5, 101),
    "object.l[?0].orValue('a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 6),), (((), 1), ((1,), 1)), None, None, '', 6, 101),
    'optional.of(object.s).value()':
        (((1, 1),), (((0, 0, 0), 4),), (((1,), 1),), (((0, 1), 1),), None, '', 4, 100),
    "optional.ofNonZeroValue(object.s).or(optional.of('x')).value()":
        (((0, 1), (1, 1)), (((0, 0, 0), 7),), (((), 1), ((1,), 1)), None, None, '', 7, 101),
    "object.l.first().orValue('')":
        (((0, 1), (1, 1)), (((0, 0, 0), 5),), (((), 1), ((1,), 1)), None, None, '', 5, 101),
    'object.l.last()':
        (((1, 1),), (((0, 0, 0), 3),), (((1,), 1),), (((0, 1), 1),), None, '', 3, 100),
    'object.l.reverse()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 0, 1), 1), ((0, 1, 0), 1)), (((1,), 1),), (((0, 1), 1),), None, '', 3, 100),
    'object.s.reverse()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 0, 1), 1), ((0, 1, 0), 1)), (((1,), 1),), (((0, 1), 1),), None, '', 3, 100),
    'object.l.sort()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 1, 0), 10)), (((1,), 1),), (((0, 1), 1),), None, '', 3, 100),
    'object.l.sortBy(x, x)':
        (((0, 1), (1, 1)), (((0, 0, 0), 8), ((0, 1, 0), 145), ((1, 0, 0), 1)), (((), 1), ((1,), 1)), (((0, 1), 1),),
         None, '', 8, 101),
    'object.l.distinct()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 1, 0), 10)), (((1,), 1),), (((0, 1), 1),), None, '', 3, 100),
    'object.l.slice(0, 1)':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 1)), (((), 1), ((1,), 1)), (((0, 1), 1),), None, '', 5, 101),
    '[[1], [2]].flatten()':
        (((0, 2),), (((0, 0, 0), 10),), (((), 2),), None, None, '', 10, 2),
    'object.l.flatten()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 1, 0), 2)), (((1,), 1),), None, None, '', 3, 100),
    'dyn(object.l)':
        (((1, 1),), (((0, 0, 0), 3),), (((1,), 1),), (((0, 1), 1),), None, '', 3, 100),
    "object.l.join(',')":
        (((0, 1), (1, 1)), (((0, 0, 0), 4), ((0, 1, 0), 3), ((1, 0, 0), 1)), (((0, 1), 1), ((1,), 1)), None, None, '',
         4, 101),
    'object.l.join()':
        (((1, 1),), (((0, 0, 0), 3), ((0, 1, 0), 2), ((1, 0, 0), 1)), (((1,), 1),), None, None, '', 3, 100),
    "object.s.replace('a', 'bb')":
        (((0, 2), (1, 3)), (((0, 0, 0), 7), ((0, 0, 1), 1), ((1, 0, 0), 1)), (((), 2), ((1,), 3)), None, None, '', 7,
         302),
    "object.s.replace('a', 'bb', 2)":
        (((0, 2), (1, 3)), (((0, 0, 0), 8), ((0, 0, 1), 1), ((1, 0, 0), 1)), (((), 2), ((1,), 3)), None, None, '', 8,
         302),
    "object.s.split(',')":
        (((0, 1), (1, 2)), (((0, 0, 0), 16), ((0, 0, 1), 12)), (((), 1), ((1,), 2)), (((), 1), ((1,), 1)), None, '',
         16, 201),
    "object.s.split(',', 2)":
        (((0, 1), (1, 2)), (((0, 0, 0), 17), ((0, 0, 1), 12)), (((), 1), ((1,), 2)), (((), 1), ((1,), 1)), None, '',
         17, 201),
    "'%s'.format([object.s])":
        (((0, 26), (1, 2)), (((0, 0, 0), 9), ((1, 0, 0), 2)), (((), 26), ((1,), 2)), None, None, '', 9, 226),
    "'%d'.format([object.n])":
        (((0, 26), (1, 2)), (((0, 0, 0), 9), ((1, 0, 0), 2)), (((), 26), ((1,), 2)), None, None, '', 9, 226),
    'strings.quote(object.s)':
        (((0, 2), (1, 6)), (((0, 0, 0), 4), ((0, 0, 1), 1), ((1, 0, 0), 1)), (((), 2), ((1,), 6)), None, None, '', 4,
         602),
    'lists.range(10)':
        (((0, 10),), (((0, 0, 0), 625),), (((), 10),), (((), 10),), None, '', 625, 10),
    'lists.range(object.n)':
        (((0, 100000), (1, 1)), (((0, 0, 0), 200604), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 100000),),
         (((), 100000),), None, '', 200604, 100100),
    'lists.range(5).map(i, i * 2)':
        (((0, 6), (1, 1)), (((0, 0, 0), 1302),), (((), 6),), (((), 6),), (((), 6),), '', 1302, 106),
    'lists.range(-3)':
        (((0, 1),), (((0, 0, 0), 605),), (((), 1),), (((), 1),), None, '', 605, 1),
    "sets.contains(object.l, ['a'])":
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 1)), (((), 1),), None, None, '', 5, 101),
    'sets.intersects(object.l, object.l)':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 2, 0), 1)), (((), 1),), None, None, '', 5, 101),
    'sets.equivalent(object.l, [])':
        (((0, 1), (1, 1)), (((0, 0, 0), 4), ((0, 1, 0), 1)), (((), 1),), None, None, '', 4, 101),
    "{'a': 1}.transformMap(k, v, v + 1)":
        (((0, 7), (1, 2)), (((0, 0, 0), 299),), (((), 7),), None, None, '', 299, 207),
    'object.m.transformMapEntry(k, v, {v: k})':
        (((0, 1), (1, 2)), (((0, 0, 0), 4), ((0, 1, 0), 144)), (((), 1), ((1,), 2)), None, None, '', 4, 201),
    "object.l == ['a']":
        (((0, 1), (1, 1)), (((0, 0, 0), 6),), (((), 1),), None, None, '', 6, 101),
    'object.l != object.l':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((1, 0, 0), 2)), (((), 1),), None, None, '', 5, 101),
    'object.n == 1':
        (((0, 1), (1, 1)), (((0, 0, 0), 5),), (((), 1),), None, None, '', 5, 101),
    'object.s == object.t':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((1, 0, 0), 2)), (((), 1),), None, None, '', 5, 101),
    "'a' in object.l":
        (((0, 1), (1, 1)), (((0, 0, 0), 4), ((0, 1, 0), 3)), (((), 1),), None, None, '', 4, 101),
    'size(object.l) + object.n * 2 - 1 > 0 && !object.b || object.n % 2 == 0':
        (((0, 2), (1, 1)), (((0, 0, 0), 23),), (((), 1),), None, None, '', 23, 102),
    'math.greatest(object.n, 1)':
        (((0, 1), (1, 1)), (((0, 0, 0), 4),), (((), 1),), None, None, '', 4, 101),
    'math.least([1, object.n])':
        (((0, 1), (1, 1)), (((0, 0, 0), 5),), (((), 1),), None, None, '', 5, 101),
    "timestamp('2024-01-01T00:00:00Z').getFullYear()":
        (((0, 20),), (((0, 0, 0), 3),), (((), 1),), None, None, '', 3, 20),
    "duration('1s') < duration('2s')":
        (((0, 2),), (((0, 0, 0), 5),), (((), 1),), None, None, '', 5, 2),
    'int(object.s)':
        (((0, 1), (1, 1)), (((0, 0, 0), 3),), (((), 1),), None, None, '', 3, 101),
    'double(object.n)':
        (((0, 1), (1, 1)), (((0, 0, 0), 3),), (((), 1),), None, None, '', 3, 101),
    'quantity(object.s).isInteger()':
        (((0, 64), (1, 1)), (((0, 0, 0), 1332), ((0, 0, 1), 2), ((0, 1, 0), 2), ((1, 0, 0), 2)), (((), 1),), None,
         None, '', 1332, 164),
    "quantity('1Gi').add(quantity(object.s))":
        (((0, 131), (1, 1)), (((0, 0, 0), 2074), ((0, 0, 1), 2), ((0, 1, 0), 2), ((1, 0, 0), 2)),
         (((), 131), ((1,), 1)), None, None, '', 2074, 231),
    'url(object.s).getHost()':
        (((0, 128), (1, 1)), (((0, 0, 0), 1332), ((0, 0, 1), 2), ((0, 1, 0), 2), ((1, 0, 0), 2)),
         (((), 128), ((1,), 1)), None, None, '', 1332, 228),
    'url(object.s).getQuery()':
        (((0, 256), (1, 3)), (((0, 0, 0), 1332), ((0, 0, 1), 2), ((0, 1, 0), 2), ((1, 0, 0), 2)),
         (((), 256), ((1,), 3)), None, None, '', 1332, 556),
    'isURL(object.s)':
        (((0, 1), (1, 1)), (((0, 0, 0), 603), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 1),), None, None, '', 603, 101),
    'ip(object.s).family()':
        (((0, 64), (1, 1)), (((0, 0, 0), 1332), ((0, 0, 1), 2), ((0, 1, 0), 2), ((1, 0, 0), 2)), (((), 1),), None,
         None, '', 1332, 164),
    'string(ip(object.s))':
        (((0, 88), (1, 1)), (((0, 0, 0), 1332), ((0, 0, 1), 2), ((0, 1, 0), 2), ((1, 0, 0), 2)),
         (((), 88), ((1,), 1)), None, None, '', 1332, 188),
    'cidr(object.s).masked()':
        (((0, 128), (1, 1)), (((0, 0, 0), 1332), ((0, 0, 1), 2), ((0, 1, 0), 2), ((1, 0, 0), 2)),
         (((), 128), ((1,), 1)), None, None, '', 1332, 228),
    "object.s.find('a+')":
        (((0, 3), (1, 1)), (((0, 0, 0), 608), ((0, 0, 1), 3), ((0, 1, 0), 3)), (((), 3), ((1,), 1)), None, None, '',
         608, 103),
    "object.s.findAll('a')":
        (((0, 1), (1, 2)), (((0, 0, 0), 606), ((0, 0, 1), 1202), ((0, 1, 0), 1202)), (((), 1), ((1,), 2)),
         (((), 1), ((1,), 1)), None, '', 606, 201),
    "object.s.findAll('a', 2)":
        (((0, 1), (1, 2)), (((0, 0, 0), 609), ((0, 0, 1), 1202), ((0, 1, 0), 1202)), (((), 1), ((1,), 2)),
         (((), 1), ((1,), 1)), None, '', 609, 201),
    'semver(object.s).major()':
        (((0, 64), (1, 1)), (((0, 0, 0), 1332), ((0, 0, 1), 2), ((0, 1, 0), 2), ((1, 0, 0), 2)), (((), 1),), None,
         None, '', 1332, 164),
    'jsonpatch.escapeKey(object.s)':
        (((0, 2), (1, 2)), (((0, 0, 0), 603), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 2), ((1,), 2)), None, None, '',
         603, 202),
    'object.l.isSorted()':
        (((0, 1), (1, 1)), (((0, 0, 0), 603), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 1),), None, None, '', 603, 101),
    'object.l.min()':
        (((0, 64), (1, 1)), (((0, 0, 0), 603), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 64), ((1,), 1)), None, None, '',
         603, 164),
    '[1, 2].sum()':
        (((0, 2),), (((0, 0, 0), 608),), (((), 1),), None, None, '', 608, 2),
    "object.l.indexOf('a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 606), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 1),), None, None, '', 606, 101),
    'format.dns1123Label().validate(object.s)':
        (((0, 2560), (1, 8)), (((0, 0, 0), 1333), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((), 2560), ((1,), 8)), None,
         None, '', 1333, 3360),
    "format.named('dns1123Label').hasValue()":
        (((0, 76),), (((0, 0, 0), 628),), (((), 1),), None, None, '', 628, 76),
    "object.spec.containers.all(c, c.name != '')":
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 17)), (((), 1),), None, None, '', 5, 101),
    "object.spec.containers.exists(c, c.name == 'a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 18)), (((), 1),), None, None, '', 5, 101),
    "object.spec.containers.exists_one(c, c.name == 'a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 8), ((0, 1, 0), 19)), (((), 1),), None, None, '', 8, 101),
    'object.spec.containers.map(c, c.name)':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 136), ((1, 0, 0), 1)), (((), 1), ((1,), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 101),
    "object.spec.containers.filter(c, c.name.startsWith('a'))":
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 142), ((0, 1, 1), 1), ((1, 0, 0), 1)), (((), 1), ((1,), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 101),
    "object.spec.containers.map(c, c.name != '', c.image)":
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 143), ((1, 0, 0), 1)), (((), 1), ((1,), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 101),
    'object.m.map(k, k + object.m[k])':
        (((0, 1), (1, 2)), (((0, 0, 0), 4), ((0, 1, 0), 140), ((0, 1, 1), 2), ((0, 2, 0), 2), ((1, 0, 0), 2)),
         (((), 1), ((1,), 2)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 201),
    'object.m.map(k, object.m.map(k, object.m[k]))':
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 4), ((0, 1, 0), 139), ((0, 2, 0), 138), ((1, 1, 0), 2)),
         (((), 1), ((0, 1), 1), ((1, 1), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 10101),
    "object.m.map(k, object.l.map(k, k + 'a'))":
        (((0, 1), (1, 1), (2, 1)),
         (((0, 0, 0), 4), ((0, 1, 0), 139), ((0, 2, 0), 140), ((0, 2, 1), 1), ((0, 3, 0), 1), ((1, 1, 0), 2)),
         (((), 1), ((0, 1), 1), ((0, 2), 1), ((1, 1), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4,
         10101),
    'object.m.map(k, object.t + object.m[k])':
        (((0, 1), (1, 1), (2, 1)),
         (((0, 0, 0), 4), ((0, 1, 0), 141), ((0, 1, 1), 2), ((0, 2, 0), 2), ((1, 0, 0), 1), ((1, 1, 0), 1)),
         (((), 1), ((1,), 1), ((1, 1), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 10101),
    "object.spec.containers.map(c, c.ports.map(p, p.name).join('/')).join(',')":
        (((0, 2), (1, 3)), (((0, 0, 0), 10), ((0, 1, 0), 148), ((0, 2, 0), 138), ((1, 0, 0), 5)),
         (((), 2), ((0, 1), 3), ((1,), 2)), None, None, '', 10, 302),
    "object.spec.containers.map(c, c.name + ' (privileged)').join(', ')":
        (((0, 13), (1, 15)), (((0, 0, 0), 10), ((0, 1, 0), 168), ((0, 1, 1), 1), ((0, 2, 0), 1), ((1, 0, 0), 2)),
         (((), 3), ((0, 1), 15), ((1,), 1)), None, None, '', 10, 1513),
    'object.spec.containers.map(c, string(c.ports.size()))':
        (((0, 25), (1, 25)), (((0, 0, 0), 5), ((0, 1, 0), 740)), (((), 1), ((0, 1), 25)), (((), 1), ((0, 1), 1)),
         (((), 1), ((0, 1), 1)), '', 5, 2525),
    'cel.bind(x, object.s, x + x)':
        (((0, 1), (1, 2)), (((0, 0, 0), 6), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((1,), 2),), (((0, 1), 2),),
         (((0, 1), 2),), '', 6, 201),
    "cel.bind(x, object.l, x.map(y, y + 'a'))":
        (((0, 1), (1, 1)), (((0, 0, 0), 6), ((0, 1, 0), 139), ((0, 1, 1), 1), ((0, 2, 0), 1), ((1, 0, 0), 1)),
         (((), 1), ((0, 1), 1), ((1,), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 6, 101),
    "lists.range(20).map(i, object.s).join('')":
        (((0, 22), (1, 20)), (((0, 0, 0), 3414), ((1, 0, 0), 22)), (((), 22), ((1,), 20)), None, None, '', 3414, 2022),
    "lists.range(20).map(i, lists.range(20).map(j, object.s).join('')).join('')":
        (((0, 462), (1, 400)), (((0, 0, 0), 72138), ((1, 0, 0), 880)), (((), 462), ((1,), 400)), None, None,
         'expression may build a value 400 times the size of its input (e.g. a map or join repeating it, nested '
         'cel.bind doubling a string)',
         72138, 40462),
    "object.s.replace('a', object.s)":
        (((0, 1), (1, 2), (2, 1)), (((0, 0, 0), 7), ((0, 0, 1), 1), ((1, 0, 0), 1), ((2, 0, 0), 1)),
         (((1,), 2), ((2,), 1)), None, None,
         'expression may build a value that grows faster than its input (e.g. s.replace(x, s))', 7, 10201),
    "object.l.all(i, v, i < 10 && v != '')":
        (((0, 1), (1, 1)), (((0, 0, 0), 4), ((0, 1, 0), 20)), (((), 1),), None, None, '', 4, 101),
    'object.l.transformList(i, v, v + string(i))':
        (((0, 24), (1, 24)), (((0, 0, 0), 4), ((0, 1, 0), 786), ((0, 1, 1), 3), ((0, 2, 0), 3), ((1, 0, 0), 3)),
         (((), 1), ((0, 1), 24), ((1,), 2)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 2424),
    'object.spec.containers.map(c, c.name + object.s)':
        (((0, 1), (1, 1), (2, 1)),
         (((0, 0, 0), 5), ((0, 1, 0), 139), ((0, 1, 1), 2), ((0, 2, 0), 2), ((1, 0, 0), 1), ((1, 1, 0), 1)),
         (((), 1), ((1,), 1), ((1, 1), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 10101),
    'has(object.s) ? object.l.size() : 0':
        (((0, 1), (1, 1)), (((0, 0, 0), 20),), (((), 1),), None, None, '', 20, 101),
    'object.l.map(x, [x, x]).flatten()':
        (((0, 1), (1, 2)), (((0, 0, 0), 7), ((0, 1, 0), 139), ((1, 0, 0), 2)), (((), 1), ((1,), 2)), None, None, '',
         7, 201),
    # Disjoint parts of the input: together at most the input, plus the literal's constants.
    "{'a': object.s, 'b': object.t}":
        (((0, 7), (1, 1)), (((0, 0, 0), 7),), (((), 7), ((1,), 1)), (((), 4),), None, '', 7, 107),
    '[object.s, object.t].map(x, x.size())':
        (((0, 3), (1, 1)), (((0, 0, 0), 279),), (((), 3),), (((), 3),), (((), 3),), '', 279, 103),
    "params.l.map(x, x + 'a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 4), ((0, 1, 0), 139), ((0, 1, 1), 1), ((0, 2, 0), 1), ((1, 0, 0), 1)),
         (((), 1), ((0, 1), 1), ((1,), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 101),
    "variables.v.map(x, x + 'a')":
        (((0, 1), (1, 1)), (((0, 0, 0), 4), ((0, 1, 0), 139), ((0, 1, 1), 1), ((0, 2, 0), 1), ((1, 0, 0), 1)),
         (((), 1), ((0, 1), 1), ((1,), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 101),
    'request.userInfo.username.lowerAscii()':
        (((1, 1),), (((0, 0, 0), 4), ((0, 0, 1), 1)), (((1,), 1),), None, None, '', 4, 100),
    'object.spec.containers[0].name':
        (((0, 1), (1, 1)), (((0, 0, 0), 6),), (((1,), 1),), (((0, 1), 1),), None, '', 6, 101),
    "object.spec.containers.filter(c, c.name != '').map(c, c.image.split(':')).size()":
        (((0, 4), (1, 2)), (((0, 0, 0), 161), ((0, 0, 1), 12), ((0, 1, 0), 293), ((0, 1, 1), 12), ((1, 0, 0), 3)),
         (((), 1),), None, None, '', 161, 204),
    'object.m.map(k, object.p[k])':
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 4), ((0, 1, 0), 138), ((1, 1, 0), 1)), (((), 1), ((1, 1), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 10101),
    'object.m.map(k, object.m.x[k])':
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 4), ((0, 1, 0), 139), ((1, 1, 0), 1)), (((), 1), ((1, 1), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 10101),
    'object.m.x.map(k, object.m.y[k])':
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 5), ((0, 1, 0), 139), ((1, 1, 0), 1)), (((), 1), ((1, 1), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 10101),
    "object.m.map(k, object.m[k + 'a'])":
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 4), ((0, 1, 0), 141), ((0, 1, 1), 1), ((0, 2, 0), 1), ((1, 1, 0), 1)),
         (((), 1), ((1, 1), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 10101),
    'object.l.map(k, object.m.map(j, object.m[k]))':
        (((0, 1), (1, 1), (2, 1), (3, 1)), (((0, 0, 0), 4), ((0, 1, 0), 139), ((0, 2, 0), 138), ((1, 2, 0), 2)),
         (((), 1), ((0, 1), 1), ((1, 2), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 1010101),
    "object.m.map(k, {'a': object.s}[k])":
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 4), ((0, 1, 0), 141), ((1, 1, 0), 1)),
         (((), 1), ((0, 1), 1), ((1, 1), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 10101),
    'lists.range(2 + 1)':
        (((0, 100000),), (((0, 0, 0), 200609),), (((), 100000),), (((), 100000),), None, '', 200609, 100000),
    "lists.range(3).map(i, object.m['a'][i])":
        (((0, 3), (1, 3)), (((0, 0, 0), 1033), ((1, 0, 0), 3)), (((), 1), ((1,), 3)), (((), 4),), (((), 4),), '',
         1033, 303),
    'object.m.map(k, object.l.map(j, object.m[j]))':
        (((0, 1), (1, 1), (2, 1), (3, 1)), (((0, 0, 0), 4), ((0, 1, 0), 139), ((0, 2, 0), 138), ((1, 2, 0), 2)),
         (((), 1), ((0, 1), 1), ((1, 2), 1)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 1010101),
    '[object.s].map(k, object.m.map(k, object.m[k]))':
        (((0, 2), (1, 1)), (((0, 0, 0), 144), ((0, 1, 0), 138), ((1, 0, 0), 2)), (((), 2), ((1,), 1)), (((), 2),),
         (((), 2),), '', 144, 102),
    'object.m.map(k, object.m.map(j, object.m[k] + object.m[j]))':
        (((0, 1), (1, 1), (2, 2)),
         (((0, 0, 0), 4), ((0, 1, 0), 139), ((0, 2, 0), 143), ((0, 2, 1), 2), ((0, 3, 0), 2), ((1, 1, 0), 4)),
         (((), 1), ((0, 1), 1), ((1, 1), 2)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 20101),
    'object.m.map(k, dyn(object.m)[k])':
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 4), ((0, 1, 0), 139), ((1, 1, 0), 1)), (((), 1), ((1, 1), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 10101),
    'dyn(object.m).map(k, dyn(object.m)[k])':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 139), ((1, 0, 0), 1)), (((), 1), ((1,), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 101),
    'dyn(object.m).map(k, dyn(object.p)[k])':
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 5), ((0, 1, 0), 139), ((1, 1, 0), 1)), (((), 1), ((1, 1), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 10101),
    'object.m.a.map(k, object.p.a[k])':
        (((0, 1), (1, 1), (2, 1)), (((0, 0, 0), 5), ((0, 1, 0), 139), ((1, 1, 0), 1)), (((), 1), ((1, 1), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 10101),
    'object.m.a.map(k, object.m.a[k])':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 139), ((1, 0, 0), 1)), (((), 1), ((1,), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 101),
    'lists.range(math.abs(5))':
        (((0, 100000),), (((0, 0, 0), 200606),), (((), 100000),), (((), 100000),), None, '', 200606, 100000),
    'sets.contains(object.l + [object.s], object.l + [object.s])':
        (((0, 1), (1, 2)), (((0, 0, 0), 14), ((0, 0, 1), 2), ((0, 1, 0), 4), ((0, 2, 0), 1), ((1, 0, 0), 2)),
         (((), 1),), None, None, '', 14, 201),
    "object.l.map(x, x.split(',').join('-'))":
        (((0, 2), (1, 4)), (((0, 0, 0), 4), ((0, 1, 0), 156), ((0, 1, 1), 12), ((1, 0, 0), 7)),
         (((), 1), ((0, 1), 2), ((1,), 4)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 402),
    "object.spec.containers.map(c, c.args.join(' '))":
        (((0, 1), (1, 2)), (((0, 0, 0), 5), ((0, 1, 0), 138), ((0, 2, 0), 2), ((1, 0, 0), 3)), (((), 1), ((1,), 2)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 201),
    "'a' in variables.v":
        (((0, 1), (1, 1)), (((0, 0, 0), 4), ((0, 1, 0), 3)), (((), 1),), None, None, '', 4, 101),
    'object.l + variables.v':
        (((1, 2),), (((0, 0, 0), 5), ((0, 0, 1), 2), ((0, 1, 0), 2)), (((1,), 2),), (((0, 1), 2),), (((0, 1), 2),),
         '', 5, 200),
    '(object.l + variables.v).map(x, x)':
        (((0, 1), (1, 2)), (((0, 0, 0), 7), ((0, 0, 1), 2), ((0, 1, 0), 272), ((1, 0, 0), 2)), (((), 1), ((1,), 2)),
         (((), 1), ((0, 1), 2)), (((), 1), ((0, 1), 2)), '', 7, 201),
    "resource.List('v1', 'configmaps', '').items.map(x, x.metadata.name)":
        (((0, 10), (1, 1)), (((0, 0, 0), 633), ((0, 1, 0), 137), ((1, 0, 0), 1)), (((), 1), ((1,), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 633, 110),
    "lists.range(3).map(i, lists.range(2).map(j, object.s.split(',')).map(p, p.join('/')))":
        (((0, 22), (1, 24)), (((0, 0, 0), 5059), ((0, 0, 1), 72), ((1, 0, 0), 96)), (((), 22), ((1,), 24)),
         (((), 4),), (((), 4),), '', 5059, 2422),
    "b'abcdef' + bytes(object.s)":
        (((0, 6), (1, 1)), (((0, 0, 0), 11), ((0, 0, 1), 1), ((1, 0, 0), 1)), (((), 6), ((1,), 1)), None, None, '',
         11, 106),
    "object.spec.containers.map(c, c.args.sort().join(' '))":
        (((0, 1), (1, 2)), (((0, 0, 0), 5), ((0, 1, 0), 139), ((0, 2, 0), 12), ((1, 0, 0), 3)), (((), 1), ((1,), 2)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 201),
    "{'a': object.s}.map(k, {'a': object.s}[k])":
        (((0, 2), (1, 1)), (((0, 0, 0), 287), ((1, 0, 0), 1)), (((), 2), ((1,), 1)), (((), 3),), (((), 3),), '', 287,
         102),
    "{'a': object.s}.map(k, {'b': object.t}[k])":
        (((0, 3), (1, 2)), (((0, 0, 0), 288), ((1, 0, 0), 2)), (((), 3), ((1,), 2)), (((), 3),), (((), 3),), '', 288,
         203),
    "{'a': object.s}.map(k, {'a': object.t}[k])":
        (((0, 3), (1, 2)), (((0, 0, 0), 288), ((1, 0, 0), 2)), (((), 3), ((1,), 2)), (((), 3),), (((), 3),), '', 288,
         203),
    "object.l.map(x, x.split(',') + ['a'])":
        (((0, 2), (1, 2)), (((0, 0, 0), 4), ((0, 1, 0), 156), ((0, 1, 1), 12), ((1, 0, 0), 4)),
         (((), 1), ((0, 1), 2), ((1,), 2)), (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 4, 202),
    "variables.v.map(x, x).map(y, y + 'a')":
        (((0, 3), (1, 1)),
         (((0, 0, 0), 146), ((0, 0, 1), 1), ((0, 1, 0), 275), ((0, 1, 1), 1), ((0, 2, 0), 1), ((1, 0, 0), 2)),
         (((), 3), ((0, 1), 1), ((1,), 1)), (((), 2), ((0, 1), 1)), (((), 2), ((0, 1), 1)), '', 146, 103),
    "dyn(variables).v.map(x, x + 'a')":
        (((0, 1), (1, 2)), (((0, 0, 0), 5), ((1, 0, 0), 141)), (((), 1), ((1,), 2)), (((), 1), ((1,), 1)),
         (((), 1), ((1,), 1)), '', 5, 201),
    'object.spec.containers.map(variables, variables.name)':
        (((0, 1), (1, 1)), (((0, 0, 0), 5), ((0, 1, 0), 136), ((1, 0, 0), 1)), (((), 1), ((1,), 1)),
         (((), 1), ((0, 1), 1)), (((), 1), ((0, 1), 1)), '', 5, 101),
    'cel.bind(y, object.m, y).a':
        (((0, 1), (1, 1)), (((0, 0, 0), 5),), (((1,), 1),), (((0, 1), 1),), None, '', 5, 101),
}


@pytest.mark.parametrize("expression", PINNED_CORPUS)
def test_the_estimates_are_pinned(expression: str) -> None:
    assert _pinned(expression) == PINNED[expression]


def _growth(expression: str) -> int:
    """The largest factor the estimate lets ``expression`` build over its input (``cost.estimate``'s growth)."""
    estimated = ENV.compile(expression).estimated
    assert estimated is not None and estimated.value is not None
    size = estimated.value.size_at(1000, 1, 1000)
    return size // 1000


@pytest.mark.parametrize("expression", [
    # A Pod made of a controller's template, as `tollgate export` writes its variable: disjoint parts of the input.
    "{'apiVersion': 'v1', 'kind': 'Pod', 'metadata': {?'name': object.spec.template.?metadata.?name, "
    "?'labels': object.spec.template.?metadata.?labels, ?'namespace': object.spec.template.?metadata.?namespace"
    ".or(object.?metadata.?namespace)}, 'spec': object.spec.template.?spec.orValue({})}",
    "[object.metadata, object.spec, oldObject]",
])
def test_a_literal_of_disjoint_parts_of_the_input_is_at_most_the_input(expression: str) -> None:
    assert _growth(expression) <= 1


@pytest.mark.parametrize("expression", [
    "[object.spec, object.spec]",  # one part twice: twice the input
    "{'a': object.spec, 'b': object.spec.template}",  # a part inside another
    "[object.spec, object.spec.template.spec, object.metadata.name]",
])
def test_a_literal_repeating_a_part_is_sized_by_the_sum(expression: str) -> None:
    assert _growth(expression) >= 2
