"""What ``create_app`` builds: the :class:`Components` record and the app keys that hold it.

A separate module so the wiring (:mod:`webhook.server.app`) and the probes
(:mod:`webhook.server.health`) both read it without importing each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from webhook.admission.events import EventRecorder
from webhook.admission.server import AdmissionServer
from webhook.caches.references import ReferenceInformers
from webhook.files.local_source import LocalDirectoryListerWatcher
from webhook.informer import SharedInformer, SharedInformerFactory
from webhook.metrics import Metrics
from webhook.policy import PolicyIndex
from webhook.policy.exceptions import ExceptionCache
from webhook.policy.resources import Resource
from webhook.server.settings import Settings
from webhook.tls.reload import CertReloader

if TYPE_CHECKING:  # imported where built, so --local never loads the API client
    from webhook.kube.leader import LeaderElector
    from webhook.kube.managed_certs import SelfManagedCerts
    from webhook.kube.status import StatusWriter
    from webhook.kube.webhook_reconciler import WebhookConfigReconciler
    from webhook.server.audit_stack import BackgroundAudit
    from webhook.server.imports import ImportSources


@dataclass(frozen=True, slots=True, kw_only=True)
class Components:
    """Everything ``create_app`` built, for the probes, the CLI and tests.

    Attributes:
        settings: what it was built from.
        metrics: the Prometheus registry and metric objects.
        index: compiled policies.
        factory: the informer factory (one informer per key).
        namespaces, configmaps: the Namespace and params-ConfigMap informers.
        policy_informers: the ClusterAdmissionPolicy and AdmissionPolicy informers.
        policies_synced: true once both policy informers have synced and their handlers have
            delivered the initial list into ``index`` (the same gate reviews pass).
        server: the admission endpoints.
        certs: the serving certificate, when configured.
        plans_pending: set when the index has fused programs to compile (see
            :func:`webhook.server.tasks.compile_plans`).
        local_sources: with ``--local``, the file ListerWatchers (their ``errors`` go to ``/readyz``).
        elector: the Lease elector, in a cluster when anything is leader-only (status,
            webhook configurations, certificate rotation, background audit).
        status_writer: the Ready-condition writer, when status writing is on in a cluster.
        reconciler: keeps the webhook configurations as the policies need
            (``settings.manage_webhooks``), or None.
        cert_manager: rotates self-managed certificates (``settings.self_managed_certs``), or None.
        background: the background audit into PolicyReports (``settings.background_audit``), or None.
        api_server: in a cluster, the API server's ``version`` and, when it is older than Tollgate supports,
            ``unsupported`` (one line: what is lost); filled at start (see :mod:`webhook.kube.version`).
        references: the informers of the policies' ``spec.references``, or None when
            there is nowhere to list them from (tests that give only ``lister_watcher_for``).
        imports: the informers of the imported kinds (Kubernetes' admission policies, Kyverno's CEL
            policies; :mod:`webhook.server.imports`), or None (tests that give only ``lister_watcher_for``).
        exceptions: the PolicyExceptions and ClusterPolicyExceptions, compiled on their informers' events
            (:class:`~webhook.policy.exceptions.ExceptionCache`).
        events: the Kubernetes Events of denials and warnings (``settings.events``; log lines with
            ``--local``), or None.
    """

    settings: Settings
    metrics: Metrics
    index: PolicyIndex
    factory: SharedInformerFactory
    namespaces: SharedInformer
    configmaps: SharedInformer
    policy_informers: tuple[SharedInformer, ...]
    policies_synced: Callable[[], bool]
    server: AdmissionServer
    certs: CertReloader | None
    plans_pending: asyncio.Event
    local_sources: list[LocalDirectoryListerWatcher]
    elector: LeaderElector | None = None
    status_writer: StatusWriter | None = None
    reconciler: WebhookConfigReconciler | None = None
    cert_manager: SelfManagedCerts | None = None
    background: BackgroundAudit | None = None
    references: ReferenceInformers | None = None
    imports: ImportSources | None = None
    events: EventRecorder | None = None
    api_server: dict[str, Any] = field(default_factory=dict)
    exceptions: ExceptionCache = field(default_factory=ExceptionCache)

    def local_file_errors(self) -> dict[str, str]:
        """``--local`` files that stopped parsing or violate their schema: path → one-line error."""
        return {path: msg for source in self.local_sources for path, msg in source.errors.items()}

    def informer(self, resource: Resource) -> SharedInformer:
        """The informer of one of the cached resources.

        Raises:
            KeyError: ``resource`` is not cached.
        """
        for key, inf in self.factory.informers.items():
            if key.resource == resource.informer_resource:
                return inf
        raise KeyError(resource.informer_resource)


COMPONENTS = web.AppKey("components", Components)
#: The serving certificate (``app[CERTS].context`` is the TLS context to serve with).
CERTS = web.AppKey("certs", CertReloader)
