"""An AdmissionServer with an IsolatedEvaluator over the shipped policies, on a real TLS listener."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from webhook.admission.handler import AdmissionHandler
from webhook.admission.isolation.evaluators import IsolatedEvaluator, SizeRoutedEvaluator
from webhook.admission.isolation.pool import EvaluationPool
from webhook.admission.lifecycle import evaluation_pool_ctx
from webhook.admission.limits import OutputLimits
from webhook.admission.server import AdmissionServer
from webhook.metrics import Metrics
from webhook.policy import PolicyIndex
from webhook.policy.lookups import InMemoryLookups
from webhook.tls import generate as certs
from webhook.tls.reload import CertReloader

ROOT = Path(__file__).resolve().parents[3]


def shipped_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((ROOT / "policies").rglob("*.y*ml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return docs


def big_pod_review(n: int, uid: str = "big") -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": "registry.example.com/app:1",
                   "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                       "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
                   "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}} for i in range(n)]
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"pod-{uid}", "namespace": "default", "labels": {"team": "platform"}},
           "spec": {"containers": containers}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "name": pod["metadata"]["name"], "namespace": "default", "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": pod, "oldObject": None, "dryRun": False}}


@dataclass
class IsolatedServer:
    url: str
    client_ssl: ssl.SSLContext
    server: AdmissionServer
    pool: EvaluationPool
    metrics: Metrics


@asynccontextmanager
async def isolated_server(tmp_path: Path, *, documents: list[dict[str, Any]] | None = None, workers: int = 2,
                          limits: OutputLimits | None = None, memory_limit_bytes: int = 2 * 1024**3,
                          isolate_above_bytes: int = 0,
                          inline_work_budget: int | None = None) -> AsyncIterator[IsolatedServer]:
    docs = shipped_documents() if documents is None else documents
    index = PolicyIndex()
    for d in docs:
        if d.get("kind") in ("ClusterAdmissionPolicy", "AdmissionPolicy"):
            index.upsert(d)
    namespaces = [d for d in docs if d.get("kind") == "Namespace"] or [
        {"metadata": {"name": "default", "labels": {"team": "platform"}}}]
    configmaps = [d for d in docs if d.get("kind") == "ConfigMap"]
    handler = AdmissionHandler(index, InMemoryLookups(namespaces=namespaces, configmaps=configmaps))
    metrics = Metrics()
    server = AdmissionServer(handler, metrics, max_request_bytes=8 * 1024 * 1024)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=8 * 1024 * 1024 + 1)
    app.add_routes([*server.routes(), web.get("/healthz", healthz)])
    app.on_response_prepare.append(server.on_response_prepare)
    app.cleanup_ctx.append(evaluation_pool_ctx(server, metrics, workers=workers, memory_limit_bytes=memory_limit_bytes,
                                               limits=limits, isolate_above_bytes=isolate_above_bytes,
                                               inline_work_budget=inline_work_budget))
    paths = certs.write_certs(tmp_path, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    reloader = CertReloader(paths.cert, paths.key)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=reloader.context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    isolated = server.evaluator.isolated if isinstance(server.evaluator, SizeRoutedEvaluator) else server.evaluator
    assert isinstance(isolated, IsolatedEvaluator)
    try:
        yield IsolatedServer(f"https://localhost:{port}", ssl.create_default_context(cafile=str(paths.ca)),
                             server, isolated.pool, metrics)
    finally:
        await runner.cleanup()
