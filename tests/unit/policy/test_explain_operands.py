"""Top-level operands are cut out of the author's text exactly: each parses to the subtree it came from."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from webhook.policy.cel import ast as celast
from webhook.policy.cel.env import environment
from webhook.policy.explain.operands import Role, top_level_operands


def _tree(text: str) -> Any:
    """The parse tree of ``text`` without node ids (what two texts of one expression share)."""
    node = celast.decode(environment().env.compile(text, disable_check=True).serialize()).root

    def strip(n: celast.Node | None) -> Any:
        if n is None:
            return None
        return (n.kind, n.value, n.const_kind, n.name, strip(n.target), [strip(a) for a in n.args],
                [(strip(k), strip(v)) for k, v in n.entries], n.test_only, n.accu_var, n.iter_var2)

    return strip(node)


@pytest.mark.parametrize(("expression", "expected"), [
    ("a.b.c == 'x' && size(d) > 3 && (e || f) && !g.startsWith('k')",
     [("a.b.c == 'x'", Role.OPERAND), ("size(d) > 3", Role.OPERAND), ("e || f", Role.OPERAND),
      ("!g.startsWith('k')", Role.OPERAND)]),
    ("size(variables.offending) == 0", [("size(variables.offending)", Role.OPERAND)]),
    ("!(a && b)", [("a && b", Role.OPERAND)]),
    ("has(object.metadata.labels) ? x[0] : {'a': [1, 2]}",
     [("has(object.metadata.labels)", Role.CONDITION), ("x[0]", Role.THEN)]),
    ("object.spec.containers.all(c, c.image.endsWith(':latest'))",
     [("object.spec.containers", Role.RANGE), ("c.image.endsWith(':latest')", Role.FAILING)]),
    ("x.exists_one(c, c.a == 'b')", [("x", Role.RANGE), ("c.a == 'b'", Role.MATCHING)]),
    ("m.all(k, v, v > 1)", [("m", Role.RANGE)]),
    ("cel.bind(n, object.metadata.name, n == 'x')", [("n = object.metadata.name", Role.BOUND)]),
    ("object.spec.?containers.orValue([]).all(c, c.name != 'x') && has(object.spec)",
     [("object.spec.?containers.orValue([]).all(c, c.name != 'x')", Role.OPERAND), ("c.name != 'x'", Role.FAILING),
      ("has(object.spec)", Role.OPERAND)]),
    ("a[0] == b['x)']", [("a[0]", Role.OPERAND), ("b['x)']", Role.OPERAND)]),
    ("r'\\d(' == x", [("x", Role.OPERAND)]),
    ("object.metadata.name", [("object.metadata", Role.OPERAND)]),
    ("has(object.spec.x)", [("object.spec", Role.OPERAND)]),
    ("variables.ok", []),
    ("true", []),
    ("a &&", []),  # does not parse: no operands, never an exception
])
def test_operands_of_each_form(expression: str, expected: list[tuple[str, str]]) -> None:
    assert [(o.text, o.role) for o in top_level_operands(expression)] == expected


def test_the_elements_failing_an_all_are_evaluated_by_a_filter_over_the_range() -> None:
    (rng, failing) = top_level_operands("object.spec.containers.all(c, has(c.image))")
    assert failing.source == "(object.spec.containers).filter(c, !(has(c.image)))"
    assert rng.source == rng.text


_NAMES = st.sampled_from(["object", "oldObject", "request", "params", "x", "variables.y"])
_FIELDS = st.sampled_from(["spec", "name", "containers", "a_b", "items"])
_STRINGS = st.sampled_from(["'s'", '"a,b)"', "'(['", "'it\\'s'", "r'\\d+('", "'''x, ]'''",
                            '"{\\"k\\": 1}"', "b'x'"])
_SPACE = st.sampled_from(["", " ", "\n  "])


def _atoms() -> st.SearchStrategy[str]:
    """Expressions that are not literals, built from the forms the finder must cut out exactly."""
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.builds(lambda a, f: f"{a}.{f}", inner, _FIELDS),
            st.builds(lambda a, f: f"{a}.?{f}", inner, _FIELDS),
            st.builds(lambda a, s, i: f"{a}[{s}{i}{s}]", inner, _SPACE, st.one_of(_STRINGS, st.just("0"), inner)),
            st.builds(lambda a, s: f"size({s}{a}{s})", inner, _SPACE),
            st.builds(lambda a, s: f"{a}.startsWith({s})", inner, _STRINGS),
            st.builds(lambda a, b: f"{a}.orValue({b})", inner, st.one_of(inner, st.just("[]"), _STRINGS)),
            st.builds(lambda a, f: f"has({a}.{f})", inner, _FIELDS),
            st.builds(lambda a, b, m: f"{a}.{m}(e, e == {b})", inner, st.one_of(inner, _STRINGS),
                      st.sampled_from(["all", "exists", "exists_one", "map", "filter"])),
            st.builds(lambda a, b, s: f"({a}{s}||{s}{b})", inner, inner, _SPACE),
            st.builds(lambda a, b: f"({a} ? {b} : {a})", inner, inner),
            st.builds(lambda a: f"(!{a})", inner),
            st.builds(lambda a, s: f"[{a}, {s}]", inner, _STRINGS),
            st.builds(lambda a, s: f"{{{s}: {a}}}", inner, _STRINGS),
        )
    atom = st.recursive(_NAMES, extend, max_leaves=6)
    return st.one_of(atom, atom.map(lambda a: f"!{a}"))


def _parses(*texts: str) -> bool:
    try:
        for text in texts:
            environment().env.compile(text, disable_check=True)
    except RuntimeError:
        return False
    return True


def _bare(text: str) -> str:
    """``text`` without enclosing parentheses: the source the finder cuts (``(!x)`` is shown as ``!x``)."""
    text = text.strip()
    while text.startswith("(") and text.endswith(")") and _parses(text[1:-1]) and _tree(text[1:-1]) == _tree(text):
        text = text[1:-1].strip()
    return text


def _distinct(parts: list[str]) -> list[str]:
    """Each operand once, as the finder lists them: by the text it cuts, so ``(!x)`` and ``!x`` are one."""
    return list(dict.fromkeys(_bare(p) for p in parts))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(left=_atoms(), right=_atoms(), op=st.sampled_from(["==", "!=", "<", "+", "in", "-"]), space=_SPACE)
def test_each_operand_of_a_binary_operator_parses_to_its_subtree(left: str, right: str, op: str, space: str) -> None:
    text = f"{left} {op} {right}" if op == "in" else f"{left}{space}{op}{space}{right}"
    assume(_parses(left, right, text))
    operands = [o for o in top_level_operands(text) if o.role == Role.OPERAND]
    assert [_tree(o.text) for o in operands] == [_tree(p) for p in _distinct([left, right])]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(_atoms(), min_size=2, max_size=5), op=st.sampled_from(["&&", "||"]), space=_SPACE)
def test_a_logical_chain_lists_each_of_its_operands(parts: list[str], op: str, space: str) -> None:
    assume(op == "&&" or not any(p.startswith("(") for p in parts))  # (a || b) || c is one chain of three
    text = f"{space}{op}{space}".join(parts)
    assume(_parses(text, *parts))
    operands = [o for o in top_level_operands(text) if o.role == Role.OPERAND]
    assert [_tree(o.text) for o in operands] == [_tree(p) for p in _distinct(parts)]
