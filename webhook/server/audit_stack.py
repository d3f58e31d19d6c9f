"""Builds and runs the background-audit stack over one kubernetes_asyncio ApiClient.

What ``webhook.server.app`` needs to add background audit, in one object:
``DynamicInformerFactory`` (one informer per GVR, ``KubeListerWatcher``) →
``DynamicInformers`` (discovery through ``webhook.kube.discovery``, refreshed
on a timer and on CustomResourceDefinition events) → ``Auditor`` →
``PolicyReportWriter`` (leader only). The app registers
:meth:`BackgroundAudit.policy_handler` on its policy informers and
:meth:`BackgroundAudit.context_handler` on its Namespace and params
ConfigMap informers, registers :meth:`BackgroundAudit.collector` on its
Prometheus registry, and calls :meth:`start` / :meth:`stop`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.audit.auditor import Auditor
from webhook.informer import ReflectorOptions, ResourceEventHandlerFuncs
from webhook.informer.discovered import DynamicInformers, crd_informer
from webhook.informer.dynamic import Budget, DynamicInformerFactory
from webhook.informer.gvr import GVR
from webhook.kube.discovery import Discovery
from webhook.kube.listwatch import KubeListerWatcher
from webhook.kube.reports import PolicyReportWriter
from webhook.metrics import DynamicInformerCollector
from webhook.policy.exceptions import ExceptionSet
from webhook.policy.lookups import Lookups


class BackgroundAudit:
    """The dynamic informers, the auditor and the report writer, wired together.

    Args:
        api_client: a configured kubernetes_asyncio ApiClient (not closed here).
        lookups: the caches policies read (the app's ``InformerLookups``).
        is_leader: whether this replica may write reports (e.g. the leader elector's ``is_leader``).
        budget: limits over every dynamic informer together (objects and/or JSON bytes).
        discovery_interval: seconds between discovery refreshes besides CRD events.
        reflector_options: options for every dynamic informer.
        report_writes_per_second: the report writer's rate limit.
        factory: a dynamic informer factory to share (the app's, also serving ``spec.references``);
            by default one of its own over ``api_client`` with ``budget``.
        exceptions: returns the Ready PolicyExceptions now (see :class:`~webhook.audit.auditor.Auditor`).
    """

    def __init__(self, api_client: Any, lookups: Lookups, is_leader: Callable[[], bool], *,
                 budget: Budget | None = None, discovery_interval: float = 300.0,
                 reflector_options: ReflectorOptions | None = None,
                 report_writes_per_second: float = 10.0, factory: DynamicInformerFactory | None = None,
                 exceptions: Callable[[], ExceptionSet] | None = None) -> None:
        def lister_watcher(gvr: GVR) -> KubeListerWatcher:
            return KubeListerWatcher(api_client, group=gvr.group, version=gvr.version, plural=gvr.resource)

        self.factory = factory or DynamicInformerFactory(lister_watcher, reflector_options=reflector_options,
                                                         budget=budget)
        self.dynamic = DynamicInformers(self.factory, Discovery(api_client).snapshot,
                                        refresh_interval=discovery_interval,
                                        crd_informer=crd_informer(lister_watcher, reflector_options))
        self.writer = PolicyReportWriter(api_client, is_leader=is_leader,
                                         writes_per_second=report_writes_per_second)
        self.auditor = Auditor(self.dynamic, lookups, self.writer.submit, exceptions=exceptions)

    def policy_handler(self) -> ResourceEventHandlerFuncs:
        """Register on the ClusterAdmissionPolicy and AdmissionPolicy informers."""
        return self.auditor.policy_handler()

    def context_handler(self, cache: str) -> ResourceEventHandlerFuncs:
        """Register on the Namespace (``"namespaces"``) and params ConfigMap (``"configmaps"``) informers."""
        return self.auditor.context_handler(cache)

    def collector(self) -> DynamicInformerCollector:
        """Scrape-time metrics: per-GVR objects and bytes, refusals, evaluations and report writes."""
        return DynamicInformerCollector(
            lambda: {str(g): (u.objects, u.bytes) for g, u in self.factory.usage().items()},
            lambda: {str(g): r for g, r in self.factory.refused.items()},
            lambda: {"audit_evaluations": self.auditor.evaluations, "policy_report_writes": self.writer.writes,
                     "policy_report_write_errors": self.writer.errors})

    async def start(self) -> None:
        """Start discovery and dynamic informers, the auditor and the writer (returns at once)."""
        await self.dynamic.start()
        await self.auditor.start()
        await self.writer.start()

    async def stop(self) -> None:
        """Stop everything started by :meth:`start`, writer first."""
        await self.writer.stop()
        await self.auditor.stop()
        await self.dynamic.stop()
