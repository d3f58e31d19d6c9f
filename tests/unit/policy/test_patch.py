"""json_patch: the RFC 6902 operations from the request's object to the mutated one."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.policy.engine.patch import json_patch
from webhook.policy.merge import apply_configuration


def canonical(doc: Any) -> str:
    """JSON text where ``true``, ``1`` and ``1.0`` differ and key order does not."""
    return json.dumps(doc, sort_keys=True)


def applies(src: Any, dst: Any) -> list[dict[str, Any]]:
    ops = json_patch(src, dst)
    before = canonical(src)
    patched = jsonpatch.apply_patch(src, ops, in_place=False)
    assert canonical(src) == before, "computing or applying the patch changed the source"
    assert canonical(patched) == canonical(dst), ops
    return ops


def test_unchanged_object_gives_no_operations() -> None:
    pod = {"metadata": {"name": "web", "labels": {"a": "1"}}, "spec": {"containers": [{"name": "c"}]}}
    assert json_patch(pod, pod) == []
    assert json_patch(pod, copy.deepcopy(pod)) == []


def test_members_added_removed_and_replaced_inside_maps() -> None:
    src = {"metadata": {"labels": {"a": "1", "gone": "x"}, "name": "web"}, "spec": {"replicas": 1}}
    dst = {"metadata": {"labels": {"a": "2", "new": "y"}, "name": "web"}, "spec": {"replicas": 1}}
    assert applies(src, dst) == [
        {"op": "remove", "path": "/metadata/labels/gone"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
        {"op": "add", "path": "/metadata/labels/new", "value": "y"},
    ]


def test_keys_are_escaped_as_json_pointers() -> None:
    src = {"metadata": {"annotations": {}}}
    dst = {"metadata": {"annotations": {"example.com/a~b": "v"}}}
    assert applies(src, dst) == [{"op": "add", "path": "/metadata/annotations/example.com~1a~0b", "value": "v"}]


def test_json_types_are_told_apart_where_python_equality_would_not() -> None:
    # Python: {"x": True} == {"x": 1} == {"x": 1.0}. JSON: three different documents.
    for old, new in [(True, 1), (1, 1.0), (0, False)]:
        src = {"spec": {"nested": {"x": [old]}}}
        dst = {"spec": {"nested": {"x": [new]}}}
        assert applies(src, dst), (old, new)


def test_a_list_is_diffed_by_make_patch_below_its_path() -> None:
    src = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}
    dst = {"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "z"}]}}
    assert applies(src, dst) == [{"op": "replace", "path": "/spec/containers/1/image", "value": "z"}]


def test_a_changed_type_replaces_the_member() -> None:
    assert applies({"a": {"b": 1}}, {"a": [1]}) == [{"op": "replace", "path": "/a", "value": [1]}]
    assert applies({"a": "s"}, {"a": {"b": 1}}) == [{"op": "replace", "path": "/a", "value": {"b": 1}}]


def test_moves_inside_a_list_carry_the_prefix_in_from() -> None:
    src = {"spec": {"items": [{"k": i} for i in range(6)]}}
    dst = {"spec": {"items": [src["spec"]["items"][i] for i in (5, 0, 1, 2, 3, 4)]}}
    ops = applies(src, dst)
    assert all(op["path"].startswith("/spec/items") and op.get("from", "/spec/items").startswith("/spec/items")
               for op in ops), ops


def test_subtrees_an_apply_configuration_left_alone_are_not_walked() -> None:
    class Untouchable(dict[str, Any]):
        """A spec the diff must not read: only the same object may stand for it."""

        def items(self) -> Any:
            raise AssertionError("the untouched spec was compared")

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
           "spec": Untouchable(containers=[{"name": "c", "image": "x"}])}
    mutated = apply_configuration(pod, {"metadata": {"labels": {"team": "a"}}}, "Pod")
    assert mutated["spec"] is pod["spec"]
    assert json_patch(pod, mutated) == [{"op": "add", "path": "/metadata/labels/team", "value": "a"}]


SCALARS_AND_TYPES = [True, False, 1, 0, 1.0, 0.0, 2.5, "a", "", None, {"b": 1}, {}, [1], []]


def test_a_changed_scalar_or_type_is_the_replace_make_patch_gives() -> None:
    for old in SCALARS_AND_TYPES:
        for new in SCALARS_AND_TYPES:
            if isinstance(old, dict | list) and type(old) is type(new):
                continue  # walked, not replaced
            expected = [dict(op, path="/spec/x" + op["path"]) for op in jsonpatch.make_patch(old, new).patch]
            assert json_patch({"spec": {"x": old}}, {"spec": {"x": new}}) == expected, (old, new)
            assert json_patch(old, new) == jsonpatch.make_patch(old, new).patch, (old, new)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 2.5]) | st.sampled_from(["a", "b", ""]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["a", "b", "c/d", "e~f", ""]), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(src=JSON, dst=JSON, share=st.booleans())
def test_any_two_documents(src: Any, dst: Any, share: bool) -> None:
    if share and isinstance(src, dict) and isinstance(dst, dict):
        for key in list(dst)[::2]:
            if key in src:
                dst[key] = src[key]  # shared subtrees, as a merge leaves them
    applies(src, dst)
