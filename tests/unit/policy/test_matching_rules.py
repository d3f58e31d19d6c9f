"""The one pod-controller expansion and scope by the API server's rules.go, as every consumer sees them.

``autogen.podControllers`` is read by four consumers — the matcher (``rules_view``), the index
(``PolicyIndex.candidates``), the generated webhook configurations and the background audit
(``audit_rules``) — which must agree on every rule shape, or admission lets in what the
PolicyReport then flags. Namespace requests carry ``request.namespace`` set to the Namespace's own
name on UPDATE and DELETE, yet a Namespace is cluster-scoped.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.helpers import policy, request
from webhook.audit.auditor import audit_rules
from webhook.policy import InMemoryLookups, PolicyIndex, evaluate_validating
from webhook.policy.matching import View, rule_matches, rules_view
from webhook.policy.model import parse_policy
from webhook.policy.request import RequestCoordinates
from webhook.policy.webhook_configs import parsed_specs, webhook_configurations


def _autogen_policy(groups: list[str], versions: list[str], resources: list[str]) -> dict[str, Any]:
    p = policy("autogen", autogen={"podControllers": True})
    p["spec"]["match"]["resourceRules"] = [{"apiGroups": groups, "apiVersions": versions, "resources": resources,
                                            "operations": ["CREATE", "UPDATE"]}]
    return p


DEPLOYMENT = RequestCoordinates.of(request({"kind": "Deployment"}, resource="deployments", group="apps",
                                           kind="Deployment"))
CRONJOB = RequestCoordinates.of(request({"kind": "CronJob"}, resource="cronjobs", group="batch", kind="CronJob"))

#: (apiGroups, apiVersions, resources) → the view a Deployment's CREATE gets (None: not selected).
SHAPES = [
    ([""], ["v1"], ["pods"], View.POD_TEMPLATE),
    ([""], ["*"], ["pods"], View.POD_TEMPLATE),
    (["*"], ["v1"], ["pods"], View.POD_TEMPLATE),
    ([""], ["v1"], ["*"], View.POD_TEMPLATE),
    ([""], ["v1"], ["*/*"], View.POD_TEMPLATE),
    ([""], ["v1"], ["pods", "pods/ephemeralcontainers"], View.POD_TEMPLATE),
    (["*"], ["*"], ["*"], View.OBJECT),  # the rule selects the Deployment itself
    ([""], ["v1"], ["pods/status"], None),
    ([""], ["v1"], ["pods/ephemeralcontainers"], None),
    ([""], ["v1"], ["pods/*"], None),
    (["apps"], ["v1"], ["pods"], None),
    ([""], ["v2"], ["pods"], None),
    ([""], ["v1"], ["configmaps"], None),
]


def _routed_by_webhook_config(obj: dict[str, Any], coords: RequestCoordinates) -> bool:
    config = webhook_configurations(parsed_specs([obj])).validating
    for hook in config["webhooks"]:
        for rule in hook["rules"]:
            if ({coords.group, "*"} & set(rule["apiGroups"]) and {coords.resource, "*", "*/*"} & set(rule["resources"])
                    and {coords.operation, "*"} & set(rule["operations"])):
                return True
    return False


@pytest.mark.parametrize(("groups", "versions", "resources", "view"), SHAPES,
                         ids=[f"{g}-{v}-{r}" for g, v, r, _ in SHAPES])
@pytest.mark.parametrize("coords", [DEPLOYMENT, CRONJOB], ids=["deployment", "cronjob"])
def test_the_four_consumers_agree_on_autogen(groups: list[str], versions: list[str], resources: list[str],
                                             view: View | None, coords: RequestCoordinates) -> None:
    obj = _autogen_policy(groups, versions, resources)
    spec = parse_policy(obj)
    assert rules_view(spec, coords) is view
    selected = view is not None
    index = PolicyIndex()
    index.upsert(obj)
    assert bool(index.candidates(coords)) is selected, "the index"
    assert _routed_by_webhook_config(obj, coords) is selected, "the generated webhook configuration"
    assert any(rule_matches(r, coords, version="v1") for r in audit_rules(spec)) is selected, "the background audit"


def test_without_autogen_no_consumer_routes_controllers() -> None:
    obj = policy("plain")
    spec = parse_policy(obj)
    index = PolicyIndex()
    index.upsert(obj)
    assert rules_view(spec, DEPLOYMENT) is None
    assert not index.candidates(DEPLOYMENT)
    assert not _routed_by_webhook_config(obj, DEPLOYMENT)
    assert not any(rule_matches(r, DEPLOYMENT, version="v1") for r in audit_rules(spec))


# -- scope: a Namespace is cluster-scoped ------------------------------------------------------------------------

def _namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def _namespace_request(operation: str, name: str = "team-a", sub_resource: str = "") -> dict[str, Any]:
    obj = None if operation == "DELETE" else _namespace(name, {"pod-security.kubernetes.io/enforce": "privileged"})
    old = None if operation == "CREATE" else _namespace(name, {"pod-security.kubernetes.io/enforce": "restricted"})
    # The API server sets request.namespace to the Namespace's own name on UPDATE and DELETE.
    return request(obj, old=old, operation=operation, resource="namespaces", kind="Namespace",
                   sub_resource=sub_resource, namespace=None if operation == "CREATE" else name)


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_a_namespace_is_cluster_scoped(operation: str) -> None:
    coords = RequestCoordinates.of(_namespace_request(operation))
    assert not coords.namespaced
    ops = ["CREATE", "UPDATE", "DELETE"]
    cluster = parse_policy(policy("c", resources=("namespaces",), operations=tuple(ops)))
    for scope, view in (("Cluster", View.OBJECT), ("Namespaced", None), ("*", View.OBJECT)):
        obj = policy("s", resources=("namespaces",), operations=tuple(ops))
        obj["spec"]["match"]["resourceRules"][0]["scope"] = scope
        assert rules_view(parse_policy(obj), coords) is view, scope
    assert rules_view(cluster, coords) is View.OBJECT


def test_namespace_subresources_are_cluster_scoped_too() -> None:
    coords = RequestCoordinates.of(_namespace_request("UPDATE", sub_resource="status"))
    assert not coords.namespaced


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE"])
def test_a_tenant_never_matches_its_own_namespace(operation: str) -> None:
    tenant = policy("relabel-guard", kind="AdmissionPolicy", namespace="team-a", resources=("namespaces",),
                    operations=("CREATE", "UPDATE", "DELETE"), validations=[{"expression": "false"}])
    req = _namespace_request(operation)
    assert rules_view(parse_policy(tenant), RequestCoordinates.of(req)) is None
    index = PolicyIndex()
    index.upsert(tenant)
    outcome = evaluate_validating(req, index.plan(RequestCoordinates.of(req)), InMemoryLookups())
    assert outcome.allowed and not outcome.results


def test_a_tenant_still_matches_objects_in_its_namespace() -> None:
    tenant = parse_policy(policy("t", kind="AdmissionPolicy", namespace="team-a", resources=("configmaps",)))
    inside = RequestCoordinates.of(request({}, resource="configmaps", kind="ConfigMap", namespace="team-a"))
    outside = RequestCoordinates.of(request({}, resource="configmaps", kind="ConfigMap", namespace="team-b"))
    assert rules_view(tenant, inside) is View.OBJECT
    assert rules_view(tenant, outside) is None


def test_namespace_object_is_null_for_a_namespace_request() -> None:
    # VAP's dispatcher unsets the namespace of a Namespace object: namespaceObject is null.
    checks = policy("ns-object", resources=("namespaces",), operations=("UPDATE",),
                    validations=[{"expression": "namespaceObject == null"}])
    lookups = InMemoryLookups(namespaces=[_namespace("team-a")])
    outcome = evaluate_validating(_namespace_request("UPDATE"), [parse_compiled(checks)], lookups)
    assert outcome.allowed, outcome.message


def test_namespace_selector_reads_the_namespace_request_own_labels() -> None:
    # A Namespace request is matched on the object's own labels (VAP), not the cache's stale copy.
    sel = policy("sel", resources=("namespaces",), operations=("UPDATE",), validations=[{"expression": "false"}],
                 namespaceSelector={"matchLabels": {"pod-security.kubernetes.io/enforce": "privileged"}})
    lookups = InMemoryLookups(namespaces=[_namespace("team-a", {"pod-security.kubernetes.io/enforce": "restricted"})])
    outcome = evaluate_validating(_namespace_request("UPDATE"), [parse_compiled(sel)], lookups)
    assert not outcome.allowed


def parse_compiled(obj: dict[str, Any]) -> Any:
    from webhook.policy import compile_policy

    compiled = compile_policy(obj).policy
    assert compiled is not None
    return compiled
