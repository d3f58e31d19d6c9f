"""Application wiring: informers → policy index → admission handlers, TLS and health.

``create_app(settings)`` returns an aiohttp ``Application``; every background
task (informers, certificate polling, status writer, leader election) starts
and stops in a ``cleanup_ctx`` generator, so it is cleaned up if and only if
it was started. Informers come from a SharedInformerFactory over either
kubernetes_asyncio (a cluster) or YAML files (``--local``); nothing on the
request path calls the API server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.admission.handler import AdmissionHandler
from webhook.admission.lookups import InformerLookups
from webhook.admission.server import AdmissionServer
from webhook.config import Settings
from webhook.informer import (
    DeletedFinalStateUnknown,
    InformerKey,
    ListerWatcher,
    SharedInformer,
    SharedInformerFactory,
)
from webhook.localsource import LocalDirectoryListerWatcher
from webhook.metrics import Metrics
from webhook.policy import PolicyIndex, policy_key
from webhook.policy.lookups import InMemoryLookups
from webhook.policy.model import GROUP, VERSION
from webhook.tls import CertReloader

log = logging.getLogger("tollgate")

NAMESPACES = InformerKey("namespaces")
CLUSTER_POLICIES = InformerKey(f"clusteradmissionpolicies.{GROUP}")
NAMESPACED_POLICIES = InformerKey(f"admissionpolicies.{GROUP}")

#: InformerKey.resource → (group, version, plural, kinds served from --local files, default namespace).
RESOURCES: dict[str, tuple[str, str, str, set[str], str | None]] = {
    "namespaces": ("", "v1", "namespaces", {"Namespace"}, None),
    "configmaps": ("", "v1", "configmaps", {"ConfigMap"}, "default"),
    CLUSTER_POLICIES.resource: (GROUP, VERSION, "clusteradmissionpolicies", {"ClusterAdmissionPolicy"}, None),
    NAMESPACED_POLICIES.resource: (GROUP, VERSION, "admissionpolicies", {"AdmissionPolicy"}, "default"),
}

INDEX = web.AppKey("index", PolicyIndex)
FACTORY = web.AppKey("factory", SharedInformerFactory)
METRICS = web.AppKey("metrics", Metrics)
CERTS = web.AppKey("certs", CertReloader)
CONFIGMAPS_KEY = web.AppKey("configmaps_key", InformerKey)


def local_lister_watchers(root: Path, poll_interval: float) -> Callable[[InformerKey], ListerWatcher]:
    """ListerWatchers over YAML files under ``root``, one per informer key."""

    def make(key: InformerKey) -> ListerWatcher:
        _g, _v, _p, kinds, default_ns = RESOURCES[key.resource]
        return LocalDirectoryListerWatcher(root, kinds=kinds, default_namespace=default_ns,
                                           poll_interval=poll_interval)

    return make


class PolicyEventHandler:
    """Keeps the :class:`PolicyIndex` in step with a policy informer; queues status writes."""

    def __init__(self, index: PolicyIndex, status_sink: Callable[[dict[str, Any], Any], object] | None,
                 *, forget: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.index = index
        self.status_sink = status_sink
        self.forget = forget

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        """Compile and file the policy; report its Ready condition."""
        state = self.index.upsert(obj)
        if state.result.policy is None:
            log.warning("policy not ready", extra={"policy": state.key, "reason": state.result.condition["reason"],
                                                   "detail": state.result.condition["message"]})
        else:
            log.info("policy compiled", extra={"policy": state.key})
        if self.status_sink is not None:
            self.status_sink(obj, state.result.condition)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Recompile only when the spec or generation changed (status writes also arrive as updates)."""
        if old.get("spec") == new.get("spec") and self.index.state(policy_key(new)) is not None:
            return
        self.on_add(new, False)

    def on_delete(self, obj: dict[str, Any] | DeletedFinalStateUnknown) -> None:
        """Forget the policy (and any status write still queued for it)."""
        self.index.remove(obj.key if isinstance(obj, DeletedFinalStateUnknown) else obj)
        if self.forget is not None:
            self.forget(obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj)


def _refresh_gauges(app: web.Application) -> None:
    metrics = app[METRICS]
    for key, inf in app[FACTORY].informers.items():
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
    states = app[INDEX].states()
    ready = sum(1 for s in states if s.result.policy is not None)
    metrics.policies_ready.labels("true").set(ready)
    metrics.policies_ready.labels("false").set(len(states) - ready)
    if CERTS in app:
        metrics.cert_expiry.set(app[CERTS].expiry)
        metrics.cert_expiry_seconds.set(app[CERTS].expiry - time.time())


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: the process serves HTTP (liveness)."""
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: 200 only when every informer synced and a certificate is loaded; JSON detail."""
    app = request.app
    caches = {}
    for key, inf in app[FACTORY].informers.items():
        age = inf.cache_age()
        caches[key.resource] = {"synced": inf.has_synced(), "resourceVersion": inf.last_sync_resource_version,
                                "objects": len(inf.indexer), "ageSeconds": None if age is None else round(age, 3)}
    policies = {s.key: s.result.condition["status"] == "True" for s in app[INDEX].states()}
    ready = all(c["synced"] for c in caches.values()) and CERTS in app
    body = {"ready": ready, "certificateLoaded": CERTS in app, "caches": caches, "policies": policies}
    return web.json_response(body, status=200 if ready else 503)


async def metrics_view(request: web.Request) -> web.Response:
    """``GET /metrics`` in the Prometheus text format."""
    _refresh_gauges(request.app)
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_app(settings: Settings, *, lister_watcher_for: Callable[[InformerKey], ListerWatcher] | None = None,
               api_client: Any = None) -> web.Application:
    """Build the webhook application.

    Args:
        settings: see :class:`~webhook.config.Settings`.
        lister_watcher_for: where informers list and watch. Default: YAML files
            when ``settings.local_dir`` is set, else the cluster through
            kubernetes_asyncio (an ApiClient is created in ``cleanup_ctx``).
        api_client: an existing kubernetes_asyncio ApiClient (tests); not closed here.

    Returns:
        The aiohttp application (serve it with TLS from ``app[CERTS].context``
        when a certificate is configured).
    """
    app = web.Application(client_max_size=settings.max_request_bytes + 1)
    metrics = Metrics()
    index = PolicyIndex()
    app[METRICS] = metrics
    app[INDEX] = index
    if settings.cert_file is not None and settings.key_file is not None:
        app[CERTS] = CertReloader(settings.cert_file, settings.key_file, client_ca=settings.client_ca,
                                  on_reload=lambda result: metrics.cert_reloads.labels(result).inc())

    state: dict[str, Any] = {"api_client": api_client}

    def lw_for(key: InformerKey) -> ListerWatcher:
        if lister_watcher_for is not None:
            return lister_watcher_for(key)
        if settings.local_dir is not None:
            return local_lister_watchers(settings.local_dir, settings.local_poll_interval)(key)
        from webhook.kube.listwatch import KubeListerWatcher

        group, version, plural, _kinds, _ns = RESOURCES[key.resource]
        return KubeListerWatcher(state["api_client"], group=group, version=version, plural=plural,
                                 namespace=key.namespace)

    factory = SharedInformerFactory(lw_for)
    app[FACTORY] = factory
    configmaps_key = InformerKey("configmaps", label_selector=settings.params_selector or None)
    app[CONFIGMAPS_KEY] = configmaps_key

    async def informers_ctx(app: web.Application) -> AsyncIterator[None]:
        owned_client = None
        status_writer = elector = None
        in_cluster = lister_watcher_for is None and settings.local_dir is None
        if in_cluster and state["api_client"] is None:
            from webhook.kube.client import new_api_client

            owned_client = state["api_client"] = await new_api_client(kubeconfig=settings.kubeconfig,
                                                                      context=settings.context)
        status_sink = None
        if settings.write_status and state["api_client"] is not None:
            from webhook.kube.leader import LeaderElectionConfig, LeaderElector
            from webhook.kube.status import StatusWriter

            identity = settings.pod_name or os.environ.get("POD_NAME") or socket.gethostname()
            # Only the leader writes status; a new leader re-queues every policy's condition at once.
            leader: list[Any] = []
            status_writer = StatusWriter(state["api_client"], is_leader=lambda: bool(leader) and leader[0].is_leader())
            elector = LeaderElector(state["api_client"], LeaderElectionConfig(
                lease_name="tollgate-status-writer", lease_namespace=settings.namespace, identity=identity),
                on_started_leading=status_writer.resync)
            leader.append(elector)
            status_sink = status_writer.enqueue
        # Build every informer before starting any, so one LIST/WATCH per key.
        ns_inf = factory.informer(NAMESPACES)
        cm_inf = factory.informer(configmaps_key)
        policy_infs = [factory.informer(CLUSTER_POLICIES), factory.informer(NAMESPACED_POLICIES)]
        handler = PolicyEventHandler(index, status_sink,
                                     forget=status_writer.forget if status_writer is not None else None)
        regs = [inf.add_event_handler(handler) for inf in policy_infs]

        def policies_synced() -> bool:
            return all(inf.has_synced() for inf in policy_infs) and all(r.has_synced() for r in regs)

        lookups = InformerLookups(ns_inf, cm_inf, policies_synced)
        app_server.handler.lookups = lookups
        if status_writer is not None and elector is not None:
            await status_writer.start()
            await elector.start()
        await factory.start()
        try:
            yield
        finally:
            await factory.stop()
            if elector is not None:
                await elector.stop()
            if status_writer is not None:
                await status_writer.stop()
            if owned_client is not None:
                await owned_client.close()

    async def certs_ctx(app: web.Application) -> AsyncIterator[None]:
        if CERTS not in app:
            yield
            return
        task = asyncio.get_running_loop().create_task(app[CERTS].watch(settings.cert_poll_interval))
        try:
            yield
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    # Until the informers exist every cache reads as unsynced, so policies answer per onUnsynced.
    app_server = AdmissionServer(AdmissionHandler(index, InMemoryLookups(unsynced=("namespaces", "configmaps",
                                                                                   "policies"))),
                                 metrics, max_request_bytes=settings.max_request_bytes,
                                 default_timeout=settings.default_timeout)
    app.cleanup_ctx.append(informers_ctx)
    app.cleanup_ctx.append(certs_ctx)
    app.add_routes(app_server.routes())
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics_view)])
    return app


def informer_for(app: web.Application, resource: str) -> SharedInformer:
    """The app's informer for ``resource`` (``namespaces``, ``configmaps``, or a policy plural.group)."""
    for key, inf in app[FACTORY].informers.items():
        if key.resource == resource:
            return inf
    raise KeyError(resource)
