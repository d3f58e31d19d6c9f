"""MutatingAdmissionPolicy's typed literals: ``JSONPatch{...}`` and ``Object.<path>{...}`` (cel/typed_literals.py).

Written as kubernetes.io's "Mutating Admission Policy" page writes them; errors as Kubernetes words
them, positioned in the author's text.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, compile_policy, evaluate_mutating
from webhook.policy.cel.env import environment, evaluate
from webhook.policy.cel.typed_literals import TypedLiteralError, rewrite


def value_of(expression: str, **variables: Any) -> Any:
    env = environment()
    return evaluate(env.compile(expression).program, env.Activation(variables))


def compile_error(expression: str) -> str:
    with pytest.raises(RuntimeError) as e:
        environment().compile(expression)
    return str(e.value)


def test_object_literals_evaluate_to_the_maps_they_spell() -> None:
    assert value_of('Object{metadata: Object.metadata{labels: {"team": "a"}}, spec: Object.spec{replicas: 3}}') == {
        "metadata": {"labels": {"team": "a"}}, "spec": {"replicas": 3}}


def test_json_patch_literals_evaluate_to_operations() -> None:
    assert value_of('[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("a/b"), value: "x"}, '
                    'JSONPatch{op: "move", from: "/a", path: "/b"}]') == [
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "x"}, {"op": "move", "from": "/a", "path": "/b"}]


def test_optional_fields_are_set_only_when_present() -> None:
    expr = "Object.metadata{?labels: object.metadata.?labels}"
    assert value_of(expr, object={"metadata": {}}) == {}
    assert value_of(expr, object={"metadata": {"labels": {"a": "b"}}}) == {"labels": {"a": "b"}}


def test_literal_text_inside_strings_and_comments_is_left_alone() -> None:
    assert value_of("'Object{a: 1}' + \"JSONPatch{op: 1}\" // Object{b: 2}\n") == "Object{a: 1}JSONPatch{op: 1}"
    assert rewrite("object.Object").text == "object.Object"


def test_a_compile_error_inside_a_literal_is_positioned_in_the_authors_text() -> None:
    message = compile_error('Object{\n  spec: Object.spec{replicas: objekt}}')
    assert "ERROR: <input>:2:31: undeclared reference to 'objekt'" in message
    assert '"spec"' not in message  # the rewritten text is not quoted back


def test_a_validator_finding_inside_a_literal_is_positioned_in_the_authors_text() -> None:
    assert compile_error('Object{spec: Object.spec{x: "a".matches("[")}}').startswith(
        "ERROR: <input>:1:41: invalid regex")


def test_a_nested_literal_named_for_another_path_is_a_type_mismatch() -> None:
    assert compile_error("Object{spec: Object.specx{replicas: 1}}") == (
        'ERROR: <input>:1:14: type mismatch: unexpected type name "Object.specx", expected "Object.spec", which '
        "matches field name path from root Object type")
    assert "expected \"Object.spec.containers\"" in compile_error(
        'Object{spec: Object.spec{containers: [Object.spec.containers{name: "a"}, Object.spec.volumes{name: "b"}]}}')


@pytest.mark.parametrize(("expression", "offset", "message"), [
    ('JSONPatch{opp: "add"}', 10, "undefined field 'opp'"),
    ("Object{a: 1, a: 2}", 13, "field 'a' is set twice in Object"),
    ("Object{'a': 1}", 7, "a field of Object is written 'name: value', found \"'a'\""),
    ("Object{a: }", 10, "field 'a' of Object has no value"),
])
def test_malformed_literals(expression: str, offset: int, message: str) -> None:
    with pytest.raises(TypedLiteralError) as e:
        rewrite(expression)
    assert (e.value.offset, e.value.message) == (offset, message)


def test_the_root_is_the_literal_that_is_the_whole_expression() -> None:
    assert rewrite("(Object{spec: Object.spec{}})").root.name == "Object"  # type: ignore[union-attr]
    assert rewrite("Object.spec{replicas: 1}").root.name == "Object.spec"  # type: ignore[union-attr]
    assert rewrite("true ? Object{} : Object{}").root is None
    assert rewrite("[JSONPatch{op: 'remove', path: '/x'}]").root is None


def test_an_apply_configuration_must_return_object() -> None:
    for expression, got in (("Object.spec{replicas: 1}", "Object.spec"),
                            ('JSONPatch{op: "add", path: "/x", value: 1}', "JSONPatch")):
        result = compile_policy(policy(mutations=[{"patchType": "ApplyConfiguration",
                                                   "applyConfiguration": {"expression": expression}}]))
        assert result.policy is None
        assert result.condition["message"] == (
            f"spec.mutations[0].applyConfiguration.expression: must evaluate to Object but got {got}")


def test_a_field_named_like_a_root_variable_stays_a_field() -> None:
    spec = {"paramRef": {"name": "cfg", "namespace": "default"},
            "variables": [{"name": "team", "expression": "params.data.team"}],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": 'Object{metadata: Object.metadata{annotations: {"team": variables.team}}, '
                              "spec: Object.spec{params: variables.team}}"}}]}
    compiled = compile_policy(policy(failurePolicy="Fail", groups=("example.com",), resources=("widgets",),
                                     **spec)).policy
    assert compiled is not None
    lookups = InMemoryLookups(configmaps=[{"metadata": {"name": "cfg", "namespace": "default"},
                                           "data": {"team": "a"}}])
    # A kind without schema: a Pod declares no spec.params.
    out = evaluate_mutating(request(pod(), kind="Widget", group="example.com", resource="widgets"), [compiled],
                            lookups)
    assert out.allowed, out.message
    assert {"op": "add", "path": "/spec/params", "value": "a"} in out.patch  # type: ignore[operator]


def test_a_map_patch_type_mutation_in_kubernetes_syntax_applies() -> None:
    compiled = compile_policy(policy(mutations=[{"patchType": "JSONPatch", "jsonPatch": {"expression": """
        [JSONPatch{op: "add", path: "/metadata/labels", value: {}},
         JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/team"), value: "a"}]"""}}]))
    assert compiled.policy is not None
    out = evaluate_mutating(request(pod()), [compiled.policy], InMemoryLookups())
    assert out.patch == [{"op": "add", "path": "/metadata/labels", "value": {"example.com/team": "a"}}]


def test_deep_nesting_is_one_error_not_a_crash() -> None:
    deep = "Object{a: " + "".join(f"Object.a{'.a' * i}{{a: " for i in range(120)) + "1" + "}" * 121
    with pytest.raises(TypedLiteralError, match="nested more than 100 deep"):
        rewrite(deep)
    lists = "Object{a: " + "[" * 2400 + "]" * 2400 + "}"
    assert rewrite(lists).text.startswith('dyn({"a": [[[')
    assert "recursion limit" in compile_error(lists)


@pytest.mark.parametrize(("expression", "expected"), [
    # kyverno/policies psp-migration-mpol/add-capabilities: a JSONPatch or null, filtered afterwards.
    ('[true ? JSONPatch{op: "add", path: "/a", value: "b"} : null, false ? JSONPatch{op: "add", path: "/c"} : null]'
     ".filter(p, p != null)", [{"op": "add", "path": "/a", "value": "b"}]),
    # castai-mpol/add-castai-removal-disabled: Objects of different shapes are one type, Object.
    ('false ? Object{spec: Object.spec{template: Object.spec.template{metadata: '
     'Object.spec.template.metadata{labels: {"a": "b"}}}}} : Object{metadata: Object.metadata{name: "n"}}',
     {"metadata": {"name": "n"}}),
    ("true ? Object{} : Object{spec: Object.spec{replicas: 1}}", {}),
])
def test_ternaries_over_typed_literals_type_check_as_in_kubernetes(expression: str, expected: Any) -> None:
    # cel-go: branches of one object type unify, and null is assignable to an object type (checker/types.go).
    assert value_of(expression) == expected
