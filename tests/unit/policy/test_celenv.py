"""The CEL environment: Kubernetes library functions and real-world expressions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.shared import fixture_dir
from webhook.policy.celenv import ENV, T, VariableScope, reset_scope, rewrite_for_runtime, set_current_scope


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
    ("isURL('https://example.com:80/path?k=v')", True),
    ("isURL('not a url')", False),
    ("isIP('10.0.0.1') && isIP('::1')", True),
    ("isIP('10.0.0.300')", False),
    ("isCIDR('192.168.0.0/16')", True),
    ("isQuantity('1.5Gi') && isQuantity('500m') && !isQuantity('1.5GiB')", True),
    ("'a,b'.split(',').join('-') == 'a-b'", True),
    ("'%s has %d'.format(['x', 3]) == 'x has 3'", True),
    ("cel.bind(x, 2, x * x) == 4", True),
    ("math.greatest(1, 5) == 5", True),
    ("{'a': 1}.?b.orValue(7) == 7", True),
])
def test_kubernetes_library(expr: str, want: Any) -> None:
    assert ev(expr) == want


def test_empty_min_is_an_error() -> None:
    v = ENV.compile("[].min()").eval(ENV.Activation({}))
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
