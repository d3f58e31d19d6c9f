"""The Auditor over the in-memory cluster: what triggers re-evaluation, and what does not."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.component.dynamic.test_dynamic_factory import PODS, factory, obj, snap
from tests.fakeapi.server import Cluster
from webhook.audit.auditor import Auditor
from webhook.audit.evaluate import audit_rules
from webhook.informer.discovered import DynamicInformers
from webhook.informer.gvr import GVR, DiscoverySnapshot
from webhook.informer.handlers import AddNotification
from webhook.policy import InMemoryLookups
from webhook.policy.model import Reference, parse_policy

NO_PRIV = {"expression": "object.spec.containers.all(c, !(c.?securityContext.?privileged.orValue(false)))"}


def cap(**spec: Any) -> dict[str, Any]:
    body = {"background": True, "validations": [NO_PRIV], "match": {"resourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]}}
    body.update(spec)
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
            "metadata": {"name": "p", "resourceVersion": "1"}, "spec": body}


async def idle(a: Auditor) -> None:
    """Every running dynamic informer has synced over HTTP and the auditor has nothing left to evaluate."""
    for _ in range(600):
        informers = a._dynamic.factory.informers.values()
        if all(i.has_synced() and i.handlers_idle() for i in informers) and a.idle():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("auditor did not settle")


def podspec(privileged: bool) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": privileged}}]}


async def started(cluster: Cluster, pods: list[bool],
                  lookups: Any = None) -> tuple[DynamicInformers, Auditor, dict[str | None, Any]]:
    """Pods ``p0``, ``p1``... (privileged or not) in the cluster, and a started Auditor over a Pod informer factory.

    ``lookups``: a function of the factory giving the auditor's lookups (default: empty in-memory ones).
    """
    for i, privileged in enumerate(pods):
        await cluster.apply("pods", obj(f"p{i}", spec=podspec(privileged)))

    async def discover() -> DiscoverySnapshot:
        return snap(PODS)

    dyn = DynamicInformers(factory(cluster), discover, refresh_interval=0)
    reports: dict[str | None, Any] = {}
    auditor = Auditor(dyn, lookups(dyn.factory) if lookups else InMemoryLookups(), reports.__setitem__)
    await dyn.refresh()
    await auditor.start()
    return dyn, auditor, reports


async def test_resyncs_are_ignored_and_real_policy_changes_reevaluate_everything(cluster: Cluster) -> None:
    dyn, auditor, reports = await started(cluster, [True, False, False, False])
    handler = auditor.policy_handler()
    policy = cap()
    handler.on_add(policy, True)
    await idle(auditor)
    assert auditor.evaluations == 4 and reports["default"]["summary"]["fail"] == 1
    handler.on_update(policy, policy)  # resync
    handler.on_update(policy, copy.deepcopy(policy))  # same resourceVersion
    await idle(auditor)
    assert auditor.evaluations == 4
    edited = cap(validations=[NO_PRIV, {"expression": "false", "message": "never"}])
    edited["metadata"]["resourceVersion"] = "2"
    handler.on_update(policy, edited)
    await idle(auditor)
    assert auditor.evaluations == 8 and reports["default"]["summary"]["fail"] == 5
    # An object update re-evaluates that object only; a burst of updates to one object is coalesced.
    for _ in range(5):
        await cluster.apply("pods", obj("p1", spec=podspec(True)))
    inf = dyn.factory.informer(PODS)
    assert inf is not None
    for _ in range(300):
        if inf.last_sync_resource_version == str(cluster.rv):
            break
        await asyncio.sleep(0.005)
    await idle(auditor)
    assert 9 <= auditor.evaluations <= 13 and reports["default"]["summary"]["fail"] == 6
    handler.on_delete(edited)
    await idle(auditor)
    assert reports["default"] is None and dyn.factory.informers == {}
    await auditor.stop()
    await dyn.stop()


def test_audit_rules_skip_non_create_rules_and_add_pod_controllers() -> None:
    spec = parse_policy(cap(autogen={"podControllers": True}, match={"resourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["services"], "operations": ["DELETE"]}]}))
    rules = audit_rules(spec)
    assert sorted(r for rule in rules for r in rule.resources) == [
        "cronjobs", "daemonsets", "deployments", "jobs", "pods", "replicasets", "replicationcontrollers",
        "statefulsets"]


class _ReferenceLookups(InMemoryLookups):
    """Lookups whose reference reads go to the factory's running informers (as the app's InformerLookups)."""

    def __init__(self, factory: Any) -> None:
        super().__init__()
        self._factory = factory

    def get_object(self, reference: Reference, namespace: str, name: str) -> dict[str, Any] | None:
        inf = self._factory.informer(GVR(reference.group, reference.version, reference.resource))
        return None if inf is None else inf.indexer.get_by_key(f"{namespace}/{name}" if namespace else name)

    def list_objects(self, reference: Reference, namespace: str, labels: Any) -> list[dict[str, Any]]:
        inf = self._factory.informer(GVR(reference.group, reference.version, reference.resource))
        objs = [] if inf is None else inf.indexer.list()
        return [o for o in objs if not namespace or o["metadata"].get("namespace") == namespace]


async def test_a_change_in_a_referenced_cache_reevaluates_the_policies_reading_it(cluster: Cluster) -> None:
    # Pods pass only where a Service exists in their namespace; the Services cache is a spec.references one,
    # run by the same factory. Creating a Service re-evaluates the policy's objects without any Pod changing.
    services = GVR("", "v1", "services")
    dyn, auditor, reports = await started(cluster, [False] * 3, _ReferenceLookups)
    await dyn.factory.acquire(services, "references:p")
    policy = cap(references=[{"apiVersion": "v1", "resource": "services"}], validations=[
        {"expression": 'resource.List("v1", "services", object.metadata.namespace).items.size() > 0',
         "message": "no Service in the namespace"}])
    auditor.policy_handler().on_add(policy, True)
    await idle(auditor)
    assert reports["default"]["summary"]["fail"] == 3
    evaluations = auditor.evaluations
    await cluster.apply("services", obj("svc"))
    for _ in range(400):
        await idle(auditor)
        if reports["default"]["summary"]["pass"] == 3:
            break
        await asyncio.sleep(0.005)
    assert reports["default"]["summary"] == {**reports["default"]["summary"], "pass": 3, "fail": 0}
    assert auditor.evaluations == evaluations + 3
    await auditor.stop()
    await dyn.stop()


async def test_objects_already_evaluated_at_their_resource_version_are_not_evaluated_again(cluster: Cluster) -> None:
    # A full pass may see an informer's objects before the informer's handlers have delivered its initial adds
    # (the reflector fills the Indexer, then notifies): those late adds must not evaluate the objects again.
    dyn, auditor, reports = await started(cluster, [True, False, False, False])
    auditor.policy_handler().on_add(cap(), True)
    await idle(auditor)
    assert auditor.evaluations == 4
    inf = dyn.factory.informer(PODS)
    assert inf is not None
    for o in inf.indexer.list():
        await inf._notify(AddNotification(o, True))  # the same objects, delivered late
    await idle(auditor)
    assert auditor.evaluations == 4
    # A real change is still evaluated, and only that object.
    await cluster.apply("pods", obj("p1", spec=podspec(True)))
    for _ in range(400):
        await idle(auditor)
        if reports["default"]["summary"]["fail"] == 2:
            break
        await asyncio.sleep(0.005)
    assert auditor.evaluations == 5 and reports["default"]["summary"]["fail"] == 2
    await auditor.stop()
    await dyn.stop()
