"""What only the Lease-elected leader runs, and the elector itself: status, webhook configurations, certificates.

Every replica serves admission; one writes: policy Ready conditions
(:class:`~webhook.kube.status.StatusWriter`), the webhook configurations
(:class:`~webhook.kube.webhook_reconciler.WebhookConfigReconciler`) and the
self-managed certificate rotation (:class:`~webhook.kube.managed_certs.SelfManagedCerts`).
Built only in a cluster; the kube modules are imported here, on use, so
``--local`` never loads the API client.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.informer import SharedInformer
from webhook.metrics import Metrics
from webhook.server.settings import Settings

if TYPE_CHECKING:
    from webhook.kube.leader import LeaderElector
    from webhook.kube.managed_certs import SelfManagedCerts
    from webhook.kube.status import StatusWriter
    from webhook.kube.webhook_reconciler import WebhookConfigReconciler

#: The Lease the replicas elect their leader with.
LEASE_NAME = "tollgate-status-writer"


@dataclass(frozen=True, slots=True, kw_only=True)
class Leadership:
    """The elector and the leader-only components it gates (each None when its setting is off)."""

    elector: LeaderElector
    status_writer: StatusWriter | None
    reconciler: WebhookConfigReconciler | None
    cert_manager: SelfManagedCerts | None


def needs_leader(settings: Settings) -> bool:
    """Whether anything in ``settings`` is leader-only (a cluster must then elect one)."""
    return (settings.local_dir is None and (settings.write_status or settings.manage_webhooks
                                            or settings.self_managed_certs or settings.background_audit))


def self_managed_certs(settings: Settings, api_client: Any, *, is_leader: Callable[[], bool],
                       metrics: Metrics | None = None) -> SelfManagedCerts:
    """The self-managed certificate manager for ``settings`` (see ``webhook.kube.managed_certs.SelfManagedCerts``).

    Raises:
        ValueError: ``settings.cert_dir`` is not set.
    """
    from webhook.kube.managed_certs import RotationPolicy, SelfManagedCerts
    from webhook.tls import generate as certs

    if settings.cert_dir is None:
        raise ValueError("self-managed certificates need a cert_dir")
    names = tuple(certs.service_dns_names(settings.webhook_service, settings.namespace))
    return SelfManagedCerts(api_client, namespace=settings.namespace, cert_dir=settings.cert_dir,
                            policy=RotationPolicy(dns_names=names), webhook_name=settings.webhook_config_name,
                            is_leader=is_leader, metrics=metrics.managed_certs if metrics else None)


async def bootstrap_certificates(settings: Settings, api_client: Any) -> None:
    """Self-managed mode: write the Secret's certificate into ``cert_dir`` (creating it if empty) before serving.

    Any replica may bootstrap (the first Secret write wins); rotation is the leader's, later.
    """
    await self_managed_certs(settings, api_client, is_leader=lambda: False).ensure()


def leadership(settings: Settings, api_client: Any, metrics: Metrics, policy_informers: tuple[SharedInformer, ...],
               synced: Callable[[], bool], *,
               imported: Callable[[], list[dict[str, Any]]] = lambda: []) -> Leadership:
    """The Lease elector and what only the leader does, as ``settings`` asks.

    Args:
        settings: ``write_status``, ``manage_webhooks``, ``self_managed_certs`` and the identities.
        api_client: a kubernetes_asyncio ApiClient.
        metrics: the app's metrics.
        policy_informers: the policies the webhook configurations are generated from.
        synced: whether the policy caches have synced (the reconciler waits for it).
        imported: the imported policies' objects, routed by the webhook configurations too.
    """
    from webhook.kube.leader import LeaderElectionConfig, LeaderElector
    from webhook.kube.status import StatusWriter
    from webhook.kube.webhook_reconciler import WebhookConfigReconciler
    from webhook.policy.webhook_configs import WebhookTarget, parsed_specs
    from webhook.tls import generate as certs

    elector: LeaderElector

    def is_leader() -> bool:
        return elector.is_leader()  # bound below: the elector's callbacks name the others

    writer = StatusWriter(api_client, is_leader=is_leader, metrics=metrics.status) if settings.write_status else None
    cert_manager = (self_managed_certs(settings, api_client, is_leader=is_leader, metrics=metrics)
                    if settings.self_managed_certs else None)
    reconciler = None
    if settings.manage_webhooks:
        ca_file = settings.ca_file

        def ca_bundle() -> str:
            if cert_manager is not None:
                return str(cert_manager.ca_bundle())
            return certs.ca_bundle(ca_file.read_bytes()) if ca_file is not None and ca_file.exists() else ""

        reconciler = WebhookConfigReconciler(
            api_client, WebhookTarget(name=settings.webhook_config_name, url=settings.webhook_url,
                                      service=settings.webhook_service,
                                      namespace=settings.namespace, service_account=settings.service_account),
            policies=lambda: parsed_specs([o for inf in policy_informers for o in inf.indexer.list()] + imported()),
            is_leader=is_leader, synced=synced, ca_bundle=ca_bundle, create_missing=settings.create_webhooks,
            metrics=metrics.webhook_configs)

    def started_leading() -> None:
        # A new leader re-queues every policy's condition and reconciles what it now owns.
        if writer is not None:
            writer.resync()
        if reconciler is not None:
            reconciler.trigger()
        if cert_manager is not None:
            cert_manager.trigger()

    identity = settings.pod_name or os.environ.get("POD_NAME") or socket.gethostname()
    elector = LeaderElector(api_client, LeaderElectionConfig(
        lease_name=LEASE_NAME, lease_namespace=settings.namespace, identity=identity),
        on_started_leading=started_leading)
    return Leadership(elector=elector, status_writer=writer, reconciler=reconciler, cert_manager=cert_manager)
