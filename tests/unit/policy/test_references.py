"""``spec.references`` and the read-only resource library (``resource.Get`` / ``resource.List``), no sockets.

The functions have Kyverno's CEL resource-library signatures; Tollgate answers them from caches
the policy declares, so an undeclared read is a compile error and an unsynced cache answers per
``onUnsynced``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.policy.helpers import pod, policy, request
from webhook.files.inputs import reference_objects
from webhook.files.local_source import LocalDirectoryListerWatcher
from webhook.files.yamlio import InputError, load_paths
from webhook.policy import (
    InMemoryLookups,
    PolicyIndex,
    RequestCoordinates,
    compile_policy,
    evaluate_validating,
)
from webhook.policy.model import PolicySpecError, Reference, parse_policy, parse_references
from webhook.policy.plan import fusable

INGRESSES = Reference("networking.k8s.io/v1", "ingresses")
DEPLOYMENTS = Reference("apps/v1", "deployments")
NODES = Reference("v1", "nodes")


def deployment(name: str, namespace: str, labels: dict[str, str] | None = None,
               pod_labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"template": {"metadata": {"labels": pod_labels or {}}}}}


CACHE = {
    DEPLOYMENTS: [deployment("web", "default", {"tier": "web"}, {"app": "web"}),
                  deployment("db", "default", {"tier": "db"}, {"app": "db"}),
                  deployment("web", "other", {"tier": "web"}, {"app": "web"})],
    NODES: [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}}],
}


def referencing(expression: str, *, refs: tuple[Reference, ...] = (DEPLOYMENTS, NODES), **spec: Any) -> dict[str, Any]:
    return policy("p", references=[{"apiVersion": r.api_version, "resource": r.resource} for r in refs],
                  validations=[{"expression": expression, "messageExpression": "'denied'"}], **spec)


def decide(p: dict[str, Any], *, req: dict[str, Any] | None = None, objects: Any = None, **kw: Any) -> Any:
    index = PolicyIndex()
    index.upsert(p)
    req = req or request(pod())
    lookups = InMemoryLookups(objects=CACHE if objects is None else objects, **kw)
    return evaluate_validating(req, index.candidates(RequestCoordinates.of(req)), lookups)


def only(outcome: Any) -> tuple[str, str]:
    (result,) = outcome.results
    return str(result.result), result.message


# -- the policy API ---------------------------------------------------------------------------------------
def test_references_parse_in_order() -> None:
    spec = parse_policy(referencing("true"))
    assert spec.references == (DEPLOYMENTS, NODES)
    assert (DEPLOYMENTS.group, DEPLOYMENTS.version, DEPLOYMENTS.cache) == ("apps", "v1", "apps/v1/deployments")
    assert (NODES.group, NODES.version, NODES.cache) == ("", "v1", "v1/nodes")


@pytest.mark.parametrize(("references", "error"), [
    ("ingresses", "spec.references: must be a list"),
    (["ingresses"], "spec.references[0]: must be an object"),
    ([{"resource": "ingresses"}], "spec.references[0].apiVersion: required"),
    ([{"apiVersion": "networking.k8s.io/v1"}], "spec.references[0].resource: required"),
    ([{"apiVersion": "networking.k8s.io", "resource": "ingresses"}], "spec.references[0].apiVersion: must be v1"),
    ([{"apiVersion": "v1", "resource": "pods/log"}], "spec.references[0].resource: must be a plural resource"),
    ([{"apiVersion": "v1", "resource": "Pods"}], "spec.references[0].resource: must be a plural resource"),
    ([{"apiVersion": "v1", "resource": "pods"}, {"apiVersion": "v1", "resource": "pods"}],
     "spec.references[1]: duplicate reference v1/pods"),
    ([{"apiVersion": "v1", "resource": f"r{i}"} for i in range(17)], "spec.references: at most 16 entries"),
])
def test_malformed_references_name_their_path(references: Any, error: str) -> None:
    with pytest.raises(PolicySpecError, match="^" + error.replace("[", r"\[").replace("]", r"\]")):
        parse_references({"references": references})


@pytest.mark.parametrize(("expression", "error"), [
    ('resource.List("networking.k8s.io/v1", "ingresses", "").items.size() == 0',
     "spec.validations[0].expression: ERROR: <input>:1:1: resource.List reads networking.k8s.io/v1 ingresses, "
     "which is not in spec.references (declared: apps/v1/deployments, v1/nodes)"),
    ('true &&\n  resource.Get(object.apiVersion, "deployments", "", "x") == null',
     "spec.validations[0].expression: ERROR: <input>:2:3: the apiVersion and resource of resource.Get must be "
     "string literals naming an entry of spec.references"),
    # Two arguments match no overload; cel-cpp then reports the namespace as the unknown name.
    ('resource.List("apps/v1", "deployments")', "spec.validations[0].expression: ERROR: <input>:1:1: undeclared "
                                                "reference to 'resource'"),
])
def test_an_undeclared_or_dynamic_read_does_not_compile(expression: str, error: str) -> None:
    result = compile_policy(referencing(expression))
    assert result.policy is None
    assert result.condition["message"].startswith(error), result.condition["message"]


def test_a_read_inside_a_variable_is_checked_too() -> None:
    p = policy("p", variables=[{"name": "x", "expression": 'resource.List("v1", "secrets", "")'}],
               validations=[{"expression": "true"}])
    message = compile_policy(p).condition["message"]
    assert message.startswith("spec.variables[0].expression: ERROR: <input>:1:1: resource.List reads v1 secrets, "
                              "which is not in spec.references (declared: none)")


def test_a_policy_with_references_is_never_fused() -> None:
    compiled = compile_policy(referencing('resource.List("apps/v1", "deployments", "").items.size() >= 0')).policy
    assert compiled is not None
    assert not fusable(compiled)


# -- resource.Get / resource.List -------------------------------------------------------------------------
@pytest.mark.parametrize(("expression", "allowed"), [
    ('resource.Get("apps/v1", "deployments", "default", "web").metadata.labels.tier == "web"', True),
    ('resource.Get("apps/v1", "deployments", "default", "nope") == null', True),
    ('resource.Get("v1", "nodes", "", "n1").metadata.labels.zone == "a"', True),
    ('resource.List("apps/v1", "deployments", "default").items.map(d, d.metadata.name) == ["db", "web"]', True),
    ('resource.List("apps/v1", "deployments", "").items.map(d, d.metadata.namespace) == '
     '["default", "default", "other"]', True),
    ('resource.List("apps/v1", "deployments", "", {"tier": "web"}).items.size() == 2', True),
    ('resource.List("apps/v1", "deployments", "default", {"tier": "web", "x": "y"}).items.size() == 0', True),
    ('resource.List("apps/v1", "deployments", "default").items.exists(d, '
     'd.spec.template.metadata.labels.app == object.metadata.name)', True),
    ('resource.List("apps/v1", "deployments", "nowhere").items.size() > 0', False),
])
def test_reads_answer_from_the_cache(expression: str, allowed: bool) -> None:
    outcome = decide(referencing(expression))
    assert outcome.allowed is allowed, outcome.results


def test_labels_must_be_a_string_map_or_the_read_errors_per_failure_policy() -> None:
    expr = 'resource.List("apps/v1", "deployments", "", {"tier": 1}).items.size() > 0'
    result, message = only(decide(referencing(expr)))
    assert (result, message) == ("error", "spec.validations[0].expression: resource.List: labels must be a "
                                          "map(string, string)")
    assert decide(referencing(expr, failurePolicy="Ignore")).allowed is True


def test_an_admission_policy_reads_only_its_own_namespace() -> None:
    def tenant(expression: str) -> dict[str, Any]:
        p = referencing(expression, refs=(DEPLOYMENTS,))
        p["kind"], p["metadata"]["namespace"] = "AdmissionPolicy", "default"
        return p

    own = 'resource.List("apps/v1", "deployments", "default").items.size() == 2'
    assert decide(tenant(own)).allowed is True
    for other in ('resource.List("apps/v1", "deployments", "").items.size() >= 0',
                  'resource.Get("apps/v1", "deployments", "other", "web") == null'):
        outcome = decide(tenant(other))
        assert outcome.allowed is False
        assert "an AdmissionPolicy may only read its own namespace 'default'" in outcome.results[0].message


@pytest.mark.parametrize(("on_unsynced", "result", "allowed"), [("Deny", "fail", False), ("Warn", "skip", True),
                                                                 ("Allow", "skip", True)])
def test_an_unsynced_reference_cache_answers_per_on_unsynced(on_unsynced: str, result: str, allowed: bool) -> None:
    p = referencing('resource.List("apps/v1", "deployments", "").items.size() > 100', onUnsynced=on_unsynced)
    outcome = decide(p, unsynced=["apps/v1/deployments"])
    assert only(outcome) == (result, f"cache apps/v1/deployments has not synced (onUnsynced: {on_unsynced})")
    assert outcome.allowed is allowed
    # A cache the policy does not declare does not matter.
    assert decide(p, unsynced=["networking.k8s.io/v1/ingresses"]).allowed is False  # evaluated: 3 > 100 is false


def test_reads_in_match_conditions_and_messages() -> None:
    p = referencing("false", matchConditions=[
        {"name": "web-exists", "expression": 'resource.Get("apps/v1", "deployments", "default", "web") != null'}])
    p["spec"]["validations"][0]["messageExpression"] = (
        '"deployments: " + resource.List("apps/v1", "deployments", "default").items'
        '.map(d, d.metadata.name).join(",")')
    assert only(decide(p)) == ("fail", "deployments: db,web")
    assert only(decide(p, objects={})) == ("skip", "matchCondition web-exists is false")


# -- tollgate test and --local inputs ---------------------------------------------------------------------
def test_reference_files_become_caches_keyed_by_api_version_and_resource(tmp_path: Path) -> None:
    f = tmp_path / "existing.yaml"
    f.write_text("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: a}\n---\n"
                 "apiVersion: v1\nkind: Node\nmetadata: {name: n1, namespace: ignored}\n---\n"
                 "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: x}\n")
    objects = reference_objects(load_paths([f]))
    assert objects[INGRESSES][0]["metadata"] == {"name": "a", "namespace": "default"}
    assert objects[NODES][0]["metadata"] == {"name": "n1"}
    assert objects[Reference("example.com/v1", "widgets")][0]["metadata"]["namespace"] == "x"
    f.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Node\n"
                 "metadata: {name: n1}\n")
    with pytest.raises(InputError, match="v1/nodes n1 is defined twice"):
        reference_objects(load_paths([f]))


async def test_the_local_directory_serves_one_api_version_and_resource(tmp_path: Path) -> None:
    from webhook.informer.types import ListOptions

    (tmp_path / "a.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: a}\n---\n"
        "apiVersion: networking.k8s.io/v1beta1\nkind: Ingress\nmetadata: {name: old}\n---\n"
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1, namespace: ignored}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    ingresses = LocalDirectoryListerWatcher(tmp_path, api_resource=("networking.k8s.io/v1", "ingresses"))
    listed = (await ingresses.list(ListOptions())).items
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in listed] == [("default", "a")]
    nodes = (await LocalDirectoryListerWatcher(tmp_path, api_resource=("v1", "nodes")).list(ListOptions())).items
    assert [o["metadata"] for o in nodes] == [{"name": "n1", "resourceVersion": "1", "generation": 1}]


# -- declared indexes and resource.ByIndex ----------------------------------------------------------------
HOST_INDEX = {"name": "host", "expression": "object.spec.?rules.orValue([]).filter(r, has(r.host)).map(r, r.host)"}


def ingress(name: str, namespace: str, *hosts: str) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name, "namespace": namespace},
            "spec": {"rules": [{"host": h} for h in hosts] + [{"http": {}}]}}


def by_host(expression: str, **spec: Any) -> dict[str, Any]:
    return policy("p", references=[{"apiVersion": "networking.k8s.io/v1", "resource": "ingresses",
                                    "indexes": [HOST_INDEX]}],
                  validations=[{"expression": expression, "messageExpression": "'denied'"}], **spec)


INGRESS_CACHE = {INGRESSES: [ingress("a", "one", "a.example.com", "shared.example.com"),
                             ingress("b", "two", "shared.example.com"), ingress("c", "two")]}


@pytest.mark.parametrize(("value", "names"), [("a.example.com", ["one/a"]),
                                              ("shared.example.com", ["one/a", "two/b"]), ("none.example.com", [])])
def test_by_index_returns_the_objects_with_that_index_value(value: str, names: list[str]) -> None:
    expr = (f'resource.ByIndex("networking.k8s.io/v1", "ingresses", "host", "{value}").items'
            f'.map(i, i.metadata.namespace + "/" + i.metadata.name) == {names!r}')
    assert decide(by_host(expr), objects=INGRESS_CACHE).allowed is True


def test_an_admission_policy_sees_only_its_namespace_through_an_index() -> None:
    p = by_host('resource.ByIndex("networking.k8s.io/v1", "ingresses", "host", "shared.example.com").items'
                '.map(i, i.metadata.name) == ["b"]')
    p["kind"], p["metadata"]["namespace"] = "AdmissionPolicy", "two"
    assert decide(p, objects=INGRESS_CACHE, req=request(pod(namespace="two"), namespace="two")).allowed is True


@pytest.mark.parametrize(("expression", "error"), [
    ('resource.ByIndex("networking.k8s.io/v1", "ingresses", "hots", "x").items.size() == 0',
     "spec.validations[0].expression: ERROR: <input>:1:1: the index of resource.ByIndex must be 'hots', which is "
     "not an index of networking.k8s.io/v1/ingresses in spec.references (declared: host)"),
    ('resource.ByIndex("networking.k8s.io/v1", "ingresses", object.kind, "x").items.size() == 0',
     "spec.validations[0].expression: ERROR: <input>:1:1: the index of resource.ByIndex must be a string literal "
     "an index of networking.k8s.io/v1/ingresses in spec.references (declared: host)"),
])
def test_an_undeclared_index_does_not_compile(expression: str, error: str) -> None:
    assert compile_policy(by_host(expression)).condition["message"] == error


@pytest.mark.parametrize(("index", "error"), [
    ({"name": "host", "expression": "objekt.spec"},
     "spec.references[0].indexes[0].expression: ERROR: <input>:1:7: undeclared reference to 'objekt.spec'"),
    ({"name": "host", "expression": "1 + 1"},
     "spec.references[0].indexes[0].expression: must evaluate to string or list or null, but evaluates to int"),
    ({"name": "host", "expression": 'resource.List("v1", "pods", "")'},
     "spec.references[0].indexes[0].expression: ERROR: <input>:1:1: resource.List reads v1 pods, which is not in "
     "spec.references (declared: none)"),
    ({"name": "2x", "expression": "'a'"}, "spec.references[0].indexes[0].name: must be an identifier, got '2x'"),
])
def test_a_malformed_index_names_its_path(index: dict[str, str], error: str) -> None:
    p = by_host("true")
    p["spec"]["references"][0]["indexes"] = [index]
    assert compile_policy(p).condition["message"].startswith(error), compile_policy(p).condition["message"]


@pytest.mark.parametrize(("expression", "values"), [
    ("object.metadata.name", ["a"]),
    ("[object.metadata.name, object.metadata.name, 'x']", ["a", "x"]),
    ("object.metadata.values", ["v"]),  # non-strings in a list are left out
    ("object.metadata.?missing.orValue(null)", []),
    ("object.metadata.missing", []),  # a CEL error indexes nothing
    ("object.metadata", []),  # neither a string nor a list
])
def test_index_values(expression: str, values: list[str]) -> None:
    from webhook.policy.model import ReferenceIndex
    from webhook.policy.reference_indexes import index_values

    obj = {"metadata": {"name": "a", "values": ["v", 1, None]}}
    assert index_values(ReferenceIndex("i", expression), obj) == values


def test_an_index_definition_is_content_addressed_and_not_part_of_the_cache_identity() -> None:
    from webhook.policy.model import ReferenceIndex

    a, b = ReferenceIndex("host", "object.a"), ReferenceIndex("host", "object.b")
    assert a.indexer_name != b.indexer_name and a.indexer_name == ReferenceIndex("host", "object.a").indexer_name
    assert Reference("v1", "x", (a,)) == Reference("v1", "x", (b,)) == Reference("v1", "x")
