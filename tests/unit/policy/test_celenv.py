"""The CEL environment: Kubernetes library functions and real-world expressions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures import fixture_dir
from webhook.policy.cel.env import BudgetExceeded, EvaluationError, T, compile_expression, environment, evaluate
from webhook.policy.cel.rewrites import MAX_RANGE, inline_variables, rewrite_for_runtime, rewrite_source
from webhook.policy.cel.scope import VariableScope, reset_scope, set_current_scope

ENV = environment()



def ev(expr: str, **data: Any) -> Any:
    v = ENV.compile(expr).eval(ENV.Activation(data))
    assert v.type() != T.ERROR, v.value()
    return v.plain_value()


# Examples from kubernetes.io "CEL in Kubernetes" (list, regex and set libraries).
@pytest.mark.parametrize(("expr", "want"), [
    ("[1, 2, 3].isSorted()", True),
    ("[3, 1].isSorted()", False),
    ("['a', 'b'].isSorted()", True),
    ("[1, 2, 3].sum() == 6", True),
    ("[1, 2, 3].min() == 1", True),
    ("[1, 2, 3].max() == 3", True),
    ("[1, 2, 2, 3].indexOf(2) == 1", True),
    ("[1, 2, 2, 3].lastIndexOf(2) == 2", True),
    ("[1, 2].indexOf(7) == -1", True),
    ("'abc 123'.find('[0-9]+') == '123'", True),
    ("'123 abc 456'.findAll('[0-9]+') == ['123', '456']", True),
    ("'123 abc 456'.findAll('[0-9]+', 1) == ['123']", True),
    ("sets.contains([1, 2, 3, 4], [2, 3])", True),
    ("sets.equivalent([1, 2, 3], [3, 2, 1])", True),
    ("sets.intersects([1, 2], [2, 3])", True),
    ("sets.intersects([1], [2])", False),
    # URL library
    ("isURL('https://example.com:80/path?k=v')", True),
    ("isURL('not a url')", False),
    ("url('https://example.com:80/').getScheme() == 'https'", True),
    ("url('https://example.com:80/').getHost() == 'example.com:80'", True),
    ("url('https://example.com:80/').getHostname() == 'example.com'", True),
    ("url('https://example.com:80/').getPort() == '80'", True),
    ("url('https://example.com/path').getEscapedPath() == '/path'", True),
    ("url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}", True),
    ("url('https://[::1]:80/').getHostname() == '::1'", True),
    # IP and CIDR libraries
    ("isIP('10.0.0.1') && isIP('::1')", True),
    ("isIP('10.0.0.300')", False),
    ("isIP('::ffff:10.0.0.1')", False),
    ("ip('127.0.0.1').family() == 4 && ip('::1').family() == 6", True),
    ("ip('127.0.0.1').isLoopback() && !ip('10.0.0.1').isLoopback()", True),
    ("ip('0.0.0.0').isUnspecified()", True),
    ("ip('224.0.0.1').isLinkLocalMulticast()", True),
    ("ip('169.254.169.254').isLinkLocalUnicast()", True),
    ("ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()", True),
    ("ip.isCanonical('127.0.0.1') && !ip.isCanonical('2001:DB8::1')", True),
    ("ip('2001:DB8::1') == ip('2001:db8::1')", True),
    ("isCIDR('192.168.0.0/16') && !isCIDR('192.168.0.0') && !isCIDR('192.168.0.0/33')", True),
    ("cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))", True),
    ("cidr('192.168.0.0/24').containsIP('192.168.1.1')", False),
    ("cidr('192.168.0.0/16').containsCIDR(cidr('192.168.10.0/24'))", True),
    ("cidr('192.168.0.0/16').containsCIDR('10.0.0.0/24')", False),
    ("cidr('192.168.0.0/24').prefixLength() == 24", True),
    ("cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')", True),
    ("cidr('192.168.0.1/24').ip() == ip('192.168.0.1')", True),
    # Quantity library
    ("isQuantity('1.5Gi') && isQuantity('500m') && !isQuantity('1.5GiB')", True),
    ("quantity('1Gi') == quantity('1024Mi')", True),
    ("quantity('500000').isInteger() && !quantity('50m').isInteger()", True),
    ("quantity('50k').asInteger() == 50000", True),
    ("quantity('50.703').asApproximateFloat() > 50.7", True),
    ("quantity('-50M').sign() == -1 && quantity('0').sign() == 0", True),
    ("quantity('50k').add(20) == quantity('50020')", True),
    ("quantity('50k').add(quantity('20k')) == quantity('70k')", True),
    ("quantity('50k').sub(20) == quantity('49980')", True),
    ("quantity('200M').compareTo(quantity('0.2G')) == 0", True),
    ("quantity('50M').isGreaterThan(quantity('50Mi'))", False),
    ("quantity('50M').isLessThan(quantity('50Mi'))", True),
    ("quantity('1e3') == quantity('1k')", True),
    ("'a,b'.split(',').join('-') == 'a-b'", True),
    ("'%s has %d'.format(['x', 3]) == 'x has 3'", True),
    ("cel.bind(x, 2, x * x) == 4", True),
    # quantity, url, ip and cidr: examples from kubernetes.io "CEL in Kubernetes"
    ("quantity('50M').isLessThan(quantity('100M'))", True),
    ("quantity('100M').isGreaterThan(quantity('50M'))", True),
    ("quantity('50k').add(20).sub(quantity('100k')).sub(-50000).asInteger() > 0", True),
    ("quantity('500000G').isInteger()", True),
    ("quantity('50k').asInteger()", 50000),
    ("quantity('50k').sign()", 1),
    ("quantity('50.5').asApproximateFloat()", 50.5),
    ("quantity('1Ki') == quantity('1024')", True),
    ("url('https://example.com:80/').getHost()", "example.com:80"),
    ("url('https://example.com:80/').getHostname()", "example.com"),
    ("url('https://example.com:80/').getPort()", "80"),
    ("url('https://example.com/path').getScheme()", "https"),
    ("url('https://[::1]:80/').getHost()", "[::1]:80"),
    ("url('/absolute-path').getScheme()", ""),
    ("isURL('/absolute-path')", True),
    ("ip('192.168.0.1').isGlobalUnicast()", True),
    ("ip('fe80::1').isLinkLocalUnicast() && ip('224.0.0.1').isLinkLocalMulticast()", True),
    ("cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/25'))", True),
    ("cidr('192.168.0.0/24').containsCIDR('192.168.0.0/23')", False),
    ("cidr('192.168.0.0/24').ip() == ip('192.168.0.0')", True),
    ("cidr('192.168.0.0/24').prefixLength()", 24),
    ("math.greatest(1, 5) == 5", True),
    ("{'a': 1}.?b.orValue(7) == 7", True),
])
def test_kubernetes_library(expr: str, want: Any) -> None:
    assert ev(expr) == want


@pytest.mark.parametrize("expr", ["[].min()", "quantity('1.5GiB')", "quantity('50m').asInteger()", "url('nope')",
                                  "ip('10.0.0.300')", "cidr('10.0.0.0')", "ip.isCanonical('x')"])
def test_invalid_input_is_a_cel_error(expr: str) -> None:
    v = ENV.compile(expr).eval(ENV.Activation({}))
    assert v.type() == T.ERROR


@pytest.mark.parametrize(("src", "want"), [
    ("variables.a + variables.b_2", '__tg_var("a") + __tg_var("b_2")'),
    ("params.data.x", "__tg_params().data.x"),
    ("'params and variables.a' + variables.a", "'params and variables.a' + __tg_var(\"a\")"),
    ("object.params", "object.params"),
    ("myparams", "myparams"),
])
def test_rewrite_leaves_strings_and_fields_alone(src: str, want: str) -> None:
    assert rewrite_for_runtime(src) == want


def test_scope_evaluates_variables_once() -> None:
    calls = []
    program = ENV.compile("object.x")

    class Counting:
        def eval(self, act: Any) -> Any:
            calls.append(1)
            return program.eval(act)

    act = ENV.Activation({"object": {"x": 5}})
    token = set_current_scope(VariableScope({"v": Counting()}, act, None))
    try:
        expr = ENV.compile(rewrite_for_runtime("variables.v + variables.v == 10"))
        assert expr.eval(act).plain_value() is True
    finally:
        reset_scope(token)
    assert len(calls) == 1


def _kyverno_cel_blocks() -> list[tuple[str, dict[str, Any]]]:
    root = fixture_dir("kyverno-pod-security-cel")
    out = []
    for path in sorted(root.glob("*/*/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for rule in (doc or {}).get("spec", {}).get("rules", []):
                cel_block = (rule.get("validate") or {}).get("cel")
                if cel_block:
                    out.append((f"{path.parent.name}/{rule['name']}", cel_block))
    return out


def _resources(folder: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((folder / ".kyverno-test" / "resource.yaml").read_text()) if d]


def test_every_kyverno_pod_security_expression_compiles_and_evaluates() -> None:
    blocks = _kyverno_cel_blocks()
    assert len(blocks) >= 17
    root = fixture_dir("kyverno-pod-security-cel")
    evaluated = 0
    for name, block in blocks:
        folder = next(root.glob(f"*/{name.split('/')[0]}"))
        pods = [d for d in _resources(folder) if d.get("kind") == "Pod"]
        variables = {v["name"]: ENV.compile(rewrite_for_runtime(v["expression"])) for v in block.get("variables", [])}
        exprs = [ENV.compile(rewrite_for_runtime(e["expression"])) for e in block["expressions"]]
        for pod in pods:
            act = ENV.Activation({"object": pod, "oldObject": None, "request": {}, "namespaceObject": None,
                                  "params": None, "variables": None})
            token = set_current_scope(VariableScope(variables, act, None))
            try:
                for e in exprs:
                    v = e.eval(act)
                    assert v.type() == T.BOOL, f"{name} on {pod['metadata']['name']}: {v.value()}"
                    evaluated += 1
            finally:
                reset_scope(token)
    assert evaluated > 100


@pytest.mark.parametrize("expr", ["quantity('1.5GiB')", "ip('10.0.0.300')", "cidr('10.0.0.0')", "url('not a url')",
                                  "quantity('1.5').asInteger()"])
def test_invalid_value_types_are_runtime_errors(expr: str) -> None:
    v = ENV.compile(expr).eval(ENV.Activation({}))
    assert v.type() == T.ERROR


# -- has() as cel-go / Kubernetes ---------------------------------------------------------------
# cel-go interpreter/attributes.go refQualify: a presence test on a value that is not a map, list or
# message (null, string, number) is false, not an error; cel-cpp errors ("Applying SELECT to
# non-message type"). Kubernetes declares `variables` as an object with one field per variable.

def test_has_on_a_null_field_is_false() -> None:
    # Gatekeeper's K8sNativeValidation: `!has(object.spec.securityContext.runAsUser)` with securityContext null.
    pod = {"spec": {"securityContext": None}}
    assert ev("!has(object.spec.securityContext.runAsUser)", object=pod) is True
    assert ev("has(object.spec.securityContext)", object=pod) is True


def test_has_on_null_string_and_number_operands() -> None:
    assert ev("has(object.a.b)", object={"a": None}) is False
    assert ev("has(object.a.b)", object={"a": "text"}) is False
    assert ev("has(object.a.b)", object={"a": 3}) is False
    assert ev("has(object.a.b)", object={"a": {"b": 1}}) is True
    assert ev("has(object.a.b)", object={"a": {}}) is False


def test_gatekeeper_params_variable_chain() -> None:
    # Gatekeeper's generated VAP: variables.params is null without parameters; templates test has() on it.
    params_def = "!has(params.spec) ? null : !has(params.spec.parameters) ? null : params.spec.parameters"
    rule = "!has(variables.params.exemptImages) || size(variables.params.exemptImages) == 0"
    params_text = inline_variables(params_def, {})
    assert params_text is not None
    text = inline_variables(rule, {"params": params_text})
    assert text is not None
    program = ENV.compile(text, disable_check=True)
    cases: list[Any] = [None, {"spec": None}, {"spec": {"parameters": None}}, {"spec": {"parameters": {}}}]
    for params in cases:
        token = set_current_scope(VariableScope({}, None, params))
        try:
            assert program.eval(ENV.Activation({})).plain_value() is True, params
        finally:
            reset_scope(token)


def test_has_on_a_list_operand_is_an_error_as_in_cel_go() -> None:
    v = ENV.compile("has(object.a.b)").eval(ENV.Activation({"object": {"a": [1]}}))
    assert v.type() == T.ERROR


def test_has_still_errors_when_an_intermediate_field_is_missing() -> None:
    # Only the last selection is a presence test, in cel-go as in cel-cpp.
    v = ENV.compile("has(object.a.b)").eval(ENV.Activation({"object": {}}))
    assert v.type() == T.ERROR


def test_has_of_a_declared_variable_is_true() -> None:
    assert rewrite_for_runtime("has(variables.a) && variables.a > 1") == 'true && __tg_var("a") > 1'
    assert inline_variables("has(variables.a)", {"a": "1"}) == "true"
    # Gatekeeper: `variables.params` is null when the constraint has no parameters.
    text = inline_variables("!has(variables.params.exemptImages)", {"params": "object.parameters"})
    assert text is not None
    assert ev(text, object={"parameters": None}) is True
    assert ev(text, object={"parameters": {"exemptImages": []}}) is False


def test_has_in_string_literals_is_left_alone() -> None:
    assert rewrite_source("'has(x.y)' + 'a'") == "'has(x.y)' + 'a'"


# -- compile-time validators (Kubernetes 1.29 base environment) --------------------------------

@pytest.mark.parametrize(("expr", "message"), [
    ("duration('1x') > duration('1s')", "invalid duration argument"),
    ("timestamp('yesterday') > timestamp('2024-01-01T00:00:00Z')", "invalid timestamp argument"),
    ("'a'.matches('(?<=a)b')", "invalid regex"),
    ("[1, 'a'].size() > 0", "expected type 'int' but found 'string'"),
    ("[[1], [2]].max() == [2]", "found no matching overload for 'max'"),
])
def test_validators_reject_at_compile_time(expr: str, message: str) -> None:
    with pytest.raises(RuntimeError, match=re.escape(message)):
        ENV.compile(expr)


@pytest.mark.parametrize("expr", [
    "duration(object.d) > duration('1s')",
    "[1, object.x].size() == 2",
    "'%s=%d'.format(['a', 1]) == 'a=1'",
    "{'replicas': 3, 'paused': false}.size() == 2",
    "[optional.of(1), optional.none()].size() == 2",
])
def test_validators_accept(expr: str) -> None:
    assert ENV.compile(expr) is not None


# -- two-variable comprehensions (Kubernetes 1.32) ----------------------------------------------

@pytest.mark.parametrize(("expr", "want"), [
    ("{'a': 1, 'b': 2}.all(k, v, v > 0)", True),
    ("[1, 2, 3].exists(i, v, i == 1 && v == 2)", True),
    ("[1, 2, 3].existsOne(i, v, v > 2)", True),
    ("[1, 2].transformList(i, v, i + v)", [1, 3]),
    ("{'a': 1, 'b': 2}.transformList(k, v, k).sort()", ["a", "b"]),
    ("{'a': 1, 'b': 2}.transformMap(k, v, v * 10)", {"a": 10, "b": 20}),
    ("{'a': 1, 'b': 2}.transformMap(k, v, v > 1, v)", {"b": 2}),
    ("['x', 'y'].transformMapEntry(i, v, {v: i})", {"x": 0, "y": 1}),
])
def test_two_variable_comprehensions(expr: str, want: Any) -> None:
    assert ev(expr) == want


def test_transform_map_entry_rejects_duplicate_keys() -> None:
    v = ENV.compile("[1, 1].transformMapEntry(i, v, {v: i})").eval(ENV.Activation({}))
    assert v.type() == T.ERROR and "already exists" in str(v.value())


# -- bounds (issue #13) ------------------------------------------------------------------------

def test_string_doubling_with_nested_binds_is_rejected_at_compile_time() -> None:
    expr = "object.s"
    for i in range(26):
        expr = f"cel.bind(v{i}, {expr}, v{i} + v{i})"
    with pytest.raises(RuntimeError, match="times the size of its input"):
        ENV.compile(expr)


def test_replace_with_its_own_input_is_rejected_at_compile_time() -> None:
    with pytest.raises(RuntimeError, match="grows faster than its input"):
        ENV.compile("object.s.replace('a', object.s).replace('a', object.s)")


def test_linear_string_building_is_accepted() -> None:
    prog = compile_expression("'image ' + object.c.image + ' of ' + object.c.name")
    assert prog.estimated is not None and prog.estimated.error == ""
    assert prog.estimated.max_bytes(1000) >= 2000


def test_lists_range_is_bounded() -> None:
    v = ENV.compile("size(lists.range(object.n))").eval(ENV.Activation({"object": {"n": MAX_RANGE + 1}}))
    assert v.type() == T.ERROR and "exceeds the limit" in str(v.value())
    assert ev("size(lists.range(object.n))", object={"n": 5}) == 5


def test_evaluate_raises_typed_errors() -> None:
    act = ENV.Activation({"object": {"n": 0}})
    with pytest.raises(EvaluationError, match="divide by zero"):
        evaluate(compile_expression("1 / object.n").program, act)
    with pytest.raises(BudgetExceeded):
        evaluate(compile_expression("lists.range(200).all(i, lists.range(200).all(j, true))").program, act)
    assert evaluate(compile_expression("object.n + 1").program, act) == 1


def test_inlined_variables_are_bound_once() -> None:
    text = inline_variables("variables.xs.all(x, x in variables.allowed)", {"xs": "[1, 2]", "allowed": "[1, 2, 3]"})
    assert text == ("cel.bind(__tg_v_xs, ([1, 2]), cel.bind(__tg_v_allowed, ([1, 2, 3]), "
                    "__tg_v_xs.all(x, x in __tg_v_allowed)))")
    assert ev(text) is True


def test_unused_erroring_inlined_variable_stays_harmless() -> None:
    text = inline_variables("true || variables.bad > 0", {"bad": "1 / 0"})
    assert text is not None and ev(text) is True


def test_rewritten_programs_keep_the_checked_return_type() -> None:
    # celopt re-plans list-building comprehensions untyped; the compiler's return-type check must still see the type.
    assert ENV.compile("object.items.map(x, x > 0)").return_type() == T.List(T.BOOL)
    assert ENV.compile("[1, 2].map(x, x).size() > 1").return_type() == T.BOOL


def test_validator_positions_refer_to_the_authors_text() -> None:
    # has() is rewritten before compiling; the reported column is still the one in the source as written.
    with pytest.raises(RuntimeError, match=r"<input>:1:37: invalid regex"):
        ENV.compile("has(object.a.b) && object.s.matches('(?=x)')")


def test_compiled_expressions_are_reused_so_an_edit_recompiles_only_what_changed(monkeypatch: Any) -> None:
    import copy as _copy

    from tests.unit.policy.helpers import policy
    from webhook.policy import compile_policy
    from webhook.policy.cel import env as env_module

    compiled: list[str] = []
    real = env_module.PolicyEnv.compile_checked

    def counting(self: Any, text: str, disable_check: bool = False) -> Any:
        compiled.append(text)
        return real(self, text, disable_check=disable_check)

    monkeypatch.setattr(env_module.PolicyEnv, "compile_checked", counting)
    p = policy("cache-test", validations=[{"expression": "object.metadata.name != 'cache-test-a'"},
                                          {"expression": "object.metadata.name != 'cache-test-b'"}])
    compile_policy(p)
    first = len(compiled)
    assert first > 0
    assert env_module.environment().compile("object.metadata.name != 'cache-test-a'") is \
        env_module.environment().compile("object.metadata.name != 'cache-test-a'")
    edited = _copy.deepcopy(p)
    edited["spec"]["validations"][1]["expression"] = "object.metadata.name != 'cache-test-c'"
    compiled.clear()
    compile_policy(edited)
    assert compiled and all("cache-test-c" in text for text in compiled), compiled
