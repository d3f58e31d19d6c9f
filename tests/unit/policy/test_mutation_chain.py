"""A policy's mutation chain: an activation serves the next mutation only when it reads nothing that changed."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, compile_policy, evaluate_mutating
from webhook.policy.engine.context import RequestContext
from webhook.policy.engine.mutate import _touched_paths, _touches
from webhook.policy.projection import ALL
from webhook.policy.vocabulary import PatchType


def json_patch(expression: str) -> dict[str, Any]:
    return {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}


def apply_configuration(expression: str) -> dict[str, Any]:
    return {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}


def recording(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[Any]:
    """Wrap ``owner.<name>`` (a function, or a method of a class) so that each call's last argument is appended to
    the list returned; the calls go on to the real one."""
    seen: list[Any] = []
    real = getattr(owner, name)

    def recorded(*args: Any) -> Any:
        seen.append(args[-1])
        return real(*args)

    monkeypatch.setattr(owner, name, recorded)
    return seen


def chain(*mutations: dict[str, Any], obj: dict[str, Any] | None = None,
          monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], int]:
    """(the object the policy's mutations leave, how many fresh activations they took)."""
    compiled = compile_policy(policy(failurePolicy="Fail", mutations=list(mutations))).policy
    assert compiled is not None
    fresh = recording(monkeypatch, RequestContext, "activation_for")
    original = obj or pod(labels={"app": "web"}, images=("a:1", "b:1"))
    out = evaluate_mutating(request(original), [compiled], InMemoryLookups())
    assert out.allowed, out.message
    return jsonpatch.apply_patch(copy.deepcopy(original), out.patch or []), len(fresh)


def test_a_mutation_that_reads_what_the_previous_one_changed_sees_the_change(monkeypatch: pytest.MonkeyPatch) -> None:
    out, fresh = chain(
        json_patch("[{'op': 'add', 'path': '/metadata/labels/team', 'value': 'a'}]"),
        json_patch("[{'op': 'add', 'path': '/metadata/annotations', 'value': {'team': object.metadata.labels.team}}]"),
        monkeypatch=monkeypatch)
    assert out["metadata"]["annotations"] == {"team": "a"} and fresh == 1


def test_a_list_grown_by_a_merge_is_seen_by_a_size_or_an_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = chain(
        apply_configuration("{'spec': {'containers': [{'name': 'added', 'image': 'c:1'}]}}"),
        json_patch("[{'op': 'add', 'path': '/metadata/labels/n', 'value': string(size(object.spec.containers))}]"),
        json_patch("[{'op': 'add', 'path': '/metadata/labels/names', "
                   "'value': object.spec.containers.map(c, c.name).join('-')}]"),
        monkeypatch=monkeypatch)
    assert out["metadata"]["labels"] == {"app": "web", "n": "3", "names": "c0-c1-added"}


def test_a_list_grown_by_a_json_patch_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = chain(
        json_patch("[{'op': 'add', 'path': '/spec/containers/-', 'value': {'name': 'x', 'image': 'x:1'}}]"),
        json_patch("[{'op': 'add', 'path': '/metadata/labels/n', 'value': string(size(object.spec.containers))}]"),
        monkeypatch=monkeypatch)
    assert out["metadata"]["labels"]["n"] == "3"


def test_a_removed_label_is_seen_by_has(monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = chain(
        json_patch("[{'op': 'remove', 'path': '/metadata/labels'}]"),
        json_patch("has(object.metadata.labels) ? [] : "
                   "[{'op': 'add', 'path': '/metadata/labels', 'value': {'gone': 'yes'}}]"),
        monkeypatch=monkeypatch)
    assert out["metadata"]["labels"] == {"gone": "yes"}


def test_an_activation_serves_mutations_that_read_nothing_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bench's shape (always-pull-images): a label added, then the containers' names read; and a mutation that
    # reads no object at all.
    out, fresh = chain(
        json_patch("[{'op': 'add', 'path': '/metadata/labels/pull', 'value': 'Always'}]"),
        apply_configuration("{'spec': {'containers': object.spec.containers.map(c, "
                            "{'name': c.name, 'imagePullPolicy': 'Always'})}}"),
        json_patch("[{'op': 'add', 'path': '/metadata/annotations', 'value': {'by': request.userInfo.username}}]"),
        monkeypatch=monkeypatch)
    assert fresh == 0
    assert [c["imagePullPolicy"] for c in out["spec"]["containers"]] == ["Always", "Always"]
    assert out["metadata"]["labels"]["pull"] == "Always" and out["metadata"]["annotations"] == {"by": "alice"}


def test_an_image_replaced_is_not_read_by_a_program_that_reads_names(monkeypatch: pytest.MonkeyPatch) -> None:
    out, fresh = chain(
        json_patch("[{'op': 'replace', 'path': '/spec/containers/0/image', 'value': 'z:9'}]"),
        json_patch("[{'op': 'add', 'path': '/metadata/labels/first', 'value': object.spec.containers[0].name}]"),
        json_patch("[{'op': 'add', 'path': '/metadata/labels/image', 'value': object.spec.containers[0].image}]"),
        monkeypatch=monkeypatch)
    assert out["metadata"]["labels"] == {"app": "web", "first": "c0", "image": "z:9"}
    assert fresh == 1  # the third reads the image the first replaced


TREE = {"metadata": {"labels": {}, "name": ALL}, "spec": {"containers": {"#": {"name": ALL}}}}


@pytest.mark.parametrize(("tree", "path", "expected"), [
    (TREE, ["metadata", "annotations", "x"], False),  # never read
    (TREE, ["metadata", "labels", "x"], True),  # below a value read for its presence and type
    (TREE, ["metadata", "labels"], True),
    (TREE, ["metadata"], True),  # above a read
    (TREE, ["metadata", "name"], True),
    (TREE, ["spec", "containers", "0", "image"], False),  # '#' matches the index; image is not read
    (TREE, ["spec", "containers", "1", "name"], True),
    (TREE, ["spec", "containers"], True),
    (TREE, ["spec", "volumes"], False),
    (TREE, [], True),  # the root
    ({}, ["metadata", "labels"], False),  # the object is not read
    ({}, [], True),
    (ALL, ["anything"], True),
    ({"spec": ALL}, ["spec", "x", "y"], True),  # within a value read whole
    ({"data": {"*": {"k": ALL}}}, ["data", "any", "k"], True),  # '*' matches a key
    ({"data": {"*": {"k": ALL}}}, ["data", "any", "j"], False),
])
def test_touches(tree: Any, path: list[str], expected: bool) -> None:
    assert _touches(tree, path) is expected


def test_touched_paths_of_a_json_patch() -> None:
    ops = [{"op": "add", "path": "/metadata/labels/a~1b", "value": "x"}, {"op": "test", "path": "/spec", "value": 1},
           {"op": "add", "path": "/spec/containers/-", "value": {}}, {"op": "remove", "path": "/spec/volumes/0"},
           {"op": "move", "from": "/a/b", "path": "/c"}, {"op": "replace", "path": "", "value": {}}]
    assert _touched_paths(PatchType.JSON_PATCH, ops) == [
        ["metadata", "labels", "a/b"], ["spec", "containers"], ["spec", "volumes"], ["c"], ["a", "b"], []]
    assert _touched_paths(PatchType.JSON_PATCH, [{"op": "add", "path": "/x~2", "value": 1}]) is None


def test_touched_paths_of_an_apply_configuration() -> None:
    patch = {"metadata": {"labels": {"a": "1", "b": None}, "annotations": {}},
             "spec": {"containers": [{"name": "c"}]}}
    assert _touched_paths(PatchType.APPLY_CONFIGURATION, patch) == [
        ["metadata", "labels", "a"], ["metadata", "labels", "b"], ["metadata", "annotations"], ["spec", "containers"]]
    assert _touched_paths(PatchType.APPLY_CONFIGURATION, {}) == []


def test_the_last_mutations_paths_are_not_worked_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a mutation changed is only asked by the policy's next mutation: none follows the last one.
    import webhook.policy.engine.mutate as mutate

    asked = recording(monkeypatch, mutate, "_touched_paths")
    out, fresh = chain(json_patch("[{'op': 'add', 'path': '/metadata/labels/a', 'value': 'x'}]"),
                       json_patch("[{'op': 'add', 'path': '/metadata/labels/b', 'value': object.metadata.labels.a}]"),
                       monkeypatch=monkeypatch)
    assert asked == [[{"op": "add", "path": "/metadata/labels/a", "value": "x"}]]
    assert out["metadata"]["labels"] == {"app": "web", "a": "x", "b": "x"} and fresh == 1


# --- an ApplyConfiguration's check, remembered per patch text -------------------------------------------------------

def test_json_text_is_given_only_for_plain_json_data() -> None:
    from webhook.policy.engine.mutate import _json_text

    class Name(str):
        pass

    texts = [_json_text(v) for v in ({"a": 1}, {"a": 1.0}, {"a": True}, {"a": "1"}, {"a": None})]
    assert None not in texts and len(set(texts)) == len(texts)  # 1, 1.0, true, "1" and null differ
    assert _json_text({"a": [1, {"b": "c"}]}) == b'{"a":[1,{"b":"c"}]}'
    for not_plain in ({"a": Name("x")}, {"a": 2**64}, {1: "x"}, {"a": {"b": Name("x")}}):
        assert _json_text(not_plain) is None


def test_an_apply_configuration_is_checked_per_result_across_requests() -> None:
    # The same policy answers two requests whose results differ only by a value's type: the second is refused
    # though the first was accepted (the memory of checks is by the result's text).
    compiled = compile_policy(policy(failurePolicy="Fail", mutations=[apply_configuration(
        "Object{metadata: Object.metadata{labels: {'x': object.metadata.annotations['v'] == 'n' ? dyn(1) : "
        "dyn('1')}}}")])).policy
    assert compiled is not None
    for value, accepted in (("s", True), ("n", False), ("s", True), ("n", False)):
        obj = pod()
        obj["metadata"]["annotations"] = {"v": value}
        out = evaluate_mutating(request(obj), [compiled], InMemoryLookups())
        assert out.allowed is accepted, out.message
        if not accepted:
            assert "expected string, got number" in out.message
