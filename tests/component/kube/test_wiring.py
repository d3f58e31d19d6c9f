"""The cluster-side pieces wired as `tollgate serve` should wire them (the reference for webhook/server/leadership.py).

Real informers (KubeListerWatcher) on the policies, the leader elector, the
status writer, the webhook configuration reconciler and the self-managed
certificates, all against one fake API server: a policy applied with the API
gets its Ready status, the webhook rules for its resources, and the rules and
caBundle carry the self-managed CA.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient

from tests.fakeapi.server import FakeApiServer
from tests.unit.policy.helpers import policy
from webhook.informer import ResourceEventHandlerFuncs, SharedInformer
from webhook.kube.leader import LeaderElectionConfig, LeaderElector
from webhook.kube.listwatch import KubeListerWatcher
from webhook.kube.managed_certs import CertMaterial, RotationPolicy, SelfManagedCerts
from webhook.kube.status import StatusWriter
from webhook.kube.webhook_reconciler import WebhookConfigReconciler
from webhook.metrics import Metrics
from webhook.policy import compile_policy
from webhook.policy.webhook_configs import WebhookTarget, parsed_specs
from webhook.tls import generate as certs

NS = "tollgate-system"


def _install(fake: FakeApiServer) -> None:
    fake.apply("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tollgate-tls", "namespace": NS}})
    for kind, plural in (("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
                         ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations")):
        fake.apply(plural, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                            "metadata": {"name": "tollgate", "labels": {"app.kubernetes.io/name": "tollgate",
                                                                        "app.kubernetes.io/managed-by": "tollgate"}}})


async def _until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):  # hang guard only
        while not predicate():
            await asyncio.sleep(0.01)


async def test_serve_wiring(fake_api: FakeApiServer, api: ApiClient, tmp_path: Path) -> None:
    _install(fake_api)
    metrics = Metrics()
    cluster_lw = KubeListerWatcher(api, group="tollgate.dev", version="v1alpha1", plural="clusteradmissionpolicies")
    informer = SharedInformer(cluster_lw, name="clusteradmissionpolicies")

    # Construction order: the elector's callbacks name the others, which ask the elector whether they lead.
    elector: LeaderElector | None = None

    def is_leader() -> bool:
        return elector is not None and elector.is_leader()

    cert_manager = SelfManagedCerts(api, namespace=NS, cert_dir=tmp_path,
                                    policy=RotationPolicy(dns_names=tuple(certs.service_dns_names("tollgate", NS))),
                                    is_leader=is_leader, metrics=metrics.managed_certs)
    writer = StatusWriter(api, is_leader=is_leader, metrics=metrics.status)
    registrations: list[Any] = []
    reconciler = WebhookConfigReconciler(
        api, WebhookTarget(namespace=NS), is_leader=is_leader, debounce=0.05, metrics=metrics.webhook_configs,
        policies=lambda: parsed_specs(informer.indexer.list()),
        synced=lambda: informer.has_synced() and all(r.has_synced() for r in registrations),
        ca_bundle=cert_manager.ca_bundle)

    def on_add(obj: dict[str, Any], _initial: bool) -> None:
        writer.enqueue(obj, compile_policy(obj).condition)
        reconciler.trigger()

    def on_update(old: dict[str, Any], new: dict[str, Any]) -> None:
        # Also on status-only updates: enqueue drops a write the leader already made.
        writer.enqueue(new, compile_policy(new).condition)
        if old.get("spec") != new.get("spec"):
            reconciler.trigger()

    def on_delete(obj: Any) -> None:
        writer.forget(obj if isinstance(obj, dict) else obj.obj)
        reconciler.trigger()

    registrations.append(informer.add_event_handler(ResourceEventHandlerFuncs(add=on_add, update=on_update,
                                                                              delete=on_delete, sync_calls="loop")))

    def started_leading() -> None:
        writer.resync()
        reconciler.trigger()
        cert_manager.trigger()

    elector = LeaderElector(api, LeaderElectionConfig(lease_name="tollgate-status-writer", lease_namespace=NS,
                                                      identity="pod-a"),
                            on_started_leading=started_leading)

    # Start: certificate files first (the TLS listener needs them), then everything else.
    await cert_manager.ensure()
    assert (tmp_path / "tls.crt").exists()
    for component in (writer, reconciler, cert_manager, elector, informer):
        await component.start()
    try:
        fake_api.apply("clusteradmissionpolicies", policy("no-privileged", autogen={"podControllers": True}))
        await _until(lambda: "status" in (fake_api.get("clusteradmissionpolicies", "no-privileged") or {}))
        await _until(lambda: bool((fake_api.get("validatingwebhookconfigurations", "tollgate") or {})
                                  .get("webhooks")))
        stored = fake_api.get("clusteradmissionpolicies", "no-privileged")
        assert stored is not None and stored["status"]["conditions"][0]["status"] == "True"
        config = fake_api.get("validatingwebhookconfigurations", "tollgate")
        assert config is not None
        [hook] = config["webhooks"]
        secret = fake_api.get("secrets", f"{NS}/tollgate-tls")
        assert secret is not None
        material = CertMaterial.from_secret(secret)
        assert material is not None
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == material.bundle
        assert certs.issued_by((tmp_path / "tls.crt").read_bytes(), material.signer)
    finally:
        for component in (informer, elector, cert_manager, reconciler, writer):
            await component.stop()
