"""Structured merge of ApplyConfiguration mutations (webhook/policy/merge.py).

The list tables are transcribed from structured-merge-diff's ``typed/merge_test.go`` ("struct grab bag"
sets and "associative list"), the merge the API server runs for MutatingAdmissionPolicy; the
Deployment cases from kubernetes ``plugin/policy/mutating/patch/smd_test.go`` (TestApplyConfiguration),
written as the policy an author would write, through the engine.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, compile_policy, evaluate_mutating
from webhook.policy.merge import (
    UNKNOWN,
    MergeError,
    MergeSchema,
    apply_configuration,
    list_strategies,
    merge,
    merge_schema,
)

# structured-merge-diff's test schemas, in the shipped schema's compact format.
SMD = MergeSchema({"kinds": {}, "resources": {}, "types": {
    "grabBag": {"f": {"setStr": {"l": "@string", "t": "set"}, "setBool": {"l": "@boolean", "t": "set"},
                      "setNumeric": {"l": "@numeric", "t": "set"}}},
    "myRoot": {"f": {"list": "myList", "atomicList": "mySequence"}},
    "myList": {"l": "myElement", "t": "map", "k": ["key", "id"]},
    "mySequence": {"l": "@string", "t": "atomic"},
    "myElement": {"f": {"key": "@string", "id": "@numeric", "value": "myValue", "bv": "@boolean", "nv": "@numeric"}},
    "myValue": {"e": "@string"},
}})

SETS = [
    ('{"setStr":["a","b"]}', '{"setStr":["a","b","c"]}', '{"setStr":["a","b","c"]}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":[]}', '{"setStr":["a","b","c"]}'),
    ('{"setStr":[]}', '{"setStr":["a","b","c"]}', '{"setStr":["a","b","c"]}'),
    ('{"setStr":["a","b"]}', '{"setStr":["b","a"]}', '{"setStr":["b","a"]}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":["d","e","f"]}', '{"setStr":["a","b","c","d","e","f"]}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":["c","d","e","f"]}', '{"setStr":["a","b","c","d","e","f"]}'),
    ('{"setStr":["a","b","c","g","f"]}', '{"setStr":["c","d","e","f"]}', '{"setStr":["a","b","c","g","d","e","f"]}'),
    ('{"setStr":["a","b","c"]}', '{"setStr":["d","e","f","x","y","z"]}',
     '{"setStr":["a","b","c","d","e","f","x","y","z"]}'),
    ('{"setStr":["c","d","e","f"]}', '{"setStr":["a","c","e"]}', '{"setStr":["a","c","d","e","f"]}'),
    ('{"setStr":["a","b","c","x","y","z"]}', '{"setStr":["d","e","f"]}',
     '{"setStr":["a","b","c","x","y","z","d","e","f"]}'),
    ('{"setStr":["a","b","c","x","y","z"]}', '{"setStr":["d","e","f","x","y","z"]}',
     '{"setStr":["a","b","c","d","e","f","x","y","z"]}'),
    ('{"setStr":["c","a","g","f"]}', '{"setStr":["c","f","a","g"]}', '{"setStr":["c","f","a","g"]}'),
    ('{"setStr":["a","b","c","d"]}', '{"setStr":["d","e","f","a"]}', '{"setStr":["b","c","d","e","f","a"]}'),
    ('{"setStr":["c","d","e","f","g","h","i","j"]}', '{"setStr":["2","h","3","e","4","k","l"]}',
     '{"setStr":["c","d","f","g","2","h","i","j","3","e","4","k","l"]}'),
    ('{"setStr":["a","b","c","d","e","f","g","h","i","j"]}', '{"setStr":["1","b","2","h","3","e","4","k","l"]}',
     '{"setStr":["a","1","b","c","d","f","g","2","h","i","j","3","e","4","k","l"]}'),
    ('{"setStr":["a","b","b"]}', '{"setStr":["c"]}', '{"setStr":["a","b","b","c"]}'),
    ('{"setStr":["a","b","b"]}', '{"setStr":["b"]}', '{"setStr":["a","b"]}'),
    ('{"setStr":["a","b","b"]}', '{"setStr":["a"]}', '{"setStr":["a","b","b"]}'),
    ('{"setStr":["a","b","c","d","e","c"]}', '{"setStr":["1","b","2","e","d"]}',
     '{"setStr":["a","1","b","c","2","e","c","d"]}'),
    ('{"setStr":["a","b","c","d","e","c"]}', '{"setStr":["1","b","2","c","e","d"]}',
     '{"setStr":["a","1","b","2","c","e","d"]}'),
    ('{"setStr":["a","a","b","b"]}', '{"setStr":["b","c","d"]}', '{"setStr":["a","a","b","c","d"]}'),
    ('{"setStr":["a","a","b","b"]}', '{"setStr":[]}', '{"setStr":["a","a","b","b"]}'),
    ('{"setBool":[true]}', '{"setBool":[false]}', '{"setBool":[true, false]}'),
    ('{"setNumeric":[1,2,3.14159]}', '{"setNumeric":[1,2,3]}', '{"setNumeric":[1,2,3.14159,3]}'),
    ('{"setStr":["c","a","g","f","c","a"]}', '{"setStr":["c","f","a","g"]}', '{"setStr":["c","f","a","g"]}'),
    ('{"setNumeric":[1,2,3.14159,1,2]}', '{"setNumeric":[1,2,3]}', '{"setNumeric":[1,2,3.14159,3]}'),
    ('{"setBool":[true,false,true]}', '{"setBool":[false]}', '{"setBool":[true,false,true]}'),
    ('{"setBool":[true,false,true]}', '{"setBool":[true]}', '{"setBool":[true, false]}'),
]

ASSOCIATIVE = [
    ('{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}', '{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}',
     '{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}'),
    ('{"list":[{"key":"a","id":1,"value":{"a":"a"}}]}', '{"list":[{"key":"a","id":2,"value":{"a":"a"}}]}',
     '{"list":[{"key":"a","id":1,"value":{"a":"a"}},{"key":"a","id":2,"value":{"a":"a"}}]}'),
    ('{"list":[{"key":"a","id":1},{"key":"b","id":1}]}', '{"list":[{"key":"a","id":1},{"key":"a","id":2}]}',
     '{"list":[{"key":"a","id":1},{"key":"b","id":1},{"key":"a","id":2}]}'),
    ('{"list":[{"key":"b","id":2}]}', '{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}',
     '{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}'),
    ('{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}',
     '{"list":[{"key":"c","id":3},{"key":"b","id":2}]}',
     '{"list":[{"key":"a","id":1},{"key":"c","id":3},{"key":"b","id":2}]}'),
    ('{"list":[{"key":"a","id":1},{"key":"b","id":2},{"key":"c","id":3}]}',
     '{"list":[{"key":"c","id":3},{"key":"a","id":1}]}',
     '{"list":[{"key":"b","id":2},{"key":"c","id":3},{"key":"a","id":1}]}'),
    ('{"atomicList":["a","b","c"]}', '{"atomicList":[]}', '{"atomicList":[]}'),
    ('{"atomicList":["a","a","a"]}', '{"atomicList":["a","a"]}', '{"atomicList":["a","a"]}'),
    ('{"list":[{"key":"a","id":1,"bv":true},{"key":"b","id":2},{"key":"a","id":1,"bv":false,"nv":2}]}',
     '{"list":[{"key":"a","id":1,"nv":3},{"key":"c","id":3},{"key":"b","id":2}]}',
     '{"list":[{"key":"a","id":1,"nv":3},{"key":"c","id":3},{"key":"b","id":2}]}'),
    ('{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}', '{"list":[]}',
     '{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}'),
    ('{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}', '{}',
     '{"list":[{"key":"a","id":1,"nv":1},{"key":"a","id":1,"nv":2}]}'),
]


@pytest.mark.parametrize(("lhs", "rhs", "out"), SETS)
def test_sets_merge_as_structured_merge_diff(lhs: str, rhs: str, out: str) -> None:
    assert merge(json.loads(lhs), json.loads(rhs), "grabBag", SMD) == json.loads(out)


@pytest.mark.parametrize(("lhs", "rhs", "out"), ASSOCIATIVE)
def test_associative_lists_merge_as_structured_merge_diff(lhs: str, rhs: str, out: str) -> None:
    assert merge(json.loads(lhs), json.loads(rhs), "myRoot", SMD) == json.loads(out)


def test_merge_leaves_its_inputs_alone() -> None:
    lhs = {"list": [{"key": "a", "id": 1, "value": {"x": "1"}}]}
    rhs = {"list": [{"key": "a", "id": 1, "value": {"y": "2"}}, {"key": "b", "id": 1}]}
    before = copy.deepcopy((lhs, rhs))
    out = merge(lhs, rhs, "myRoot", SMD)
    out["list"][1]["key"] = "changed"
    assert (lhs, rhs) == before


# --- Kubernetes' TestApplyConfiguration cases, through the engine ---------------------------------------------

DEPLOYMENT_KIND = ("apps", "v1", "Deployment")


def deployment(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
            "spec": spec}


def mutate(obj: dict[str, Any], expression: str, *, old: dict[str, Any] | None = None,
           kind: tuple[str, str, str] = DEPLOYMENT_KIND, resource: str = "deployments") -> tuple[Any, str]:
    """(the mutated object or None, the policy's result message) of one ApplyConfiguration policy."""
    p = policy("ac", resources=(resource,), groups=(kind[0],), failurePolicy="Fail", mutations=[
        {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}])
    compiled = compile_policy(p)
    assert compiled.policy is not None, compiled.condition["message"]
    req = request(obj, old=old, operation="UPDATE" if old else "CREATE", resource=resource, group=kind[0],
                  version=kind[1], kind=kind[2])
    out = evaluate_mutating(req, [compiled.policy], InMemoryLookups())
    if not out.allowed:
        return None, out.message
    return jsonpatch.apply_patch(obj, out.patch or []), out.results[0].message


def test_add_to_a_list_map() -> None:
    obj = deployment({"template": {"spec": {"volumes": [{"name": "x"}]}}})
    got, _ = mutate(obj, """Object{spec: Object.spec{template: Object.spec.template{
        spec: Object.spec.template.spec{volumes: [Object.spec.template.spec.volumes{name: "y"}]}}}}""")
    assert got["spec"]["template"]["spec"]["volumes"] == [{"name": "x"}, {"name": "y"}]


def test_update_a_list_map_entry() -> None:
    obj = deployment({"template": {"spec": {"volumes": [{"name": "x"}, {"name": "y"}]}}})
    got, _ = mutate(obj, """Object{spec: Object.spec{template: Object.spec.template{
        spec: Object.spec.template.spec{volumes: [Object.spec.template.spec.volumes{
            name: "y", hostPath: Object.spec.template.spec.volumes.hostPath{path: "a"}}]}}}}""")
    assert got["spec"]["template"]["spec"]["volumes"] == [{"name": "x"}, {"name": "y", "hostPath": {"path": "a"}}]


def test_conditionals_and_old_object() -> None:
    got, _ = mutate(deployment({"replicas": 2}), "Object{spec: Object.spec{replicas: object.spec.replicas % 2 == 0 "
                                                 "? object.spec.replicas + 1 : object.spec.replicas}}")
    assert got["spec"]["replicas"] == 3
    got, _ = mutate(deployment({"replicas": 1}), "Object{spec: Object.spec{replicas: oldObject.spec.replicas % 2 == 0"
                                                 " ? oldObject.spec.replicas + 1 : oldObject.spec.replicas}}",
                    old=deployment({"replicas": 2}))
    assert got["spec"]["replicas"] == 3


def test_complex_initialization() -> None:
    got, _ = mutate(deployment({}), """Object{spec: Object.spec{replicas: 1,
        template: Object.spec.template{metadata: Object.spec.template.metadata{labels: {"app": "nginx"}},
            spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{
                name: "nginx", image: "nginx:1.14.2",
                ports: [Object.spec.template.spec.containers.ports{containerPort: 80}],
                resources: Object.spec.template.spec.containers.resources{limits: {"cpu": "128M"}}}]}}}}""")
    assert got["spec"] == {"replicas": 1, "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {
        "containers": [{"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}],
                        "resources": {"limits": {"cpu": "128M"}}}]}}}


def test_change_to_an_atomic_struct_is_refused() -> None:
    got, message = mutate(deployment({"replicas": 1}),
                          'Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {"l": "v"}}}}')
    assert got is None
    assert message.endswith("error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps "
                            "or structs: .spec.selector")


def test_a_field_the_schema_does_not_declare_is_refused() -> None:
    got, message = mutate(deployment({"replicas": 1}), "Object{spec: Object.spec{replicasx: 1}}")
    assert got is None
    assert message.endswith("error applying patch: failed to convert patch object to typed object: "
                            ".spec.replicasx: field not declared in schema")


def test_duplicate_env_vars_of_the_object_survive_an_unrelated_patch() -> None:
    env = [{"name": "test", "value": "a"}, {"name": "test", "value": "b"}]
    obj = deployment({"replicas": 1, "template": {"spec": {"containers": [{"name": "nginx", "env": env}]}}})
    got, _ = mutate(obj, "Object{spec: Object.spec{replicas: 3}}")
    assert got["spec"]["replicas"] == 3
    assert got["spec"]["template"]["spec"]["containers"][0]["env"] == env


def test_duplicate_env_vars_collapse_into_the_patched_entry() -> None:
    env = [{"name": "test", "value": "a"}, {"name": "test", "value": "b"}, {"name": "foo", "value": "bar"}]
    obj = deployment({"replicas": 1, "template": {"spec": {"containers": [{"name": "nginx", "env": env}]}}})
    got, _ = mutate(obj, """Object{spec: Object.spec{template: Object.spec.template{
        spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "nginx",
            env: [Object.spec.template.spec.containers.env{name: "test", value: "c"}]}]}}}}""")
    assert got["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "test", "value": "c"},
                                                                        {"name": "foo", "value": "bar"}]


# --- the issue's case and the rest of the contract -------------------------------------------------------------

def test_image_pull_policy_by_container_name_keeps_the_images() -> None:
    obj = pod(images=("registry.example.com/app:1", "registry.example.com/sidecar:2"))
    got, message = mutate(obj, """Object{spec: Object.spec{containers: object.spec.containers.map(c,
        Object.spec.containers{name: c.name, imagePullPolicy: "Always"})}}""",
                          kind=("", "v1", "Pod"), resource="pods")
    assert message == "mutated"
    assert got["spec"]["containers"] == [
        {"name": "c0", "image": "registry.example.com/app:1", "imagePullPolicy": "Always"},
        {"name": "c1", "image": "registry.example.com/sidecar:2", "imagePullPolicy": "Always"}]


def test_a_list_map_key_missing_from_the_patch_takes_its_default() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "protocol": "TCP", "name": "http"}]
    got, _ = mutate(obj, """Object{spec: Object.spec{containers: [Object.spec.containers{name: "c0",
        ports: [Object.spec.containers.ports{containerPort: 80, hostPort: 8080}]}]}}""",
                    kind=("", "v1", "Pod"), resource="pods")
    assert got["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "protocol": "TCP", "name": "http",
                                                       "hostPort": 8080}]


def test_an_atomic_list_in_the_patch_is_refused_with_its_index_path() -> None:
    got, message = mutate(pod(), """Object{spec: Object.spec{containers: [Object.spec.containers{name: "c0",
        args: ["--x"]}]}}""", kind=("", "v1", "Pod"), resource="pods")
    assert got is None
    assert message.endswith("may not mutate atomic arrays, maps or structs: .spec.containers[0].args")


def test_a_list_map_item_without_its_key_is_refused_unless_the_key_has_a_default() -> None:
    schema = MergeSchema({"kinds": {"x/v1/Root": "myRoot"}, "resources": {}, "types": SMD._types})
    with pytest.raises(MergeError, match='element that omits key field "id"'):
        apply_configuration({}, {"list": [{"key": "a"}]}, ("x", "v1", "Root"), schema)
    # Volume.name defaults to "" in the schema, so SMD keys the item by it.
    got, _ = mutate(deployment({}), """Object{spec: Object.spec{template: Object.spec.template{
        spec: Object.spec.template.spec{volumes: [Object.spec.template.spec.volumes{emptyDir: {}}]}}}}""")
    assert got["spec"]["template"]["spec"]["volumes"] == [{"emptyDir": {}}]


def test_duplicate_keys_in_the_patch_are_refused() -> None:
    got, message = mutate(pod(), """Object{spec: Object.spec{containers: [Object.spec.containers{name: "c0"},
        Object.spec.containers{name: "c0", image: "x"}]}}""", kind=("", "v1", "Pod"), resource="pods")
    assert got is None
    assert message.endswith('.spec.containers: duplicate entries for key [name="c0"]')


def test_a_scalar_of_the_wrong_type_is_refused() -> None:
    got, message = mutate(deployment({}), 'Object{spec: Object.spec{replicas: "three"}}')
    assert got is None
    assert message.endswith(".spec.replicas: expected numeric, got string")


def test_null_unsets_a_scalar_and_keeps_a_non_empty_map() -> None:
    obj = deployment({"replicas": 2, "paused": True})
    got, _ = mutate(obj, "Object{spec: Object.spec{paused: null}}")
    assert got["spec"] == {"replicas": 2}
    obj["metadata"]["labels"] = {"a": "1", "b": "2"}
    got, _ = mutate(obj, 'Object{metadata: Object.metadata{labels: {"a": null}}}')
    assert got["metadata"]["labels"] == {"b": "2"}
    got, _ = mutate(obj, "Object{metadata: Object.metadata{labels: null}}")
    assert got["metadata"]["labels"] == {"a": "1", "b": "2"}


def test_a_kind_without_schema_merges_maps_and_replaces_lists() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"},
           "spec": {"parts": [{"name": "a", "size": 1}, {"name": "b"}], "color": "red"}}
    got, _ = mutate(obj, "{'spec': {'parts': [{'name': 'a', 'size': 2}], 'shape': 'round'}}",
                    kind=("example.com", "v1", "Widget"), resource="widgets")
    assert got["spec"] == {"parts": [{"name": "a", "size": 2}], "color": "red", "shape": "round"}


def test_a_map_result_is_accepted_as_well_as_object() -> None:
    obj = pod()
    got, _ = mutate(obj, "{'spec': {'containers': [{'name': 'c0', 'imagePullPolicy': 'Never'}]}}",
                    kind=("", "v1", "Pod"), resource="pods")
    assert got["spec"]["containers"] == [{"name": "c0", "image": "registry.example.com/app:1",
                                          "imagePullPolicy": "Never"}]


def test_json_patch_whose_test_fails_is_not_applied() -> None:
    p = policy("jp", failurePolicy="Fail", mutations=[{"patchType": "JSONPatch", "jsonPatch": {"expression": """[
        JSONPatch{op: "test", path: "/metadata/name", value: "someone-else"},
        JSONPatch{op: "add", path: "/metadata/labels", value: {"patched": "yes"}}]"""}}])
    compiled = compile_policy(p).policy
    assert compiled is not None
    out = evaluate_mutating(request(pod()), [compiled], InMemoryLookups())
    assert out.allowed
    assert not out.patch
    assert out.results[0].message == "no change"


def test_apply_configuration_refuses_without_touching_the_object() -> None:
    obj = deployment({"selector": {"matchLabels": {"a": "b"}}})
    before = copy.deepcopy(obj)
    with pytest.raises(MergeError):
        apply_configuration(obj, {"spec": {"selector": {"matchLabels": {"x": "y"}}}}, DEPLOYMENT_KIND)
    assert obj == before


def test_the_shipped_schema_knows_the_built_in_kinds_and_their_list_keys() -> None:
    schema = merge_schema()
    assert schema.kubernetes
    pod_spec = schema.resolve("io.k8s.api.core.v1.PodSpec").node["f"]
    assert pod_spec["containers"]["k"] == ["name"]
    container = schema.resolve("io.k8s.api.core.v1.Container").node["f"]
    assert container["ports"]["k"] == ["containerPort", "protocol"]
    assert container["env"]["k"] == ["name"]
    assert container["args"]["t"] == "atomic"
    assert schema.resolve("io.k8s.api.core.v1.ContainerPort").node["d"]["protocol"] == "TCP"
    assert schema.root_for_kind("apps", "v1", "Deployment") == "io.k8s.api.apps.v1.Deployment"
    assert schema.root_for_resource("", "v1", "pods/ephemeralcontainers") == "io.k8s.api.core.v1.Pod"
    assert schema.root_for_kind("example.com", "v1", "Widget") == UNKNOWN


def test_list_strategies_names_unknown_and_atomic_lists() -> None:
    shape = {"spec": {"containers": [{"name": ..., "args": [...]}], "nodeSelector": {"a": ...}}}
    found = list_strategies(shape, "io.k8s.api.core.v1.Pod")
    assert [(f.path, f.strategy) for f in found] == [(".spec.containers[].args", "atomic"),
                                                     (".spec.nodeSelector", "atomic")]
    found = list_strategies({"spec": {"parts": [...], "size": 1, "anything": ...}}, UNKNOWN)
    assert [(f.path, f.strategy) for f in found] == [(".spec.parts", "unknown"), (".spec.anything", "unknown")]


# --- the fast paths of the merge: each must answer as the plain merge did ----------------------------------------

def test_list_keys_of_1_1_0_and_true_are_different_keys() -> None:
    # The keys compare as their JSON does (as before the typed identities): 1, 1.0 and true are three keys.
    out = merge({"setNumeric": [1]}, {"setNumeric": [1.0, True]}, "grabBag", SMD)
    assert json.dumps(out) == '{"setNumeric": [1, 1.0, true]}'
    lhs = {"list": [{"key": "a", "id": 1, "nv": 1}]}
    out = merge(lhs, {"list": [{"key": "a", "id": 1.0, "nv": 2}]}, "myRoot", SMD)
    assert json.dumps(out) == '{"list": [{"key": "a", "id": 1, "nv": 1}, {"key": "a", "id": 1.0, "nv": 2}]}'
    with pytest.raises(MergeError, match="duplicate entries"):
        apply_configuration({}, {"setNumeric": [2, 2]}, ("", "v1", "Bag"), _bag_schema())
    assert apply_configuration({}, {"setNumeric": [2, 2.0]}, ("", "v1", "Bag"), _bag_schema()) == {
        "setNumeric": [2, 2.0]}


def _bag_schema() -> MergeSchema:
    return MergeSchema({"kinds": {"v1/Bag": "grabBag"}, "resources": {}, "types": SMD._types})


def test_a_map_merge_keeps_the_object_order_shares_what_the_patch_does_not_name_and_unsets_nulls() -> None:
    lhs = {"a": {"x": "1"}, "b": "2", "c": "3", "d": {"y": "4"}}
    out = merge(lhs, {"c": None, "e": "5", "b": "6", "d": {"z": "7"}}, "@deduced")
    assert list(out.items()) == [("a", {"x": "1"}), ("b", "6"), ("d", {"y": "4", "z": "7"}), ("e", "5")]
    assert out["a"] is lhs["a"] and out["d"] is not lhs["d"]


def test_resolve_answers_per_reference_however_often_it_is_asked() -> None:
    schema = MergeSchema({"kinds": {}, "resources": {}, "types": {"names": {"l": "@string", "t": "set"}}})
    for _ in range(3):
        assert schema.resolve("names").kind == "list" and schema.resolve("@string").scalar == "string"
        assert schema.resolve("@boolean").scalar == "boolean"
        # Short-lived inline references, as a test's schema may pass: one may take a dead one's id.
        assert schema.resolve({"l": "@string", "t": "atomic"}).atomic
        assert schema.resolve({"f": {}}).kind == "struct"
        assert schema.resolve({"r": {"f": {}}, "a": 1}).atomic
        assert not schema.resolve({"r": {"f": {}}, "a": 0}).atomic


def test_a_null_list_map_key_takes_its_default_as_a_missing_one_does() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}]}]}}
    patch = {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "protocol": None,
                                                               "hostPort": 8080}]}]}}
    out = apply_configuration(pod, patch, ("", "v1", "Pod"))
    assert [(p["containerPort"], p.get("hostPort")) for p in out["spec"]["containers"][0]["ports"]] == [(80, 8080)]


@settings(max_examples=400, deadline=None)
@example(["a", "a"], ["a", "a"], True).via("the patch names a key twice: the walk merges no object item into it")
@example(["a", "b", "a"], ["b"], True).via("the object repeats a key the patch does not name")
@given(st.lists(st.sampled_from("abcde"), max_size=6), st.lists(st.sampled_from("abcde"), max_size=6),
       st.booleans())
def test_a_list_merge_in_the_objects_order_is_the_walks_answer(left: list[str], right: list[str],
                                                               keyed: bool) -> None:
    # _merge_list's shortcut (the patch's items name the object's, in its order, no key repeated) against the
    # general walk it skips, on sets and on associative lists alike (their items carrying a value to merge).
    from webhook.policy import merge as merge_module

    if keyed:
        lhs = [{"key": k, "id": 1, "value": {"from": "object"}} for k in left]
        rhs = [{"key": k, "id": 1, "nv": 2} for k in right]
        t = SMD.resolve("myList")
    else:
        lhs, rhs, t = list(left), list(right), SMD.resolve({"l": "@string", "t": "set"})
    lkeys = merge_module._key_identities(SMD, t, lhs, "")
    rkeys = merge_module._key_identities(SMD, t, rhs, "")
    walked = merge_module._merge_list_walk(SMD, copy.deepcopy(lhs), copy.deepcopy(rhs), lkeys, rkeys,
                                           dict(zip(rkeys, copy.deepcopy(rhs), strict=True)), t.node["l"])
    assert merge_module._merge_list(SMD, lhs, rhs, t) == walked


# --- the check remembered per patch text (apply_configuration's patch_text) ---------------------------------------

CHECKED_PATCHES: list[tuple[tuple[str, str, str], Any]] = [
    (DEPLOYMENT_KIND, {"spec": {"replicas": 3}}),
    (("", "v1", "Pod"), {"spec": {"replicas": 3}}),  # the same text: Pods have no replicas
    (DEPLOYMENT_KIND, {"spec": {"replicas": "3"}}),  # a string where a number goes
    (DEPLOYMENT_KIND, {"spec": {"replicas": True}}),
    (DEPLOYMENT_KIND, {"spec": {"replicas": 3.0}}),
    (("", "v1", "Pod"), {"metadata": {"labels": {"a": "1"}}}),
    (("", "v1", "Pod"), {"metadata": {"labels": {"a": 1}}}),  # a number where a string goes
    (("", "v1", "Pod"), {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}),  # a key twice
    (("", "v1", "Pod"), {"spec": {"containers": [{"image": "x"}]}}),  # no name: the key's default
    (("", "v1", "Pod"), {"spec": {"containers": [{"name": "a", "args": ["x"]}]}}),  # an atomic list
    (DEPLOYMENT_KIND, {"spec": {"selector": {"matchLabels": {"x": "y"}}}}),  # an atomic struct
    (("example.com", "v1", "Widget"), {"spec": {"anything": [1, 2]}}),  # no schema: no check
]


def _outcome(obj: dict[str, Any], patch: Any, kind: tuple[str, str, str], schema: MergeSchema,
             text: bytes | None) -> Any:
    try:
        return apply_configuration(obj, patch, kind, schema, patch_text=text)
    except MergeError as e:
        return f"MergeError: {e}"


def test_a_remembered_check_answers_as_the_check_per_kind_and_text() -> None:
    import orjson

    schema = _fresh_shipped_schema()
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}}
    expected = [_outcome(obj, patch, kind, schema, None) for kind, patch in CHECKED_PATCHES]
    assert sum(isinstance(e, str) for e in expected) == 7, expected  # refusals and acceptances both
    for _ in range(2):  # the first pass fills the memory, the second answers from it
        got = [_outcome(obj, patch, kind, schema, orjson.dumps(patch)) for kind, patch in CHECKED_PATCHES]
        assert got == expected


def _fresh_shipped_schema() -> MergeSchema:
    """The shipped schema's data in a schema of its own (nothing remembered from other tests)."""
    shipped = merge_schema()
    return MergeSchema({"kinds": shipped._kinds, "resources": shipped._resources, "types": shipped._types})


def test_a_check_is_remembered_per_text_and_forgotten_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    import orjson

    from webhook.policy import merge as merge_module

    schema = _fresh_shipped_schema()
    calls = []
    real = merge_module.configuration_problem

    def counted(*args: Any) -> Any:
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(merge_module, "configuration_problem", counted)
    patch = {"metadata": {"labels": {"a": "1"}}}
    for _ in range(3):
        apply_configuration({}, patch, ("", "v1", "Pod"), schema, patch_text=orjson.dumps(patch))
    assert len(calls) == 1
    apply_configuration({}, patch, ("", "v1", "Pod"), schema)  # no text: checked each time
    assert len(calls) == 2
    long_patch = {"metadata": {"labels": {"a": "x" * merge_module._CHECKED_BYTES}}}
    for _ in range(2):  # a text over the limit is not kept
        apply_configuration({}, long_patch, ("", "v1", "Pod"), schema, patch_text=orjson.dumps(long_patch))
    assert len(calls) == 4
    monkeypatch.setattr(merge_module, "_CHECKED_MAX", 2)
    for i in range(3):
        other = {"metadata": {"labels": {"a": str(i)}}}
        apply_configuration({}, other, ("", "v1", "Pod"), schema, patch_text=orjson.dumps(other))
    assert len(schema._checked) <= 2
