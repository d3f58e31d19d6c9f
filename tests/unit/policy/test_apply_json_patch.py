"""apply_json_patch: jsonpatch's results, the input never changed, untouched subtrees shared."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.policy.engine.mutate import _pointer_segments, apply_json_patch


def pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": "a"}, "annotations": {"x/y": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]},
                                    {"name": "d", "image": "j"}],
                     "volumes": [{"name": "v", "emptyDir": {}}]}}


PATHS = ["", "/metadata", "/metadata/labels", "/metadata/labels/app", "/metadata/labels/new",
         "/metadata/annotations/x~1y", "/spec/containers", "/spec/containers/0", "/spec/containers/1/image",
         "/spec/containers/-", "/spec/containers/0/ports/0/containerPort", "/spec/containers/5",
         "/spec/volumes/0/emptyDir/medium", "/nope/deeper", "/spec/containers/x",
         # jsonpointer's edges (the simple operations' own path must agree with it): an index equal to the
         # length, a leading zero, bad and good escapes, a scalar on the way, a list's end on the way.
         "/spec/containers/2", "/spec/containers/2/image", "/spec/containers/01", "/spec/containers/-1",
         "/metadata/labels/~2x", "/metadata/labels/a~", "/metadata/labels/a~0b~1c", "/metadata/labels/a~01",
         "/metadata/name/x", "/spec/containers/-/name", "/spec/containers/0/ports/-", "/", "metadata"]
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=3),
                   st.dictionaries(st.text(max_size=2), st.integers(0, 2), max_size=2),
                   st.lists(st.integers(0, 2), max_size=2))
OPERATION = st.one_of(
    st.builds(lambda op, p, v: {"op": op, "path": p, "value": v}, st.sampled_from(["add", "replace", "test"]),
              st.sampled_from(PATHS), VALUES),
    st.builds(lambda p: {"op": "remove", "path": p}, st.sampled_from(PATHS)),
    st.builds(lambda op, p: {"op": op, "path": p}, st.sampled_from(["add", "replace"]), st.sampled_from(PATHS)),
    st.builds(lambda op, f, p: {"op": op, "from": f, "path": p}, st.sampled_from(["move", "copy"]),
              st.sampled_from(PATHS), st.sampled_from(PATHS)))


def reference(doc: dict[str, Any], ops: list[dict[str, Any]]) -> tuple[str, Any]:
    """jsonpatch's answer, one operation after the other (as apply_json_patch applies them: the first that
    fails is the error, whatever the later ones are)."""
    try:
        out: Any = copy.deepcopy(doc)
        for op in copy.deepcopy(ops):
            out = jsonpatch.apply_patch(out, [op], in_place=True)
        return "ok", out
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError, IndexError,
            ValueError) as e:
        return "error", f"{type(e).__name__}: {e}"


@settings(max_examples=400, deadline=None)
@given(st.lists(OPERATION, max_size=4))
def test_same_result_as_jsonpatch_and_the_input_is_never_changed(ops: list[dict[str, Any]]) -> None:
    doc = pod()
    before = orjson.dumps(doc)
    expected = reference(doc, ops)
    try:
        got: tuple[str, Any] = "ok", apply_json_patch(doc, copy.deepcopy(ops))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError, IndexError,
            ValueError) as e:
        got = "error", f"{type(e).__name__}: {e}"
    assert orjson.dumps(doc) == before, "the request's object was changed"
    assert got[0] == expected[0], (got, expected)
    # The same document (JSON: 1, 1.0 and true differ), or the same error in the same words.
    assert orjson.dumps(got[1]) == orjson.dumps(expected[1]) if got[0] == "ok" else got == expected


def test_untouched_subtrees_are_shared_and_touched_ones_are_not() -> None:
    doc = pod()
    out = apply_json_patch(doc, [{"op": "add", "path": "/metadata/labels/team", "value": "t"},
                                 {"op": "replace", "path": "/spec/containers/1/image", "value": "k"}])
    assert out["metadata"]["labels"] == {"app": "a", "team": "t"} and doc["metadata"]["labels"] == {"app": "a"}
    assert out["metadata"]["annotations"] is doc["metadata"]["annotations"]
    assert out["spec"]["volumes"] is doc["spec"]["volumes"]
    assert out["spec"]["containers"][0] is doc["spec"]["containers"][0]
    assert out["spec"]["containers"][1] is not doc["spec"]["containers"][1]


def test_a_moved_shared_subtree_is_copied_before_a_later_operation_changes_it() -> None:
    doc = pod()
    out = apply_json_patch(doc, [{"op": "move", "from": "/metadata/labels", "path": "/metadata/copied"},
                                 {"op": "add", "path": "/metadata/copied/x", "value": "1"}])
    assert out["metadata"]["copied"] == {"app": "a", "x": "1"}
    assert doc["metadata"]["labels"] == {"app": "a"}


def test_not_a_list_of_objects() -> None:
    with pytest.raises(TypeError, match="list of operations"):
        apply_json_patch(pod(), {"op": "add"})
    with pytest.raises(TypeError, match="must be an object"):
        apply_json_patch(pod(), ["add"])


def test_the_object_does_not_share_the_patch_values() -> None:
    value = {"team": {"name": "t"}}
    out = apply_json_patch(pod(), [{"op": "add", "path": "/metadata/labels", "value": value},
                                   {"op": "replace", "path": "/spec/containers/0/ports", "value": [value]}])
    assert out["metadata"]["labels"] == value and out["metadata"]["labels"] is not value
    assert out["metadata"]["labels"]["team"] is not value["team"]
    assert out["spec"]["containers"][0]["ports"][0] == value and out["spec"]["containers"][0]["ports"][0] is not value


@pytest.mark.parametrize(("pointer", "segments"), [
    ("", ()), ("/", ("",)), ("/a/b", ("a", "b")), ("/a~1b/c~0d", ("a/b", "c~d")), ("/~01", ("~1",)),
    ("a/b", None), ("/a~2", None), ("/a~", None), (["/a"], None), (None, None),
])
def test_pointer_segments(pointer: Any, segments: tuple[str, ...] | None) -> None:
    # Twice: the second answer is the cached one (a list argument is not hashable: no cache, no error).
    assert _pointer_segments(pointer) == segments
    assert _pointer_segments(pointer) == segments


def test_a_long_pointer_is_parsed_each_time_and_not_kept() -> None:
    from webhook.policy.engine import mutate

    long = "/metadata/labels/" + "a~1b" * 100  # over the cached length: may be built from the object's content
    expected = ("metadata", "labels", "a/b" * 100)
    before = mutate._cached_segments.cache_info().currsize
    assert _pointer_segments(long) == expected and _pointer_segments(long) == expected
    assert mutate._cached_segments.cache_info().currsize == before
    hits = mutate._cached_segments.cache_info().hits
    assert _pointer_segments("/a~1b") == ("a/b",) and _pointer_segments("/a~1b") == ("a/b",)
    assert mutate._cached_segments.cache_info().hits > hits  # a short one is parsed once
