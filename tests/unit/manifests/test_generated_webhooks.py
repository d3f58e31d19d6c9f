"""The webhook configurations generated for the shipped policy library route what the policies select.

The leader (and ``tollgate webhook-config``) derives the rules from the loaded policies
(``webhook.policy.webhook_configs``); here the API server's side is simulated: which rule of which entry
a request hits (``admissionregistration`` rule matching: group, version, operation,
``resource[/subresource]``), then the entry's matchConditions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cel_expr_python import cel

from webhook.cli.webhook_config import load_policies
from webhook.policy.webhook_configs import WebhookTarget, parsed_specs, webhook_configurations

ROOT = Path(__file__).resolve().parents[3]


def _validating() -> list[dict[str, Any]]:
    configs = webhook_configurations(parsed_specs(load_policies([ROOT / "policies"])), WebhookTarget())
    hooks: list[dict[str, Any]] = configs.validating["webhooks"]
    return hooks


def _rule_hits(rule: dict[str, Any], group: str, resource: str, sub: str, operation: str) -> bool:
    """``admissionregistration`` RuleWithOperations matching, as the API server does it."""
    names = {f"{resource}/{sub}", f"{resource}/*", f"*/{sub}", "*/*"} if sub else {resource, "*"}
    return ((group in rule["apiGroups"] or "*" in rule["apiGroups"])
            and ("v1" in rule["apiVersions"] or "*" in rule["apiVersions"])
            and (operation in rule["operations"] or "*" in rule["operations"])
            and bool(names & set(rule["resources"])))


def _sent_to(hooks: list[dict[str, Any]], *, resource: str, sub: str = "", operation: str = "UPDATE",
             group: str = "") -> list[str]:
    """The entries the API server would call for the request (rules, then every matchCondition)."""
    env = cel.NewEnv(variables={"request": cel.Type.DYN})
    request = {"uid": "0", "operation": operation, "namespace": "default", "name": "web",
               "resource": {"group": group, "version": "v1", "resource": resource},
               "kind": {"group": group, "version": "v1", "kind": "Pod"},
               "userInfo": {"username": "alice", "groups": ["system:authenticated"]}}
    if sub:
        request["subResource"] = sub
    out = []
    for hook in hooks:
        if not any(_rule_hits(rule, group, resource, sub, operation) for rule in hook["rules"]):
            continue
        values = [env.compile(c["expression"]).eval(data={"request": request}) for c in hook["matchConditions"]]
        assert all(v.type() != cel.Type.ERROR for v in values), values
        if all(v.value() is True for v in values):
            out.append(hook["name"])
    return out


def test_kubectl_debug_reaches_the_fail_entry() -> None:
    # UPDATE of pods/ephemeralcontainers: what `kubectl debug` sends; the Pod Security policies match it.
    assert _sent_to(_validating(), resource="pods", sub="ephemeralcontainers") == ["validate.tollgate.dev"]


def test_the_subresource_rule_is_its_own_update_only_rule() -> None:
    rules = [r for hook in _validating() for r in hook["rules"] if "pods/ephemeralcontainers" in r["resources"]]
    assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                      "resources": ["pods/ephemeralcontainers"], "scope": "*"}]


@pytest.mark.parametrize("sub", ["status", "exec", "log", "binding", "eviction", "attach", "portforward", "proxy"])
def test_other_pod_subresources_are_not_sent(sub: str) -> None:
    for operation in ("CREATE", "UPDATE", "CONNECT"):
        assert _sent_to(_validating(), resource="pods", sub=sub, operation=operation) == [], (sub, operation)


def test_pods_and_pod_controllers_are_still_sent() -> None:
    hooks = _validating()
    assert _sent_to(hooks, resource="pods", operation="CREATE") == ["validate.tollgate.dev"]
    assert _sent_to(hooks, resource="deployments", group="apps", operation="UPDATE") == ["validate.tollgate.dev"]
    assert _sent_to(hooks, resource="deployments", group="apps", sub="scale") == []
