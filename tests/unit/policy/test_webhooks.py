"""webhook.policy.webhook_configs: the generated webhook configurations (pure)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from cel_expr_python import cel

from tests.unit.policy.helpers import policy
from webhook.policy.matching import POD_CONTROLLERS
from webhook.policy.webhook_configs import WebhookTarget, parse_webhook_url, parsed_specs, webhook_configurations

MUTATION = [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]


def _configs(*objs: dict[str, Any], target: WebhookTarget | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    configs = webhook_configurations(parsed_specs(objs), target)
    return configs.validating, configs.mutating


def _resources(config: dict[str, Any]) -> set[tuple[str, str]]:
    return {(g, r) for hook in config["webhooks"] for rule in hook["rules"]
            for g in rule["apiGroups"] for r in rule["resources"]}


def _request(group: str, resource: str, operation: str = "CREATE", sub: str | None = None,
             username: str = "alice") -> dict[str, Any]:
    req: dict[str, Any] = {"resource": {"group": group, "version": "v1", "resource": resource},
                           "operation": operation, "userInfo": {"username": username, "groups": []}}
    if sub is not None:
        req["subResource"] = sub
    return req


def _sent(hook: dict[str, Any], request: dict[str, Any]) -> bool:
    """Whether every matchCondition of ``hook`` is true for ``request`` (compiled with CEL, as the API server does)."""
    env = cel.NewEnv(variables={"request": cel.Type.DYN})
    results = []
    for condition in hook["matchConditions"]:
        value = env.compile(condition["expression"]).eval(data={"request": request})
        assert value.type() != cel.Type.ERROR, f"{condition['name']}: {value}"
        results.append(value.value())
    return all(results)


def test_no_policies_no_webhooks() -> None:
    validating, mutating = _configs()
    assert validating["webhooks"] == [] and mutating["webhooks"] == []
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert validating["metadata"]["name"] == mutating["metadata"]["name"] == "tollgate"


def test_pod_policy_with_autogen_names_pods_and_the_pod_controllers_only() -> None:
    validating, mutating = _configs(policy("p", autogen={"podControllers": True}))
    assert _resources(validating) == {("", "pods")} | set(POD_CONTROLLERS)
    assert mutating["webhooks"] == []
    [hook] = validating["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["name"] == "validate.tollgate.dev"
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in hook["rules"])
    # Without autogen, pods only.
    validating, _ = _configs(policy("p"))
    assert _resources(validating) == {("", "pods")}


def test_rules_are_the_union_merged_when_only_resources_differ() -> None:
    validating, _ = _configs(policy("a", resources=("pods",)), policy("b", resources=("configmaps",)),
                             policy("c", groups=("apps",), resources=("deployments",), operations=("DELETE",)))
    [hook] = validating["webhooks"]
    assert hook["rules"] == [
        {"apiGroups": [""], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
         "resources": ["configmaps", "pods"], "scope": "*"},
        {"apiGroups": ["apps"], "apiVersions": ["*"], "operations": ["DELETE"], "resources": ["deployments"],
         "scope": "*"},
    ]


def test_validating_only_for_validations_and_audit_mutating_only_for_mutations() -> None:
    validating, mutating = _configs(
        policy("checks", resources=("pods",)),
        policy("audits", resources=("services",), auditAnnotations=[{"key": "k", "valueExpression": "'v'"}]),
        policy("labels", resources=("configmaps",), operations=("*",), mutations=MUTATION),
    )
    assert _resources(validating) == {("", "pods"), ("", "services")}
    assert _resources(mutating) == {("", "configmaps")}
    [hook] = mutating["webhooks"]
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"], "a patch means nothing on DELETE/CONNECT"
    assert hook["reinvocationPolicy"] == "Never" and hook["clientConfig"]["service"]["path"] == "/mutate"
    # A mutation on DELETE only needs no mutating webhook at all.
    _, mutating = _configs(policy("labels", operations=("DELETE",), mutations=MUTATION))
    assert mutating["webhooks"] == []


def test_one_entry_per_failure_policy_and_ignore_never_gets_fail_requests() -> None:
    validating, _ = _configs(policy("strict", resources=("pods",)),
                             policy("lenient", resources=("pods", "configmaps"), failurePolicy="Ignore"))
    fail, ignore = validating["webhooks"]
    assert (fail["failurePolicy"], ignore["failurePolicy"]) == ("Fail", "Ignore")
    assert fail["name"] != ignore["name"]
    assert _resources({"webhooks": [fail]}) == {("", "pods")}
    assert _resources({"webhooks": [ignore]}) == {("", "configmaps"), ("", "pods")}
    # Disjoint: a pod request goes to the Fail entry only, a ConfigMap to the Ignore entry only.
    assert _sent(fail, _request("", "pods")) and not _sent(ignore, _request("", "pods"))
    assert _sent(ignore, _request("", "configmaps"))
    assert _sent(ignore, _request("", "pods", sub="status")), "pods/status is not in the Fail entry's rules"


def test_ignore_only_policies_never_fail_closed() -> None:
    validating, mutating = _configs(policy("a", failurePolicy="Ignore"),
                                    policy("b", failurePolicy="Ignore", mutations=MUTATION))
    for config in (validating, mutating):
        assert [h["failurePolicy"] for h in config["webhooks"]] == ["Ignore"]
        assert "not-sent-to-the-fail-entry" not in {c["name"] for c in config["webhooks"][0]["matchConditions"]}


def test_exclusions_follow_the_target() -> None:
    target = WebhookTarget(service="gate", namespace="gate-ns", service_account="gate-sa", ca_bundle="Q0E=")
    validating, _ = _configs(policy("p", groups=("*",), resources=("*",)), target=target)
    [hook] = validating["webhooks"]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["gate-ns", "kube-system"]}]
    assert hook["clientConfig"] == {"service": {"name": "gate", "namespace": "gate-ns", "path": "/validate",
                                                "port": 443}, "caBundle": "Q0E="}
    assert not _sent(hook, _request("", "pods", username="system:serviceaccount:gate-ns:gate-sa"))
    assert not _sent(hook, _request("coordination.k8s.io", "leases"))
    assert not _sent(hook, _request("", "events"))
    assert not _sent(hook, _request("authorization.k8s.io", "subjectaccessreviews"))
    assert _sent(hook, _request("", "pods"))
    assert hook["sideEffects"] == "NoneOnDryRun" and hook["admissionReviewVersions"] == ["v1"]


def test_url_target_calls_the_url_instead_of_the_service() -> None:
    target = WebhookTarget(url="https://127.0.0.1:8443/base", ca_bundle="Q0E=")
    validating, mutating = _configs(policy("v"), policy("m", mutations=MUTATION), target=target)
    assert validating["webhooks"][0]["clientConfig"] == {"url": "https://127.0.0.1:8443/base/validate",
                                                         "caBundle": "Q0E="}
    assert mutating["webhooks"][0]["clientConfig"] == {"url": "https://127.0.0.1:8443/base/mutate",
                                                       "caBundle": "Q0E="}


@pytest.mark.parametrize(("text", "reason"), [
    ("http://127.0.0.1:8443", "scheme must be https"),
    ("https:///validate", "no host"),
    ("https://user:pw@127.0.0.1:8443", "user info"),
    ("https://127.0.0.1:8443/?a=b", "query or fragment"),
    ("https://127.0.0.1:8443/#x", "query or fragment"),
    ("https://127.0.0.1:99999", "invalid port"),
])
def test_webhook_urls_the_api_server_would_refuse_are_refused(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_webhook_url(text)


def test_webhook_url_loses_its_trailing_slash() -> None:
    assert parse_webhook_url("https://hooks.example.com/tollgate/") == "https://hooks.example.com/tollgate"


@pytest.mark.parametrize(("pattern", "sub", "covered"), [
    ("pods", None, True), ("pods", "status", False), ("pods/status", "status", True), ("pods/status", None, False),
    ("pods/*", "exec", True), ("*", None, True), ("*", "status", False), ("*/status", "status", True),
    ("*/*", "exec", True),
])
def test_fail_coverage_condition_follows_rule_resource_patterns(pattern: str, sub: str | None, covered: bool) -> None:
    validating, _ = _configs(policy("strict", resources=(pattern,)),
                             policy("lenient", groups=("*",), resources=("*/*",), failurePolicy="Ignore"))
    ignore = validating["webhooks"][1]
    assert _sent(ignore, _request("", "pods", sub=sub)) is not covered


def test_not_ready_policies_still_route_and_invalid_specs_are_skipped() -> None:
    broken_cel = policy("broken", validations=[{"expression": "objekt.spec == 1"}], resources=("secrets",))
    invalid = policy("invalid", failurePolicy="Sometimes")
    specs = parsed_specs([broken_cel, invalid])
    assert [s.name for s in specs] == ["broken"]
    validating, _ = _configs(broken_cel, invalid)
    assert _resources(validating) == {("", "secrets")}


def test_output_is_deterministic() -> None:
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("pods", "Fail", {}), ("configmaps", "Ignore", {}), ("secrets", "Fail", {"mutations": MUTATION}),
        ("services", "Ignore", {"autogen": {"podControllers": True}})]
    objs = [policy(f"p{i}", resources=(r,), failurePolicy=fp, **extra) for i, (r, fp, extra) in enumerate(cases)]
    first = webhook_configurations(parsed_specs(objs))
    for seed in range(5):
        shuffled = objs[:]
        random.Random(seed).shuffle(shuffled)
        assert webhook_configurations(parsed_specs(shuffled)) == first
