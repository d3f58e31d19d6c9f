"""The probes and the metrics endpoint: ``GET /healthz``, ``/readyz`` and ``/metrics``.

They read what ``create_app`` built (``app[COMPONENTS]``) and never the API
server. ``/readyz`` is the readiness the Service routes by: 200 only when a
review sent now would be answered from the loaded policies.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.server.components import COMPONENTS, Components


def routes() -> list[web.RouteDef]:
    """``GET /healthz``, ``GET /readyz`` and ``GET /metrics``."""
    return [web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics_view)]


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: the process serves HTTP (liveness)."""
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    """``GET /readyz``: 200 only when a review sent now would be answered from the loaded policies; JSON detail.

    Ready means: every informer has synced and still hears the API server (a watch
    open, or a list page or event within ``settings.ready_max_staleness`` seconds:
    a replica cut off from it steps out of the Service while those that are not keep
    answering, and after an outage comes back only once each cache lists or watches
    again), the policy handlers have delivered the initial list into the index
    (``policiesLoaded``: the gate reviews pass, so a ready server never answers a
    review 503), a certificate is loaded, and the server is not shutting down.
    Each cache's ``stalenessSeconds`` is 0 while its watch is open.
    ``policies`` maps each policy key to ``{"ready", "reason"}``;
    ``unmatchablePolicies`` lists policies whose match rules are unreadable (they select nothing);
    ``references`` maps each cache of a policy's ``spec.references`` to ``synced``, ``syncing``,
    ``refused: <reason>`` or ``not running`` (reported, not required: ``onUnsynced`` answers for it);
    with ``--local``, ``localFileErrors`` maps each file that stopped parsing to its error; in a cluster,
    ``apiServer`` has the API server's ``version`` and, when it is older than supported, ``unsupported``;
    ``imports`` has the imported kinds watched (kind → apiVersion), those refused, and each imported
    policy's problems (see :mod:`webhook.server.imports`).
    """
    c = request.app[COMPONENTS]
    ready, caches, current, loaded = _readiness(c)
    policies = {s.key: {"ready": s.ready, "reason": s.result.condition["reason"]} for s in c.index.states()}
    body: dict[str, Any] = {
        "ready": ready, "cachesCurrent": current, "policiesLoaded": loaded, "certificateLoaded": c.certs is not None,
        "shuttingDown": c.server.shutting_down, "caches": caches, "policies": policies,
        "unmatchablePolicies": c.index.unmatchable()}
    if c.certs is not None:
        body["certificate"] = c.certs.certificate_status()  # expiringSoon within 7 days: reported, not fatal
    if c.references is not None and c.references.wanted():
        # Not part of readiness: a policy whose reference cache has not synced answers per its onUnsynced.
        body["references"] = c.references.status()
    if c.api_server:
        # Reported, not part of readiness: an older API server still sends reviews (see webhook.kube.version).
        body["apiServer"] = dict(c.api_server)
    if c.imports is not None:
        # Imported policies get no status on their sources (the API server's or Kyverno's objects): it is here.
        body["imports"] = c.imports.status()
    if c.local_sources:
        # A file that stopped parsing keeps its last good objects (as an API server refuses a bad write).
        body["localFileErrors"] = c.local_file_errors()
    return web.json_response(body, status=200 if ready else 503)


def is_ready(c: Components) -> bool:
    """Whether ``/readyz`` would answer 200 now (see :func:`readyz` for what ready means)."""
    return _readiness(c)[0]


def _readiness(c: Components) -> tuple[bool, dict[str, dict[str, Any]], bool, bool]:
    """``(ready, caches, cachesCurrent, policiesLoaded)``: each cache's detail keyed by resource."""
    max_staleness = c.settings.ready_max_staleness
    caches = {}
    current = True
    for key, inf in c.factory.informers.items():
        age, stale = inf.cache_age(), inf.staleness()
        caches[key.resource] = {"synced": inf.has_synced(), "resourceVersion": inf.last_sync_resource_version,
                                "objects": len(inf.indexer), "ageSeconds": None if age is None else round(age, 3),
                                "stalenessSeconds": None if stale is None else round(stale, 3)}
        if max_staleness > 0 and not inf.healthy(max_staleness):
            current = False
    loaded = c.policies_synced()
    ready = (all(cache["synced"] for cache in caches.values()) and current and loaded and c.certs is not None
             and not c.server.shutting_down)
    return ready, caches, current, loaded


async def metrics_view(request: web.Request) -> web.Response:
    """``GET /metrics`` in the Prometheus text format (gauges refreshed from the caches first)."""
    c = request.app[COMPONENTS]
    refresh_gauges(c)
    return web.Response(body=generate_latest(c.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def refresh_gauges(c: Components) -> None:
    """Set the gauges read from the caches, the index and the certificate (called per scrape)."""
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
    metrics.policies_ready.labels("true").set(ready)
    metrics.policies_ready.labels("false").set(len(states) - ready)
    metrics.policies_unmatchable.set(len(c.index.unmatchable()))
    if c.local_sources:
        metrics.local_file_errors.set(len(c.local_file_errors()))
    if c.certs is not None:
        metrics.cert_expiry.set(c.certs.expiry)
        metrics.cert_expiry_seconds.set(c.certs.expiry - time.time())
