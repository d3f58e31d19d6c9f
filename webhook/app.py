"""Application wiring: build every component eagerly from Settings, start and stop them with the app.

``create_app(settings, api_client=...)`` constructs, in this order and up front,
the metrics, the policy index, the informers (over kubernetes_asyncio in a
cluster, or YAML files with ``--local``), the policy event handler, the
lookups, the admission handler and server, the certificate reloader, and — in
a cluster with status writing on — the leader elector and the status writer.
``cleanup_ctx`` only starts and stops them (aiohttp's app-factory style), so a
component is stopped if and only if it was started. Nothing on the request
path calls the API server. The caller owns the ApiClient (``cli.py`` opens and
closes it).
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.admission.handler import AdmissionHandler
from webhook.admission.informer_lookups import InformerLookups
from webhook.admission.lifecycle import evaluation_pool_ctx
from webhook.admission.references import ReferenceInformers
from webhook.admission.server import AdmissionServer
from webhook.aio import cancel_and_wait, yield_to_loop
from webhook.config import Settings
from webhook.informer import InformerKey, ListerWatcher, SharedInformer, SharedInformerFactory
from webhook.informer.dynamic import Budget, DynamicInformerFactory
from webhook.informer.gvr import GVR
from webhook.localsource import LocalDirectoryListerWatcher
from webhook.metrics import DecisionMemoCollector, DynamicInformerCollector, Metrics
from webhook.policy import PolicyEventHandler, PolicyIndex
from webhook.policy.memo import DecisionMemo
from webhook.resources import CLUSTER_POLICIES, CONFIGMAPS, NAMESPACED_POLICIES, NAMESPACES, Resource
from webhook.tls import CertReloader


@dataclass(frozen=True, slots=True)
class Components:
    """Everything ``create_app`` built, for the health endpoints, the CLI and tests.

    Attributes:
        settings: what it was built from.
        metrics: the Prometheus registry and metric objects.
        index: compiled policies.
        factory: the informer factory (one informer per key).
        namespaces, configmaps: the Namespace and params-ConfigMap informers.
        policy_informers: the ClusterAdmissionPolicy and AdmissionPolicy informers.
        server: the admission endpoints.
        certs: the serving certificate, when configured.
        elector: the Lease elector, in a cluster when anything is leader-only (status,
            webhook configurations, certificate rotation).
        status_writer: the Ready-condition writer, when status writing is on in a cluster.
        reconciler: keeps the webhook configurations as the policies need
            (``settings.manage_webhooks``), or None.
        cert_manager: rotates self-managed certificates (``settings.self_managed_certs``), or None.
        background: the background audit into PolicyReports (``settings.background_audit``), or None.
        plans_pending: set when the index has fused programs to compile (see :func:`compile_plans`).
        local_sources: with ``--local``, the file ListerWatchers (their ``errors`` go to ``/readyz``).
        references: the informers of the policies' ``spec.references``, or None when
            there is nowhere to list them from (tests that give only ``lister_watcher_for``).
    """

    settings: Settings
    metrics: Metrics
    index: PolicyIndex
    factory: SharedInformerFactory
    namespaces: SharedInformer
    configmaps: SharedInformer
    policy_informers: tuple[SharedInformer, ...]
    server: AdmissionServer
    certs: CertReloader | None
    elector: Any | None
    status_writer: Any | None
    reconciler: Any | None
    cert_manager: Any | None
    background: Any | None
    plans_pending: asyncio.Event
    local_sources: list[LocalDirectoryListerWatcher]
    references: ReferenceInformers | None = None

    def local_file_errors(self) -> dict[str, str]:
        """``--local`` files that stopped parsing or violate their schema: path → one-line error."""
        return {path: msg for source in self.local_sources for path, msg in source.errors.items()}

    def informer(self, resource: Resource) -> SharedInformer:
        """The informer of one of the cached resources."""
        for key, inf in self.factory.informers.items():
            if key.resource == resource.informer_resource:
                return inf
        raise KeyError(resource.informer_resource)


COMPONENTS = web.AppKey("components", Components)
#: The serving certificate (``app[CERTS].context`` is the TLS context to serve with).
CERTS = web.AppKey("certs", CertReloader)

_BY_INFORMER_RESOURCE = {r.informer_resource: r for r in (NAMESPACES, CONFIGMAPS, CLUSTER_POLICIES,
                                                            NAMESPACED_POLICIES)}


def _lister_watcher_factory(settings: Settings, api_client: Any,
                            local_sources: list[LocalDirectoryListerWatcher]) -> Callable[[InformerKey], ListerWatcher]:
    if settings.local_dir is not None:
        root, poll = settings.local_dir, settings.local_poll_interval

        def local(key: InformerKey) -> ListerWatcher:
            r = _BY_INFORMER_RESOURCE[key.resource]
            source = LocalDirectoryListerWatcher(root, kinds={r.kind}, poll_interval=poll,
                                                 default_namespace="default" if r.namespaced else None)
            local_sources.append(source)
            return source

        return local
    if api_client is None:
        raise ValueError("create_app: a cluster needs an api_client (or settings.local_dir)")
    from webhook.kube.listwatch import KubeListerWatcher

    def kube(key: InformerKey) -> ListerWatcher:
        r = _BY_INFORMER_RESOURCE[key.resource]
        return KubeListerWatcher(api_client, group=r.group, version=r.version, plural=r.plural,
                                 namespace=key.namespace)

    return kube


def _gvr_lister_watcher_factory(settings: Settings, api_client: Any, local_sources: list[LocalDirectoryListerWatcher]
                               ) -> Callable[[GVR], ListerWatcher] | None:
    """Where dynamic informers (``spec.references``, background audit) list and watch a GVR; None: nowhere."""
    if settings.local_dir is not None:
        root, poll = settings.local_dir, settings.local_poll_interval

        def local(gvr: GVR) -> ListerWatcher:
            # The directory is the cluster: every document of the resource is in its cache.
            source = LocalDirectoryListerWatcher(root, api_resource=(gvr.api_version, gvr.resource),
                                                 poll_interval=poll)
            local_sources.append(source)
            return source

        return local
    if api_client is None:
        return None
    from webhook.kube.listwatch import KubeListerWatcher

    def kube(gvr: GVR) -> ListerWatcher:
        return KubeListerWatcher(api_client, group=gvr.group, version=gvr.version, plural=gvr.resource)

    return kube


@dataclass(frozen=True, slots=True)
class _LeaderOnly:
    elector: Any
    writer: Any
    reconciler: Any
    cert_manager: Any


def self_managed_certs(settings: Settings, api_client: Any, *, is_leader: Callable[[], bool],
                       metrics: Metrics | None = None) -> Any:
    """The self-managed certificate manager for ``settings`` (see ``webhook.kube.certs.SelfManagedCerts``)."""
    from webhook import certs
    from webhook.kube.certs import RotationPolicy, SelfManagedCerts

    if settings.cert_dir is None:
        raise ValueError("self-managed certificates need a cert_dir")
    names = tuple(certs.service_dns_names(settings.webhook_service, settings.namespace))
    manager = SelfManagedCerts(api_client, namespace=settings.namespace, cert_dir=settings.cert_dir,
                               policy=RotationPolicy(dns_names=names), webhook_name=settings.webhook_config_name,
                               is_leader=is_leader, metrics=metrics.managed_certs if metrics else None)
    return manager


async def bootstrap_certificates(settings: Settings, api_client: Any) -> None:
    """Self-managed mode: write the Secret's certificate into ``cert_dir`` (creating it if empty) before serving.

    Any replica may bootstrap (the first Secret write wins); rotation is the leader's, later.
    """
    await self_managed_certs(settings, api_client, is_leader=lambda: False).ensure()


def _leader_only(settings: Settings, api_client: Any, metrics: Metrics, policy_informers: tuple[SharedInformer, ...],
                 synced: Callable[[], bool]) -> _LeaderOnly:
    """The Lease elector and what only the leader does: status, webhook configurations, certificate rotation."""
    from webhook import certs
    from webhook.kube.leader import LeaderElectionConfig, LeaderElector
    from webhook.kube.status import StatusWriter
    from webhook.kube.webhooks import WebhookConfigReconciler
    from webhook.policy.webhooks import WebhookTarget, parsed_specs

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
            api_client, WebhookTarget(name=settings.webhook_config_name, service=settings.webhook_service,
                                      namespace=settings.namespace, service_account=settings.service_account),
            policies=lambda: parsed_specs([o for inf in policy_informers for o in inf.indexer.list()]),
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
        lease_name="tollgate-status-writer", lease_namespace=settings.namespace, identity=identity),
        on_started_leading=started_leading)
    return _LeaderOnly(elector, writer, reconciler, cert_manager)


def build_components(settings: Settings, *, api_client: Any = None,
                     lister_watcher_for: Callable[[InformerKey], ListerWatcher] | None = None) -> Components:
    """Construct every component; nothing is started.

    Args:
        settings: see :class:`~webhook.config.Settings`.
        api_client: a kubernetes_asyncio ApiClient (cluster mode; not closed here).
        lister_watcher_for: where informers list and watch (tests); default: YAML
            files when ``settings.local_dir`` is set, else ``api_client``.

    Raises:
        ValueError: cluster mode without an ``api_client``.
    """
    metrics = Metrics()
    plans_pending = asyncio.Event()
    index = PolicyIndex(on_pending=plans_pending.set)
    certs = None
    reloaded: list[Callable[[], object]] = []  # told of every new certificate pair that loaded

    def on_reload(result: str) -> None:
        metrics.cert_reloads.labels(result).inc()
        if result == "success":
            for listener in reloaded:
                listener()

    if settings.cert_file is not None and settings.key_file is not None:
        certs = CertReloader(settings.cert_file, settings.key_file, client_ca=settings.client_ca, on_reload=on_reload)
    local_sources: list[LocalDirectoryListerWatcher] = []
    factory = SharedInformerFactory(lister_watcher_for or _lister_watcher_factory(settings, api_client, local_sources))
    namespaces = factory.informer(InformerKey(NAMESPACES.informer_resource))
    configmaps = factory.informer(InformerKey(CONFIGMAPS.informer_resource,
                                              label_selector=settings.params_selector or None))
    policy_informers = (factory.informer(InformerKey(CLUSTER_POLICIES.informer_resource)),
                        factory.informer(InformerKey(NAMESPACED_POLICIES.informer_resource)))
    registrations: list[Any] = []

    synced: list[bool] = []

    def policies_synced() -> bool:
        # Asked 2-3 times per review. HasSynced is sticky (client-go): once true it stays true, so remember it.
        if not synced and all(inf.has_synced() for inf in policy_informers) and all(
                r.has_synced() for r in registrations):
            synced.append(True)
        return bool(synced)

    leader = None
    if api_client is not None and settings.local_dir is None and (
            settings.write_status or settings.manage_webhooks or settings.self_managed_certs
            or settings.background_audit):
        leader = _leader_only(settings, api_client, metrics, policy_informers, policies_synced)
    writer = leader.writer if leader else None
    reconciler = leader.reconciler if leader else None
    if reconciler is not None:
        reloaded.append(reconciler.trigger)  # a new ca.crt reaches caBundle at once
    events = PolicyEventHandler(index, writer.enqueue if writer is not None else None,
                                forget=writer.forget if writer is not None else None,
                                on_change=reconciler.trigger if reconciler is not None else None)
    registrations.extend(inf.add_event_handler(events) for inf in policy_informers)

    # One factory of dynamic informers (one budget, one LIST/WATCH per GVR) for spec.references and the
    # background audit.
    gvr_lister_watcher = _gvr_lister_watcher_factory(settings, api_client, local_sources)
    dynamic = references = None
    if gvr_lister_watcher is not None:
        dynamic = DynamicInformerFactory(gvr_lister_watcher, budget=Budget(max_objects=settings.audit_max_objects,
                                                                           max_bytes=settings.audit_max_bytes))
        references = ReferenceInformers(dynamic)
        for inf in policy_informers:
            inf.add_event_handler(references.handler())
    lookups = InformerLookups(namespaces, configmaps, policies_synced,
                              references.informer if references is not None else lambda _ref: None)
    memo = DecisionMemo(settings.decision_memo_bytes) if settings.decision_memo_bytes > 0 else None
    if memo is not None:
        metrics.registry.register(DecisionMemoCollector(memo))
    handler = AdmissionHandler(index, lookups, memo)
    background = None
    if leader is not None and settings.background_audit:
        from webhook.background import BackgroundAudit

        # Existing objects of the kinds background policies select, evaluated by the same engine;
        # reports written by the leader only.
        background = BackgroundAudit(api_client, lookups, leader.elector.is_leader, factory=dynamic,
                                     discovery_interval=settings.discovery_interval)
        for inf in policy_informers:
            inf.add_event_handler(background.policy_handler())
        namespaces.add_event_handler(background.context_handler("namespaces"))
        configmaps.add_event_handler(background.context_handler("configmaps"))
        metrics.registry.register(background.collector())
    elif dynamic is not None:
        metrics.registry.register(DynamicInformerCollector(
            lambda: {str(g): (u.objects, u.bytes) for g, u in dynamic.usage().items()},
            lambda: {str(g): r for g, r in dynamic.refused.items()}))
    # Until the policy caches sync, reviews get 503: the API server applies the webhook's own failurePolicy.
    server = AdmissionServer(handler, metrics, max_request_bytes=settings.max_request_bytes,
                             default_timeout=settings.default_timeout, ready=policies_synced)
    return Components(settings, metrics, index, factory, namespaces, configmaps, policy_informers, server, certs,
                      leader.elector if leader else None, writer, reconciler,
                      leader.cert_manager if leader else None, background, plans_pending, local_sources, references)


async def compile_plans(c: Components) -> None:
    """Compile the index's queued fused programs off the request path, one chunk per loop turn.

    Runs for the app's lifetime; each chunk takes a few milliseconds, and the
    loop serves requests between chunks (they take the per-policy path until
    their plan is compiled).
    """
    while True:
        await c.plans_pending.wait()
        c.plans_pending.clear()
        while c.index.compile_pending():
            await yield_to_loop()


async def freeze_heap_when_synced(c: Components, *, settle: float = 1.0) -> None:
    """Once the policy caches have synced, move every object alive into the GC's permanent generation.

    Everything built at start (modules, compiled policies, cached objects) then stays out of the
    collector's full passes, which otherwise walk all of it: under load, a full collection triggered
    by a burst of policy edits held the event loop 28-44 ms (bench/stall.py). Objects freed by
    reference counting are still freed; only cycles among the frozen objects would stay (``gc.freeze``,
    the technique CPython documents for long-running servers).

    Args:
        c: the components (their ``server.ready`` says when the policies have synced).
        settle: seconds to wait after the sync, so the first plans are compiled too.
    """
    ready = c.server.ready
    while ready is not None and not ready():
        await asyncio.sleep(0.1)
    await asyncio.sleep(settle)
    gc.collect()
    gc.freeze()


def _refresh_gauges(c: Components) -> None:
    metrics = c.metrics
    for key, inf in c.factory.informers.items():
        r = key.resource
        metrics.informer_synced.labels(r).set(1 if inf.has_synced() else 0)
        rv = inf.last_sync_resource_version
        if rv.isdigit():
            metrics.informer_rv.labels(r).set(int(rv))
        metrics.informer_events.labels(r).set(inf.events_applied)
        metrics.informer_objects.labels(r).set(len(inf.indexer))
        age = inf.cache_age()
        if age is not None:
            metrics.cache_age.labels(r).set(age)
        stale = inf.staleness()
        if stale is not None:
            metrics.informer_staleness.labels(r).set(stale)
        for handler, depth in inf.handler_queue_depths().items():
            metrics.handler_queue_depth.labels(r, handler).set(depth)
    states = c.index.states()
    ready = sum(1 for s in states if s.ready)
    unmatchable = len(c.index.unmatchable())
    metrics.policies_ready.labels("true").set(ready)
    metrics.policies_ready.labels("false").set(len(states) - ready)
    metrics.policies_unmatchable.set(unmatchable)
    if c.local_sources:
        metrics.local_file_errors.set(len(c.local_file_errors()))
    if c.certs is not None:
        metrics.cert_expiry.set(c.certs.expiry)
        metrics.cert_expiry_seconds.set(c.certs.expiry - time.time())


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: the process serves HTTP (liveness)."""
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: 200 only when every informer synced and a certificate is loaded; JSON detail.

    ``policies`` maps each policy key to ``{"ready", "reason"}``;
    ``unmatchablePolicies`` lists policies whose match rules are unreadable (they select nothing);
    ``references`` maps each cache of a policy's ``spec.references`` to ``synced``, ``syncing``,
    ``refused: <reason>`` or ``not running`` (reported, not required: ``onUnsynced`` answers for it);
    with ``--local``, ``localFileErrors`` maps each file that stopped parsing to its error.
    """
    c = request.app[COMPONENTS]
    caches = {}
    for key, inf in c.factory.informers.items():
        age = inf.cache_age()
        caches[key.resource] = {"synced": inf.has_synced(), "resourceVersion": inf.last_sync_resource_version,
                                "objects": len(inf.indexer), "ageSeconds": None if age is None else round(age, 3)}
    policies = {s.key: {"ready": s.ready, "reason": s.result.condition["reason"]} for s in c.index.states()}
    ready = (all(cache["synced"] for cache in caches.values()) and c.certs is not None
             and not c.server.shutting_down)
    body: dict[str, Any] = {
        "ready": ready, "certificateLoaded": c.certs is not None, "shuttingDown": c.server.shutting_down,
        "caches": caches, "policies": policies, "unmatchablePolicies": c.index.unmatchable()}
    if c.certs is not None:
        body["certificate"] = c.certs.certificate_status()  # expiringSoon within 7 days: reported, not fatal
    if c.references is not None and c.references.wanted():
        # Not part of readiness: a policy whose reference cache has not synced answers per its onUnsynced.
        body["references"] = c.references.status()
    if c.local_sources:
        # A file that stopped parsing keeps its last good objects (as an API server refuses a bad write).
        body["localFileErrors"] = c.local_file_errors()
    return web.json_response(body, status=200 if ready else 503)


async def metrics_view(request: web.Request) -> web.Response:
    """``GET /metrics`` in the Prometheus text format."""
    c = request.app[COMPONENTS]
    _refresh_gauges(c)
    return web.Response(body=generate_latest(c.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_app(settings: Settings, *, api_client: Any = None,
               lister_watcher_for: Callable[[InformerKey], ListerWatcher] | None = None) -> web.Application:
    """Build the webhook application (see :func:`build_components` for the arguments).

    Returns:
        The aiohttp application; ``app[COMPONENTS]`` holds what was built and
        ``app[CERTS].context`` the TLS context to serve with (when a
        certificate is configured).
    """
    c = build_components(settings, api_client=api_client, lister_watcher_for=lister_watcher_for)
    app = web.Application(client_max_size=settings.max_request_bytes + 1)
    app[COMPONENTS] = c
    if c.certs is not None:
        app[CERTS] = c.certs

    async def informers_ctx(app: web.Application) -> AsyncIterator[None]:
        # Start order: what the leader runs, then the elector, then the informers; stop in reverse.
        started = [x for x in (c.status_writer, c.reconciler, c.cert_manager, c.elector) if x is not None]
        for component in started:
            await component.start()
        await c.factory.start()
        if c.background is not None:
            await c.background.start()
        try:
            yield
        finally:
            if c.background is not None:
                await c.background.stop()
            await c.factory.stop()
            if c.references is not None:
                await c.references.stop()  # after the policy informers: no handler call comes any more
            for component in reversed(started):
                await component.stop()

    async def certs_ctx(app: web.Application) -> AsyncIterator[None]:
        if c.certs is None:
            yield
            return
        task = asyncio.get_running_loop().create_task(c.certs.watch(settings.cert_poll_interval))
        try:
            yield
        finally:
            await cancel_and_wait(task)

    async def plans_ctx(app: web.Application) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(compile_plans(c)), loop.create_task(freeze_heap_when_synced(c))]
        try:
            yield
        finally:
            for task in tasks:
                await cancel_and_wait(task)

    app.cleanup_ctx.append(informers_ctx)
    app.cleanup_ctx.append(certs_ctx)
    app.cleanup_ctx.append(plans_ctx)
    if settings.eval_workers > 0:
        app.cleanup_ctx.append(evaluation_pool_ctx(c.server, c.metrics, workers=settings.eval_workers,
                                                   memory_limit_bytes=settings.eval_memory_limit_bytes,
                                                   isolate_above_bytes=settings.isolate_above_bytes))
    app.on_response_prepare.append(c.server.on_response_prepare)  # Connection: close once shutting down
    app.add_routes(c.server.routes())
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics_view)])
    return app

