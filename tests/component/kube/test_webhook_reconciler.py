"""WebhookConfigReconciler against the fake API server with real kubernetes_asyncio calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from tests.fakeapi.server import FakeApiServer
from tests.unit.policy.helpers import policy
from webhook.informer import Backoff
from webhook.kube.api import ApiException
from webhook.kube.webhook_reconciler import WebhookConfigReconciler
from webhook.policy.model import PolicySpec
from webhook.policy.webhook_configs import WebhookTarget, parsed_specs

VWC = "validatingwebhookconfigurations"
MWC = "mutatingwebhookconfigurations"
LABELS = {"app.kubernetes.io/name": "tollgate", "app.kubernetes.io/managed-by": "tollgate"}
MUTATION = [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]


def _install_manifests(fake: FakeApiServer, **extra_meta: Any) -> None:
    """What `kubectl apply -k manifests/` creates: both configurations, without webhooks."""
    for kind, plural in (("ValidatingWebhookConfiguration", VWC), ("MutatingWebhookConfiguration", MWC)):
        fake.apply(plural, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                            "metadata": {"name": "tollgate", "labels": dict(LABELS), **extra_meta}})


def _hooks(fake: FakeApiServer, plural: str) -> list[dict[str, Any]]:
    obj = fake.get(plural, "tollgate")
    assert obj is not None
    return list(obj.get("webhooks") or [])


def _resources(hook: dict[str, Any]) -> set[str]:
    return {r for rule in hook["rules"] for r in rule["resources"]}


class Policies:
    """The policy objects the informers would hold; tests edit ``objects``."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []

    def __call__(self) -> list[PolicySpec]:
        return parsed_specs(self.objects)


@pytest.fixture
async def make(api: ApiClient) -> AsyncIterator[Callable[..., WebhookConfigReconciler]]:
    made: list[WebhookConfigReconciler] = []

    def factory(policies: Policies, **kwargs: Any) -> WebhookConfigReconciler:
        kwargs.setdefault("debounce", 0.0)
        kwargs.setdefault("backoff_factory", lambda: Backoff(initial=0.01, cap=0.02, jitter=0.0))
        reconciler = WebhookConfigReconciler(api, WebhookTarget(), policies=policies, **kwargs)
        made.append(reconciler)
        return reconciler

    yield factory
    for reconciler in made:
        await reconciler.stop()


async def _settle(reconciler: WebhookConfigReconciler) -> None:
    await asyncio.wait_for(reconciler.wait_idle(), timeout=5)


def _count(reconciler: WebhookConfigReconciler, configuration: str, result: str) -> float:
    value = reconciler.metrics.registry.get_sample_value(
        "tollgate_webhook_config_reconciles_total", {"configuration": configuration, "result": result})
    return value or 0.0


async def test_add_and_remove_policies(fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]) -> None:
    _install_manifests(fake_api)
    policies = Policies()
    reconciler = make(policies)
    await reconciler.start()
    await _settle(reconciler)
    assert _hooks(fake_api, VWC) == [] and _hooks(fake_api, MWC) == []
    assert fake_api.count("PUT") == 0, "no policies and nothing to change: no write"

    # Add a validating pod policy with autogen: rules for pods and the pod controllers, Fail.
    policies.objects.append(policy("no-privileged", autogen={"podControllers": True}))
    reconciler.trigger()
    await _settle(reconciler)
    [hook] = _hooks(fake_api, VWC)
    assert hook["failurePolicy"] == "Fail" and hook["clientConfig"]["service"]["path"] == "/validate"
    assert _resources(hook) == {"pods", "replicationcontrollers", "deployments", "statefulsets", "daemonsets",
                                "replicasets", "jobs", "cronjobs"}
    assert _hooks(fake_api, MWC) == []
    assert fake_api.count("PUT", f"/{VWC}/tollgate") == 1 and fake_api.count("PUT", f"/{MWC}/tollgate") == 0

    # Add a mutating policy: only the mutating configuration changes.
    policies.objects.append(policy("labels", resources=("configmaps",), mutations=MUTATION))
    reconciler.trigger()
    await _settle(reconciler)
    [mutating] = _hooks(fake_api, MWC)
    assert _resources(mutating) == {"configmaps"}
    assert fake_api.count("PUT", f"/{VWC}/tollgate") == 1 and fake_api.count("PUT", f"/{MWC}/tollgate") == 1

    # Remove everything: no rules at all.
    policies.objects.clear()
    reconciler.trigger()
    await _settle(reconciler)
    assert _hooks(fake_api, VWC) == [] and _hooks(fake_api, MWC) == []
    assert _count(reconciler, "validating", "updated") == 2
    assert reconciler.metrics.registry.get_sample_value(
        "tollgate_webhook_config_webhooks", {"configuration": "validating"}) == 0


async def test_failure_policy_split(fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]) -> None:
    _install_manifests(fake_api)
    policies = Policies()
    policies.objects = [policy("strict", resources=("pods",)),
                        policy("lenient", resources=("configmaps",), failurePolicy="Ignore")]
    reconciler = make(policies)
    await reconciler.start()
    await _settle(reconciler)
    fail, ignore = _hooks(fake_api, VWC)
    assert (fail["failurePolicy"], _resources(fail)) == ("Fail", {"pods"})
    assert (ignore["failurePolicy"], _resources(ignore)) == ("Ignore", {"configmaps"})
    # Only Ignore policies left: nothing in the cluster can fail closed any more.
    policies.objects = [policies.objects[1]]
    reconciler.trigger()
    await _settle(reconciler)
    assert [h["failurePolicy"] for h in _hooks(fake_api, VWC)] == ["Ignore"]


async def test_no_write_when_unchanged_and_drift_is_undone(
    fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]
) -> None:
    _install_manifests(fake_api)
    policies = Policies()
    policies.objects = [policy("p")]
    reconciler = make(policies)
    written = await reconciler.reconcile_once()
    assert written == {"validating": "updated", "mutating": "unchanged"}
    rv = fake_api.rv
    for _ in range(3):
        assert await reconciler.reconcile_once() == {"validating": "unchanged", "mutating": "unchanged"}
    assert fake_api.rv == rv and fake_api.count("PUT") == 1
    # Someone edits the configuration by hand: the next reconcile puts it back.
    live = fake_api.get(VWC, "tollgate")
    assert live is not None
    live["webhooks"][0]["failurePolicy"] = "Ignore"
    fake_api.apply(VWC, live)
    assert (await reconciler.reconcile_once())["validating"] == "updated"
    assert _hooks(fake_api, VWC)[0]["failurePolicy"] == "Fail"


async def test_keeps_injected_ca_bundle_and_annotations(
    fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]
) -> None:
    annotations = {"cert-manager.io/inject-ca-from": "tollgate-system/tollgate"}
    _install_manifests(fake_api, annotations=annotations)
    policies = Policies()
    policies.objects = [policy("p")]
    reconciler = make(policies)
    await reconciler.reconcile_once()
    # cert-manager's CA injector fills caBundle into the entry...
    live = fake_api.get(VWC, "tollgate")
    assert live is not None
    live["webhooks"][0]["clientConfig"]["caBundle"] = "SU5KRUNURUQ="
    fake_api.apply(VWC, live)
    # ... which is no difference, and a new (Ignore) entry inherits it.
    assert (await reconciler.reconcile_once())["validating"] == "unchanged"
    policies.objects.append(policy("lenient", resources=("secrets",), failurePolicy="Ignore"))
    assert (await reconciler.reconcile_once())["validating"] == "updated"
    hooks = _hooks(fake_api, VWC)
    assert [h["clientConfig"]["caBundle"] for h in hooks] == ["SU5KRUNURUQ=", "SU5KRUNURUQ="]
    stored = fake_api.get(VWC, "tollgate")
    assert stored is not None and stored["metadata"]["annotations"] == annotations
    # Even with a CA file at hand, the injector's caBundle is left alone.
    with_file = make(policies, ca_bundle=lambda: "RklMRQ==")
    assert (await with_file.reconcile_once())["validating"] == "unchanged"


async def test_ca_bundle_source_wins(fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]) -> None:
    _install_manifests(fake_api)
    policies = Policies()
    policies.objects = [policy("p"), policy("m", mutations=MUTATION)]
    reconciler = make(policies, ca_bundle=lambda: "U0VMRg==")
    await reconciler.reconcile_once()
    assert [h["clientConfig"]["caBundle"] for h in _hooks(fake_api, VWC) + _hooks(fake_api, MWC)] == ["U0VMRg=="] * 2


async def test_conflict_is_retried(fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]) -> None:
    _install_manifests(fake_api)
    policies = Policies()
    policies.objects = [policy("p")]
    reconciler = make(policies)
    fake_api.fail("PUT", f"/{VWC}/tollgate", code=409, times=1)
    await reconciler.start()
    await _settle(reconciler)
    assert len(_hooks(fake_api, VWC)) == 1
    assert _count(reconciler, "validating", "error") == 1 and _count(reconciler, "validating", "updated") == 1


async def test_missing_configuration_is_an_error_unless_create_is_allowed(
    fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]
) -> None:
    policies = Policies()
    policies.objects = [policy("p")]
    with pytest.raises(ApiException) as missing:
        await make(policies).reconcile_once()
    assert missing.value.status == 404
    assert fake_api.count("POST") == 0
    assert await make(policies, create_missing=True).reconcile_once() == {"validating": "created",
                                                                        "mutating": "created"}
    assert len(_hooks(fake_api, VWC)) == 1 and _hooks(fake_api, MWC) == []


async def test_only_the_leader_writes(fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]) -> None:
    _install_manifests(fake_api)
    policies = Policies()
    policies.objects = [policy("p")]
    leading = False
    reconciler = make(policies, is_leader=lambda: leading)
    await reconciler.start()
    await _settle(reconciler)
    assert fake_api.count("GET") == 0 and fake_api.count("PUT") == 0
    leading = True
    reconciler.trigger()  # what on_started_leading is wired to
    await _settle(reconciler)
    assert len(_hooks(fake_api, VWC)) == 1


async def test_a_burst_of_triggers_is_one_reconcile(
    fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]
) -> None:
    _install_manifests(fake_api)
    policies = Policies()
    debouncing = asyncio.Event()
    release = asyncio.Event()

    async def sleep(_seconds: float) -> None:
        debouncing.set()
        await release.wait()

    reconciler = make(policies, debounce=1.0, sleep=sleep)
    await reconciler.start()
    await asyncio.wait_for(debouncing.wait(), timeout=5)
    for i in range(20):  # `kubectl apply -k policies/` while the reconciler waits out the debounce
        policies.objects.append(policy(f"p{i}", resources=(f"r{i}",)))
        reconciler.trigger()
    release.set()
    await _settle(reconciler)
    assert fake_api.count("GET", f"/{VWC}/tollgate") == 1 and fake_api.count("PUT", f"/{VWC}/tollgate") == 1
    assert _resources(_hooks(fake_api, VWC)[0]) == {f"r{i}" for i in range(20)}


async def test_nothing_is_written_before_the_policy_caches_sync(
    fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler]
) -> None:
    _install_manifests(fake_api)
    live = fake_api.get(VWC, "tollgate")
    assert live is not None
    fake_api.apply(VWC, {**live, "webhooks": [{"name": "validate.tollgate.dev", "rules": []}]})  # an older leader's
    policies = Policies()
    synced = False
    polls = 0

    async def sleep(_seconds: float) -> None:
        nonlocal polls, synced
        polls += 1
        if polls == 3:
            policies.objects = [policy("p")]
            synced = True
        await asyncio.sleep(0)

    reconciler = make(policies, synced=lambda: synced, sleep=sleep)
    await reconciler.start()
    await _settle(reconciler)
    assert polls == 3
    # The empty cache before the sync never reached the cluster: the only write has the policy's rule.
    assert fake_api.count("PUT") == 1
    [hook] = _hooks(fake_api, VWC)
    assert _resources(hook) == {"pods"}


async def test_fields_an_older_server_drops_are_not_rewritten_for_ever(
        fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler],
        caplog: pytest.LogCaptureFixture) -> None:
    # A 1.20 API server drops matchConditions; comparing with them found a difference on every reconcile.
    fake_api.drop_webhook_fields = frozenset({"matchConditions"})
    _install_manifests(fake_api)
    policies = Policies()
    policies.objects = [policy("p")]
    reconciler = make(policies)
    assert await reconciler.reconcile_once() == {"validating": "updated", "mutating": "unchanged"}
    assert "matchConditions" not in _hooks(fake_api, VWC)[0]
    assert any("did not store matchConditions" in r.getMessage() for r in caplog.records)
    puts = fake_api.count("PUT", VWC)
    for _ in range(3):
        assert await reconciler.reconcile_once() == {"validating": "unchanged", "mutating": "unchanged"}
    assert fake_api.count("PUT", VWC) == puts
    policies.objects = [policy("p"), policy("q", resources=("configmaps",))]  # a real change is still written
    assert (await reconciler.reconcile_once())["validating"] == "updated"


async def test_a_missing_configuration_does_not_stop_the_other(
        fake_api: FakeApiServer, make: Callable[..., WebhookConfigReconciler],
        caplog: pytest.LogCaptureFixture) -> None:
    _install_manifests(fake_api)
    fake_api.delete(VWC, "tollgate")  # removed by hand
    policies = Policies()
    policies.objects = [policy("v"), policy("m", mutations=MUTATION)]
    reconciler = make(policies)
    with pytest.raises(ApiException):
        await reconciler.reconcile_once()
    assert _hooks(fake_api, MWC), "the mutating configuration was left stale"
    assert _count(reconciler, "validating", "error") == 1 and _count(reconciler, "mutating", "updated") == 1
    [line] = [r.getMessage() for r in caplog.records if "reconcile of ValidatingWebhookConfiguration" in r.getMessage()]
    assert "HTTP 404" in line and "ApiException()" not in line
