"""BackgroundAudit, the one object the app wires, end to end against the fake API server."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from tests.component.dynamic.conftest import NO_PRIV, POLICIES, cap, pod
from tests.fakeapi.server import FakeApiServer
from webhook.caches.lookups import InformerLookups
from webhook.informer import Backoff, ReflectorOptions, SharedInformer
from webhook.informer.dynamic import Budget
from webhook.kube.client import api_client_for_url
from webhook.kube.listwatch import KubeListerWatcher
from webhook.server.audit_stack import BackgroundAudit


async def test_background_audit_stack_writes_reports_and_exports_metrics() -> None:
    fake = FakeApiServer()
    await fake.start()
    api = api_client_for_url(fake.url)
    for i in range(6):
        fake.apply("pods", pod(f"p{i}", f"ns{i % 2}", privileged=i < 2))
    fake.apply(POLICIES, cap("no-privileged", [NO_PRIV]))
    opts = ReflectorOptions(min_watch_timeout=30, short_watch=0.05, backoff_factory=lambda: Backoff(initial=0.02))

    def informer(group: str, version: str, plural: str) -> SharedInformer:
        return SharedInformer(KubeListerWatcher(api, group=group, version=version, plural=plural), name=plural,
                              reflector_options=opts)

    namespaces, configmaps = informer("", "v1", "namespaces"), informer("", "v1", "configmaps")
    policies = informer("tollgate.dev", "v1alpha1", POLICIES)
    stack = BackgroundAudit(api, InformerLookups(namespaces, configmaps, policies.has_synced), lambda: True,
                            budget=Budget(max_bytes=10_000_000), reflector_options=opts)
    policies.add_event_handler(stack.policy_handler())
    namespaces.add_event_handler(stack.context_handler("namespaces"))
    configmaps.add_event_handler(stack.context_handler("configmaps"))
    registry = CollectorRegistry()
    registry.register(stack.collector())
    await stack.start()
    for inf in (namespaces, configmaps, policies):
        await inf.start()
    try:
        for _ in range(500):
            if len(fake.state("policyreports")) == 2 and stack.auditor.idle() and stack.writer.idle():
                break
            await asyncio.sleep(0.02)
        reports = {o["metadata"]["namespace"]: o["summary"] for o in fake.state("policyreports").values()}
        assert reports == {"ns0": {"pass": 2, "fail": 1, "warn": 0, "error": 0, "skip": 0},
                           "ns1": {"pass": 2, "fail": 1, "warn": 0, "error": 0, "skip": 0}}
        assert registry.get_sample_value("tollgate_dynamic_informer_objects", {"gvr": "v1/pods"}) == 6
        assert registry.get_sample_value("tollgate_audit_evaluations_total") == 6
        assert registry.get_sample_value("tollgate_policy_report_writes_total") == 2
    finally:
        for inf in (namespaces, configmaps, policies):
            await inf.stop()
        await stack.stop()
        await api.close()
        await fake.stop()
