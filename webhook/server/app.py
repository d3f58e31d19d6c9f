"""Application wiring: build every component eagerly from Settings, start and stop them with the app.

``create_app(settings, api_client=...)`` constructs, in this order and up front,
the metrics, the policy index, the informers (over kubernetes_asyncio in a
cluster, or YAML files with ``--local``: :mod:`webhook.server.sources`), the
policy event handler, the imported kinds' informers (:mod:`webhook.server.imports`),
the lookups, the admission handler and server, the certificate reloader, and —
in a cluster, when anything is leader-only — the elector and what the leader runs (:mod:`webhook.server.leadership`).
``cleanup_ctx`` only starts and stops them (aiohttp's app-factory style), so a
component is stopped if and only if it was started. The probes and
``/metrics`` are :mod:`webhook.server.health`; the long-running tasks
:mod:`webhook.server.tasks`. Nothing on the request path calls the API server.
The caller owns the ApiClient (``cli`` opens and closes it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from webhook.admission.events import EventCorrelator, EventRecorder, EventSink, LogEventSink
from webhook.admission.explain import ExplainEndpoint
from webhook.admission.handler import AdmissionHandler
from webhook.admission.lifecycle import evaluation_pool_ctx
from webhook.admission.server import AdmissionServer
from webhook.aio import cancel_and_wait
from webhook.caches.lookups import InformerLookups
from webhook.caches.references import ReferenceInformers
from webhook.files.local_source import LocalDirectoryListerWatcher
from webhook.formats.events import ImportEventHandler
from webhook.formats.kinds import IMPORT_SOURCES
from webhook.formats.kyverno.exceptions import compile_any_exception, is_kyverno_exception
from webhook.informer import (
    InformerKey,
    ListerWatcher,
    ResourceEventHandlerFuncs,
    SharedInformer,
    SharedInformerFactory,
)
from webhook.informer.dynamic import Budget, DynamicInformerFactory
from webhook.informer.handlers import HandlerRegistration
from webhook.metrics import DecisionMemoCollector, DynamicInformerCollector, Metrics
from webhook.policy import PolicyEventHandler, PolicyIndex
from webhook.policy.exceptions import ExceptionCache
from webhook.policy.memo import DecisionMemo
from webhook.policy.resources import (
    CLUSTER_POLICIES,
    CLUSTER_POLICY_EXCEPTIONS,
    CONFIGMAPS,
    NAMESPACED_POLICIES,
    NAMESPACES,
    POLICY_EXCEPTIONS,
)
from webhook.server import health
from webhook.server.components import CERTS, COMPONENTS, Components
from webhook.server.constraints import ConstraintInformers, local_discovery_with_constraints
from webhook.server.imports import ImportSources, QueuedHandler, cluster_discovery, cluster_probe
from webhook.server.leadership import bootstrap_certificates, leadership, needs_leader
from webhook.server.policy_events import CompileOffLoop
from webhook.server.settings import Settings
from webhook.server.sources import gvr_lister_watcher_factory, lister_watcher_factory
from webhook.server.tasks import compile_plans, freeze_heap_when_synced, mark_expired_exceptions, measure_loop_lag
from webhook.tls.reload import CertReloader

__all__ = ["CERTS", "COMPONENTS", "Components", "bootstrap_certificates", "build_components", "create_app"]

log = logging.getLogger("tollgate")


class PoliciesSynced:
    """Whether the policy caches can answer reviews: both policy informers synced and their handlers caught up.

    Asked several times per review. HasSynced is sticky (client-go): once true it stays true, so it is
    remembered.

    Args:
        informers: the policy informers.
        also: more conditions (the imported kinds' informers, :meth:`ImportSources.synced`).
    """

    def __init__(self, informers: tuple[SharedInformer, ...], also: tuple[Callable[[], bool], ...] = ()) -> None:
        self._informers = informers
        self.registrations: list[HandlerRegistration] = []
        self.also = list(also)
        self._synced = False

    def __call__(self) -> bool:
        if not self._synced:
            self._synced = (all(inf.has_synced() for inf in self._informers)
                            and all(r.has_synced() for r in self.registrations) and all(c() for c in self.also))
        return self._synced


def build_components(settings: Settings, *, api_client: Any = None,
                     lister_watcher_for: Callable[[InformerKey], ListerWatcher] | None = None) -> Components:
    """Construct every component; nothing is started.

    Args:
        settings: see :class:`~webhook.server.settings.Settings`.
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
    factory = SharedInformerFactory(lister_watcher_for or lister_watcher_factory(settings, api_client, local_sources))
    namespaces = factory.informer(InformerKey(NAMESPACES.informer_resource))
    configmaps = factory.informer(InformerKey(CONFIGMAPS.informer_resource,
                                              label_selector=settings.params_selector or None))
    policy_informers = (factory.informer(InformerKey(CLUSTER_POLICIES.informer_resource)),
                        factory.informer(InformerKey(NAMESPACED_POLICIES.informer_resource)))
    policies_synced = PoliciesSynced(policy_informers)

    # Kubernetes' and Kyverno's policies (webhook.server.imports): read from the same place as the others.
    imports = ImportEventHandler()
    import_sources = None
    local = settings.local_dir is not None
    if lister_watcher_for is None and (local or (api_client is not None and settings.imports)):
        groups = frozenset(IMPORT_SOURCES[name] for name in settings.imports)
        import_sources = ImportSources(
            factory, imports, discover=local_discovery_with_constraints(lambda: local_sources[0].directory,
                                                                        settings.local_poll_interval / 2)
            if local else cluster_discovery(api_client, groups),
            probe=None if local else cluster_probe(lister_watcher_factory(settings, api_client, [])),
            interval=0.0 if local else settings.discovery_interval, wanted_groups=frozenset() if local else groups,
            serving=policies_synced)
        policies_synced.also.append(import_sources.synced)

    leader = (leadership(settings, api_client, metrics, policy_informers, policies_synced, imported=imports.objects)
              if api_client is not None and needs_leader(settings) else None)
    writer = leader.status_writer if leader else None
    reconciler = leader.reconciler if leader else None
    if reconciler is not None:
        reloaded.append(reconciler.trigger)  # a new ca.crt reaches caBundle at once
    events = PolicyEventHandler(index, writer.enqueue if writer is not None else None,
                                forget=writer.forget if writer is not None else None,
                                on_change=reconciler.trigger if reconciler is not None else None)
    policies_synced.registrations.extend(inf.add_event_handler(CompileOffLoop(events), name="policy-index")
                                         for inf in policy_informers)
    # Imported policies: no status is written (their sources belong to the API server or to Kyverno).
    # Compiled off the event loop, as Tollgate's own (webhook.server.policy_events).
    imports.add_handler(CompileOffLoop(PolicyEventHandler(
        index, on_change=reconciler.trigger if reconciler is not None else None), serving=policies_synced))

    # One factory of dynamic informers (one budget, one LIST/WATCH per GVR) for spec.references and the
    # background audit.
    gvr_lister_watcher = gvr_lister_watcher_factory(settings, api_client, local_sources)
    queued: list[QueuedHandler] = []  # the async handlers of imported policies, fed through their own queues
    dynamic = references = None
    if gvr_lister_watcher is not None:
        dynamic = DynamicInformerFactory(gvr_lister_watcher, budget=Budget(max_objects=settings.audit_max_objects,
                                                                           max_bytes=settings.audit_max_bytes))
        references = ReferenceInformers(dynamic)
        if import_sources is not None:  # Gatekeeper's constraint kinds: dynamic informers (serve --import gatekeeper)
            import_sources.constraints = ConstraintInformers(dynamic, imports, import_sources.delivery)
        for inf in policy_informers:
            inf.add_event_handler(references.handler(), name="references")
        queued.append(QueuedHandler(references.handler(), "imported-references"))
    # PolicyExceptions: compiled on their watch events into the set the request path reads (one attribute).
    # Kyverno's CEL PolicyExceptions too (serve --import kyverno; --local reads both groups' PolicyException
    # documents through Tollgate's source): same semantics, no status written to Kyverno's objects.
    exceptions = ExceptionCache(
        policy_exists=lambda label: index.state(label) is not None or any(
            inf.indexer.get_by_key(label) is not None for inf in policy_informers),
        status_sink=_tollgate_only(writer.enqueue) if writer is not None else None, compile=compile_any_exception)
    if import_sources is not None and not local:
        import_sources.exceptions = exceptions
    if writer is not None:  # a policy came or went: an exception naming it may turn (not) UnknownPolicy
        for inf in policy_informers:
            inf.add_event_handler(ResourceEventHandlerFuncs(
                add=lambda _obj, _initial: exceptions.report_all(),
                delete=lambda _obj: exceptions.report_all(), sync_calls="loop"), name="exception-status")
    for resource in (POLICY_EXCEPTIONS, CLUSTER_POLICY_EXCEPTIONS):
        factory.informer(InformerKey(resource.informer_resource)).add_event_handler(exceptions, name="exceptions")
    lookups = InformerLookups(namespaces, configmaps, policies_synced,
                              references.informer if references is not None else lambda _ref: None)
    memo = DecisionMemo(settings.decision_memo_bytes) if settings.decision_memo_bytes > 0 else None
    if memo is not None:
        metrics.registry.register(DecisionMemoCollector(memo))
    handler = AdmissionHandler(index, lookups, memo, exceptions=lambda: exceptions.current)
    background = None
    if leader is not None and settings.background_audit:
        from webhook.server.audit_stack import BackgroundAudit

        # Existing objects of the kinds background policies select, evaluated by the same engine;
        # reports written by the leader only.
        background = BackgroundAudit(api_client, lookups, leader.elector.is_leader, factory=dynamic,
                                     discovery_interval=settings.discovery_interval,
                                     exceptions=lambda: exceptions.current)
        exceptions.listeners.append(background.auditor.exceptions_changed)
        for inf in policy_informers:
            inf.add_event_handler(background.policy_handler(), name="background-audit")
        queued.append(QueuedHandler(background.policy_handler(), "imported-audit"))
        namespaces.add_event_handler(background.context_handler("namespaces"), name="background-audit")
        configmaps.add_event_handler(background.context_handler("configmaps"), name="background-audit")
        metrics.registry.register(background.collector())
    elif dynamic is not None:
        usage, refused = dynamic.usage, dynamic.refused
        metrics.registry.register(DynamicInformerCollector(
            lambda: {str(g): (u.objects, u.bytes) for g, u in usage().items()},
            lambda: {str(g): r for g, r in refused.items()}))
    for q in queued:
        imports.add_handler(q)
        if import_sources is not None:
            import_sources.queued.append(q)
    # Until the policy caches sync, reviews get 503: the API server applies the webhook's own failurePolicy.
    server = AdmissionServer(handler, metrics, max_request_bytes=settings.max_request_bytes,
                             default_timeout=settings.default_timeout, ready=policies_synced,
                             events=event_recorder(settings, api_client, metrics))
    return Components(
        settings=settings, metrics=metrics, index=index, factory=factory, namespaces=namespaces,
        configmaps=configmaps, policy_informers=policy_informers, policies_synced=policies_synced, server=server,
        certs=certs, plans_pending=plans_pending, local_sources=local_sources,
        elector=leader.elector if leader else None, status_writer=writer, reconciler=reconciler,
        cert_manager=leader.cert_manager if leader else None, background=background, references=references,
        imports=import_sources, exceptions=exceptions, events=server.events)


def _tollgate_only(sink: Callable[[dict[str, Any], dict[str, Any]], object]
                   ) -> Callable[[dict[str, Any], dict[str, Any]], object]:
    """``sink`` for Tollgate's exceptions only: Kyverno's objects are Kyverno's (their status is never written)."""
    return lambda obj, condition: None if is_kyverno_exception(obj) else sink(obj, condition)


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
    if api_client is not None:
        app.cleanup_ctx.append(api_server_version_ctx(c, api_client))
    app.cleanup_ctx.append(_informers_ctx(c))
    app.cleanup_ctx.append(_certs_ctx(c))
    app.cleanup_ctx.append(_tasks_ctx(c))
    if c.events is not None:
        app.cleanup_ctx.append(_events_ctx(c.events))
    if settings.eval_workers > 0:
        app.cleanup_ctx.append(evaluation_pool_ctx(c.server, c.metrics, workers=settings.eval_workers,
                                                   memory_limit_bytes=settings.eval_memory_limit_bytes,
                                                   isolate_above_bytes=settings.isolate_above_bytes,
                                                   inline_work_budget=settings.inline_work_budget or None))
    app.on_response_prepare.append(c.server.on_response_prepare)  # Connection: close once shutting down
    app.add_routes(c.server.routes())
    if settings.explain:  # POST /explain, guarded as reviews are (webhook.admission.explain)
        app.add_routes(ExplainEndpoint(c.server.handler, c.metrics, work_budget=settings.inline_work_budget,
                                       max_body_bytes=min(settings.max_request_bytes, 1024 * 1024)).routes())
    app.add_routes(health.routes())
    return app


def event_recorder(settings: Settings, api_client: Any, metrics: Metrics) -> EventRecorder | None:
    """The Events of denials and warnings: written to the API server, logged with ``--local``, or None.

    None when ``settings.events`` is off or there is nowhere to write (tests without an API client).
    """
    if not settings.events:
        return None
    sink: EventSink
    if settings.local_dir is not None:
        sink = LogEventSink()
    elif api_client is not None:
        from webhook.kube.events import ApiEventSink

        sink = ApiEventSink(api_client)
    else:
        return None
    outcomes = {o: metrics.events.labels(o) for o in ("created", "patched", "throttled", "dropped", "failed")}
    return EventRecorder(sink, EventCorrelator(instance=settings.pod_name),
                         on_outcome=lambda outcome: outcomes[outcome].inc())


def _events_ctx(recorder: EventRecorder) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(recorder.run())
        try:
            yield
        finally:
            await cancel_and_wait(task)

    return ctx


def api_server_version_ctx(c: Components, api_client: Any) -> Callable[[web.Application], AsyncIterator[None]]:
    """Read the API server's version once at start; say so (error level) when it is older than supported."""
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        from webhook.kube.api import describe
        from webhook.kube.version import server_version, unsupported

        try:
            version = await server_version(api_client)
        except Exception as exc:  # noqa: BLE001 - the version is advice; serving goes on without it
            log.warning("could not read the API server version: %s", describe(exc))
        else:
            c.api_server["version"] = version.git_version
            problem = unsupported(version)
            if problem is not None:
                c.api_server["unsupported"] = problem
                log.error(problem)
            else:
                log.info("API server version %s", version.git_version)
        yield

    return ctx


def _informers_ctx(c: Components) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        # Start order: what the leader runs, then the elector, then the informers; stop in reverse.
        started = [x for x in (c.status_writer, c.reconciler, c.cert_manager, c.elector) if x is not None]
        for component in started:
            await component.start()
        await c.factory.start()
        if c.imports is not None:
            await c.imports.start()  # after the factory's start: it adds informers as discovery finds the kinds
        if c.background is not None:
            await c.background.start()
        try:
            yield
        finally:
            if c.background is not None:
                await c.background.stop()
            if c.imports is not None:
                await c.imports.stop()
            await c.factory.stop()
            if c.references is not None:
                await c.references.stop()  # after the policy informers: no handler call comes any more
            for component in reversed(started):
                await component.stop()

    return ctx


def _certs_ctx(c: Components) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        if c.certs is None:
            yield
            return
        task = asyncio.get_running_loop().create_task(c.certs.watch(c.settings.cert_poll_interval))
        try:
            yield
        finally:
            await cancel_and_wait(task)

    return ctx


def _tasks_ctx(c: Components) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(compile_plans(c)), loop.create_task(freeze_heap_when_synced(c)),
                 loop.create_task(mark_expired_exceptions(c)),
                 loop.create_task(measure_loop_lag(c.metrics.loop_lag))]
        try:
            yield
        finally:
            for task in tasks:
                await cancel_and_wait(task)

    return ctx
