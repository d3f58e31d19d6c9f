"""The webhook configurations Tollgate's leader writes, as the real API server stores them."""

from __future__ import annotations

import json

from tests.cluster_objects import eventually
from tests.realapi.helpers import new_namespace, unique
from tests.realapi.test_policies import forbidden_key
from tests.realapi.tollgate import SA_USER, Deployment

CONFIGURATIONS = ("validating", "mutating")
RESULTS = ("created", "updated", "unchanged", "error")


def test_the_leader_registers_the_generated_configurations_by_url(deployment: Deployment) -> None:
    assert deployment.tollgate is not None
    assert not deployment.webhook_differences()
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        hooks = deployment.live_webhook_configuration(kind)["webhooks"]
        assert hooks, kind
        for hook in hooks:
            assert hook["clientConfig"]["url"].startswith(deployment.tollgate.url + "/"), hook["clientConfig"]
            assert hook["clientConfig"].get("caBundle"), hook["name"]


def reconciles(deployment: Deployment, configuration: str) -> dict[str, float]:
    assert deployment.tollgate is not None
    return {r: deployment.tollgate.metric("tollgate_webhook_config_reconciles_total", configuration=configuration,
                                          result=r) for r in RESULTS}


def configuration_writes(deployment: Deployment) -> list[str]:
    """Tollgate's writes of webhook configurations, from the API server's audit log."""
    return [f"{e['verb']} {e['objectRef']['resource']} at {e['stageTimestamp']}"
            for e in deployment.cluster.audit_events()
            if e.get("stage") == "ResponseComplete" and e["user"]["username"] == SA_USER
            and e["verb"] in ("create", "update", "patch")
            and (e.get("objectRef") or {}).get("resource", "").endswith("webhookconfigurations")]


def test_a_policy_change_that_keeps_the_rules_writes_no_configuration(deployment: Deployment) -> None:
    namespace = new_namespace(deployment, "reconcile")
    name = unique("reconcile")
    deployment.add_policy(name, forbidden_key("x", "realapi: before", namespace))
    before = {c: reconciles(deployment, c) for c in CONFIGURATIONS}
    writes = configuration_writes(deployment)

    edit = forbidden_key("x", "realapi: after", namespace)["validations"]  # a message: the same rules
    deployment.kubectl("patch", "clusteradmissionpolicy", name, "--type=merge",
                       "-p", json.dumps({"spec": {"validations": edit}}), check=True)

    def reconciled() -> None:  # the edit's reconcile ran for both configurations
        for c in CONFIGURATIONS:
            assert sum(reconciles(deployment, c).values()) > sum(before[c].values()), (c, before[c])

    eventually(reconciled)
    after = {c: reconciles(deployment, c) for c in CONFIGURATIONS}
    assert configuration_writes(deployment) == writes
    assert all(after[c]["updated"] == before[c]["updated"] for c in CONFIGURATIONS), (before, after)
