"""The dynamic informers, the auditor and the report writer, real, against the HTTP fake API server.

Everything is the production code path: KubeListerWatcher and Discovery over kubernetes_asyncio's ApiClient,
the policy informer feeding the Auditor, PolicyReportWriter writing reports back into the fake. The oracle
for the expected reports is computed from the server's own state with plain Python, never with the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.fakeapi.server import Cluster, FakeApiServer
from webhook.audit.auditor import Auditor
from webhook.caches.lookups import InformerLookups
from webhook.informer import Backoff, ReflectorOptions, SharedInformer
from webhook.informer.discovered import DynamicInformers, crd_informer
from webhook.informer.dynamic import DynamicInformerFactory
from webhook.informer.gvr import GVR
from webhook.kube.client import api_client_for_url
from webhook.kube.discovery import Discovery
from webhook.kube.listwatch import KubeListerWatcher
from webhook.kube.reports import PolicyReportWriter

POLICIES = "clusteradmissionpolicies"
NO_PRIV = {"expression": "object.spec.containers.all(c, !(c.?securityContext.?privileged.orValue(false)))",
           "message": "privileged containers are not allowed"}
LABELLED = {"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
            "message": "a team label is required"}


def pod(name: str, ns: str, *, privileged: bool = False, team: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "registry.example.com/app:1"}
    if privileged:
        container["securityContext"] = {"privileged": True}
    meta: dict[str, Any] = {"name": name, "namespace": ns,
                            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]}
    if team:
        meta["labels"] = {"team": team}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container]}}


def cap(name: str, validations: list[dict[str, Any]], *, background: bool = True, group: str = "",
        resources: tuple[str, ...] = ("pods",), match: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
            "metadata": {"name": name, **meta},
            "spec": {"background": background,
                     "match": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["*"],
                                                  "resources": list(resources), "operations": ["CREATE", "UPDATE"]}],
                               **(match or {})},
                     "validations": validations}}


@dataclass
class Rig:
    fake: FakeApiServer
    factory: DynamicInformerFactory
    dynamic: DynamicInformers
    auditor: Auditor
    writer: PolicyReportWriter
    policies: SharedInformer
    leader: list[bool] = field(default_factory=lambda: [True])
    caches: list[SharedInformer] = field(default_factory=list)

    def reports(self) -> dict[str | None, dict[str, Any]]:
        """The reports on the server by namespace (None: the ClusterPolicyReport)."""
        out: dict[str | None, dict[str, Any]] = {o["metadata"].get("namespace"): o
                                                  for o in self.fake.state("policyreports").values()}
        for o in self.fake.state("clusterpolicyreports").values():
            out[None] = o
        return out

    def rows(self) -> dict[str | None, set[tuple[str, str, str, str]]]:
        """``{namespace: {(policy, rule, object name, result)}}`` from the server's reports."""
        return {ns: {(r["policy"], r.get("rule", ""), r["resources"][0]["name"], r["result"])
                     for r in rep["results"]} for ns, rep in self.reports().items()}

    async def converge(self, expected: Callable[[], dict[str | None, set[tuple[str, str, str, str]]]],
                       timeout: float = 30.0) -> None:
        """Wait until the server's reports hold exactly ``expected()`` (recomputed each time), with consistent
        summaries, and every component is idle; or fail showing both."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        want: dict[str | None, set[tuple[str, str, str, str]]] = {}
        while loop.time() < end:
            want = {ns: rows for ns, rows in expected().items() if rows}
            if self.auditor.idle() and self.writer.idle() and self.rows() == want:
                break
            await asyncio.sleep(0.02)
        assert self.rows() == want
        for rep in self.reports().values():
            results = [r["result"] for r in rep["results"]]
            assert rep["summary"] == {k: results.count(k) for k in ("pass", "fail", "warn", "error", "skip")}


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    fake = FakeApiServer()
    await fake.start()
    api = api_client_for_url(fake.url)
    # The D scenarios count LIST requests: they run the paginated LIST path (WatchList has its own, E19).
    opts = ReflectorOptions(min_watch_timeout=30, short_watch=0.05, use_watch_list=False,
                            backoff_factory=lambda: Backoff(initial=0.02, cap=0.1))

    def lw(gvr: GVR) -> KubeListerWatcher:
        return KubeListerWatcher(api, group=gvr.group, version=gvr.version, plural=gvr.resource, watch_read_timeout=5)

    factory = DynamicInformerFactory(lw, reflector_options=opts)
    dynamic = DynamicInformers(factory, Discovery(api).snapshot, refresh_interval=0,
                               crd_informer=crd_informer(lw, opts), debounce=0.05)
    leader = [True]
    writer = PolicyReportWriter(api, is_leader=lambda: leader[0], batch_delay=0.02, idle_poll=0.02)
    policies = SharedInformer(lw(GVR("tollgate.dev", "v1alpha1", POLICIES)), name=POLICIES, reflector_options=opts)
    namespaces = SharedInformer(lw(GVR("", "v1", "namespaces")), name="namespaces", reflector_options=opts)
    configmaps = SharedInformer(lw(GVR("", "v1", "configmaps")), name="configmaps", reflector_options=opts)
    auditor = Auditor(dynamic, InformerLookups(namespaces, configmaps, policies.has_synced), writer.submit)
    policies.add_event_handler(auditor.policy_handler())
    namespaces.add_event_handler(auditor.context_handler("namespaces"))
    configmaps.add_event_handler(auditor.context_handler("configmaps"))
    r = Rig(fake, factory, dynamic, auditor, writer, policies, leader, [namespaces, configmaps])
    yield r
    for inf in r.caches:
        await inf.stop()
    await auditor.stop()
    await writer.stop()
    await dynamic.stop()
    await policies.stop()
    await api.close()
    await fake.stop()


async def start(r: Rig) -> None:
    """Start in the order the app would: discovery and dynamic informers, auditor, writer, policy informer."""
    for inf in r.caches:
        await inf.start()
    await r.dynamic.start()
    assert await r.dynamic.wait_discovered(5)
    await r.auditor.start()
    await r.writer.start()
    await r.policies.start()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """A started fake API server with a real ApiClient, driven as a :class:`Cluster`."""
    fake = FakeApiServer()
    await fake.start()
    api = api_client_for_url(fake.url)
    try:
        yield Cluster(fake, api)
    finally:
        await api.close()
        await fake.stop()
