"""Kyverno's CLI test documents parsed as written: Test, Values, UserInfo, Context; what is refused, and tidy."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.formats.kyverno.testfile import (
    TestFormatError,
    context_images,
    context_objects,
    is_kyverno_test,
    parse_test,
    parse_user_info,
    parse_values,
    tidy,
)


def a_test(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Test", "metadata": {"name": "t"},
            "policies": ["../p.yaml"], "resources": ["r.yaml"],
            "results": [{"policy": "ns-a/p", "kind": "Pod", "resources": ["good", "ns-a/bad"], "result": "fail",
                         "isValidatingPolicy": True}], **fields}


def test_a_test_is_read_with_its_files_and_rows() -> None:
    parsed = parse_test(a_test(variables="values.yaml", userinfo="user.yaml", context="context.yaml"))
    (row,) = parsed.results
    assert (parsed.policies, parsed.resources, parsed.variables, parsed.userinfo, parsed.context) == (
        ("../p.yaml",), ("r.yaml",), "values.yaml", "user.yaml", "context.yaml")
    assert (row.policy_name, row.policy_namespace, row.resources, row.result) == ("p", "ns-a", ("good", "ns-a/bad"),
                                                                                 "fail")
    assert is_kyverno_test(a_test()) and not is_kyverno_test({**a_test(), "apiVersion": "tollgate.dev/v1alpha1"})


@pytest.mark.parametrize(("change", "path"), [
    ({"targetResources": ["t.yaml"]}, ("targetResources",)),
    ({"results": [{"policy": "p", "kind": "Pod", "resources": ["x"], "result": "maybe"}]}, ("results", 0, "result")),
    ({"results": [{"policy": "p", "kind": "Pod", "resources": ["x"], "result": "pass", "isGeneratingPolicy": True}]},
     ("results", 0, "isGeneratingPolicy")),
    ({"results": [{"policy": "p", "kind": "Pod", "result": "pass"}]}, ("results", 0, "resources")),
    ({"results": []}, ("results",)),
])
def test_what_cannot_be_run_names_its_field(change: dict[str, Any], path: tuple[Any, ...]) -> None:
    with pytest.raises(TestFormatError) as e:
        parse_test(a_test(**change))
    assert e.value.path == path


def test_values_give_operations_and_namespace_labels() -> None:
    values = parse_values({
        "apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Values",
        "globalValues": {"request.operation": "DELETE"},
        "policies": [{"name": "p", "resources": [{"name": "web", "values": {"request.operation": "UPDATE"}}]}],
        "namespaces": [{"apiVersion": "v1", "kind": "namespace", "metadata": {"name": "a", "labels": {"x": "1"}}}],
        "namespaceSelector": [{"name": "a", "labels": {"env": "prod"}}, {"name": "b", "labels": {"env": "dev"}}],
    })
    assert values.operation_for("p", "web") == "UPDATE" and values.operation_for("p", "other") == "DELETE"
    by_name = {ns["metadata"]["name"]: ns for ns in values.namespaces}
    assert by_name["a"]["kind"] == "Namespace" and by_name["a"]["metadata"]["labels"] == {"x": "1", "env": "prod"}
    assert by_name["b"]["metadata"]["labels"] == {"env": "dev"}


def test_a_value_tollgate_does_not_honour_is_refused() -> None:
    with pytest.raises(TestFormatError) as e:
        parse_values({"kind": "Values", "globalValues": {"request.object.metadata.name": "x"}})
    assert e.value.path == ("globalValues", "request.object.metadata.name")


def test_user_info_is_the_request_user_and_roles_are_refused() -> None:
    assert parse_user_info({"kind": "UserInfo", "userInfo": {"username": "system:serviceaccount:a:b"}}) == {
        "username": "system:serviceaccount:a:b"}
    with pytest.raises(TestFormatError):
        parse_user_info({"kind": "UserInfo", "clusterRoles": ["admin"]})


def test_context_resources_are_read() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    context = {"kind": "Context", "spec": {"resources": [cm], "images": [{"image": "busybox"}]}}
    assert context_objects(context) == [(("spec", "resources", 0), cm)]


def test_context_images_have_the_shape_kyverno_serves() -> None:
    """Kyverno's CLI marshals each ImageData to JSON: four strings always, tag/digest when set, documents when given."""
    images = context_images({"kind": "Context", "spec": {"images": [
        {"image": "busybox:1.35", "config": {"created": "2020-05-01T03:15:12Z"}, "tag": "1.35"},
        {"image": "a/b@sha256:x", "manifest": {}, "registry": "docker.io", "digest": "", "imageIndex": None},
    ]}})
    assert images["busybox:1.35"] == {"image": "busybox:1.35", "resolvedImage": "", "registry": "", "repository": "",
                                      "tag": "1.35", "config": {"created": "2020-05-01T03:15:12Z"}}
    assert images["a/b@sha256:x"] == {"image": "a/b@sha256:x", "resolvedImage": "", "registry": "docker.io",
                                      "repository": "", "manifest": {}}
    for bad, path in [({"images": "x"}, ("spec", "images")), ({"images": [{"config": {}}]}, ("spec", "images", 0)),
                      ({"images": [{"image": "a", "registry": 1}]}, ("spec", "images", 0, "registry"))]:
        with pytest.raises(TestFormatError) as e:
            context_images({"kind": "Context", "spec": bad})
        assert e.value.path == path


def test_tidy_drops_empty_fields_as_kyverno_compares() -> None:
    assert tidy({"a": [], "b": {"c": None, "d": {}}, "e": [1, {}], "f": 0, "g": ""}) == {"e": [1], "f": 0, "g": ""}
    assert tidy({"a": {}}) is None
