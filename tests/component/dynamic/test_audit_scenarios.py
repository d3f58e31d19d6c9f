"""Background audit scenarios D1-D9: reports converge to the server's truth after start, policy edits,
watch cuts and CRD churn; dynamic informers start and stop with the policies and CRDs that need them.

Each test compares every report on the fake API server with an oracle computed from the server's own
objects in plain Python, and checks the request log for the LISTs, WATCHes and writes that must (not) happen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.component.dynamic.conftest import LABELLED, NO_PRIV, POLICIES, Rig, cap, pod, start
from webhook.informer.dynamic import Budget
from webhook.informer.gvr import GVR

PODS = GVR("", "v1", "pods")
Rows = dict[str | None, set[tuple[str, str, str, str]]]


def privileged(o: dict[str, Any]) -> bool:
    return any((c.get("securityContext") or {}).get("privileged") for c in o["spec"]["containers"])


def labelled(o: dict[str, Any]) -> bool:
    return "team" in (o["metadata"].get("labels") or {})


def oracle(r: Rig, checks: dict[str, list[Callable[[dict[str, Any]], bool]]],
           resource: str = "pods") -> Callable[[], Rows]:
    """Expected rows: for each policy and each of its validations (in order), pass when the predicate holds."""

    def expected() -> Rows:
        out: Rows = {}
        for o in r.fake.state(resource).values():
            ns = o["metadata"].get("namespace")
            for name, preds in checks.items():
                for i, ok in enumerate(preds):
                    out.setdefault(ns, set()).add((name, f"validations[{i}]", o["metadata"]["name"],
                                                   "pass" if ok(o) else "fail"))
        return out

    return expected


def not_privileged(o: dict[str, Any]) -> bool:
    return not privileged(o)


def seed(r: Rig, n: int = 24, namespaces: int = 3) -> None:
    for i in range(n):
        r.fake.apply("pods", pod(f"p{i:02d}", f"ns{i % namespaces}", privileged=i % 4 == 0,
                                 team="a" if i % 3 == 0 else None))


def writes(r: Rig) -> list[dict[str, Any]]:
    return [q for q in r.fake.requests if q["verb"] in ("post", "put", "delete")]


async def test_d1_reports_converge_after_start_and_are_written_once(rig: Rig) -> None:
    seed(rig)
    rig.fake.apply(POLICIES, cap("no-privileged", [NO_PRIV],
                                 annotations={"policies.tollgate.dev/severity": "high",
                                              "policies.tollgate.dev/category": "Pod Security"}))
    await start(rig)
    await rig.converge(oracle(rig, {"no-privileged": [not_privileged]}))
    reports = rig.reports()
    assert set(reports) == {"ns0", "ns1", "ns2"}
    assert reports["ns0"]["metadata"]["name"] == "tollgate-polr-ns-ns0"
    assert reports["ns0"]["summary"] == {"pass": 6, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    assert {(r["severity"], r["category"], r["source"]) for rep in reports.values() for r in rep["results"]} == \
        {("high", "Pod Security", "tollgate")}
    # One LIST of pods (paginated from RV 0), one POST per namespace, nothing rewritten while nothing changes.
    assert [q["query"].get("resourceVersion") for q in rig.fake.log("list", "pods")] == ["0"]
    assert sorted(q["namespace"] for q in writes(rig)) == ["ns0", "ns1", "ns2"]
    assert all(q["verb"] == "post" for q in writes(rig))
    assert "managedFields" not in next(iter(rig.factory.informer(PODS).indexer.list()))["metadata"]  # type: ignore[union-attr]
    before = len(writes(rig))
    rig.fake.apply("pods", pod("p01", "ns1", privileged=False, team="b"))  # a change that keeps every result
    await asyncio.sleep(0.2)
    await rig.converge(oracle(rig, {"no-privileged": [not_privileged]}))
    assert len(writes(rig)) == before


async def test_d2_object_events_and_policy_edits_reconverge(rig: Rig) -> None:
    seed(rig)
    rig.fake.apply(POLICIES, cap("no-privileged", [NO_PRIV]))
    await start(rig)
    await rig.converge(oracle(rig, {"no-privileged": [not_privileged]}))
    # Object events: a fix, a new offender, a deletion, a new namespace.
    rig.fake.apply("pods", pod("p00", "ns0"))
    rig.fake.apply("pods", pod("new", "ns9", privileged=True))
    rig.fake.delete("pods", "ns1/p01")
    await rig.converge(oracle(rig, {"no-privileged": [not_privileged]}))
    # Policy edit: a second validation; then a second policy on the same GVR.
    rig.fake.apply(POLICIES, cap("no-privileged", [NO_PRIV, LABELLED]))
    await rig.converge(oracle(rig, {"no-privileged": [not_privileged, labelled]}))
    rig.fake.apply(POLICIES, cap("team-label", [LABELLED]))
    await rig.converge(oracle(rig, {"no-privileged": [not_privileged, labelled], "team-label": [labelled]}))
    # Turning background off drops that policy's results; deleting the last audited policy empties every report.
    rig.fake.apply(POLICIES, cap("no-privileged", [NO_PRIV, LABELLED], background=False))
    await rig.converge(oracle(rig, {"team-label": [labelled]}))
    rig.fake.delete(POLICIES, "team-label")
    await rig.converge(lambda: {})
    assert rig.reports() == {}
    assert [q["verb"] for q in writes(rig)][-4:] == ["delete"] * 4


async def test_d3_watch_cut_with_missed_changes_reconverges(rig: Rig) -> None:
    seed(rig)
    rig.fake.apply(POLICIES, cap("no-privileged", [NO_PRIV]))
    await start(rig)
    expected = oracle(rig, {"no-privileged": [not_privileged]})
    await rig.converge(expected)
    await asyncio.sleep(0.1)  # past the very-short-watch guard
    await rig.fake.refuse_connections()
    rig.fake.delete("pods", "ns0/p00")
    rig.fake.apply("pods", pod("p01", "ns1", privileged=True))
    rig.fake.apply("pods", pod("late", "ns2", privileged=True))
    rig.fake.compact()  # the missed events are gone: a relist with tombstones is the only way back
    await rig.fake.accept_connections()
    await rig.converge(expected)
    assert len(rig.fake.log("list", "pods")) >= 2
    # And a plain watch cut without compaction: re-watch, no relist.
    lists = len(rig.fake.log("list", "pods"))
    await asyncio.sleep(0.1)
    await rig.fake.close_watches()
    rig.fake.apply("pods", pod("p02", "ns2", privileged=True))
    await rig.converge(expected)
    assert len(rig.fake.log("list", "pods")) == lists


async def test_d4_informer_started_and_stopped_by_policy_edits(rig: Rig) -> None:
    seed(rig, n=6)
    rig.fake.apply("deployments", {"apiVersion": "apps/v1", "kind": "Deployment",
                                   "metadata": {"name": "d", "namespace": "ns0"},
                                   "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}})
    await start(rig)
    await asyncio.sleep(0.1)
    assert rig.factory.informers == {} and rig.fake.log("list", "pods") == []
    rig.fake.apply(POLICIES, cap("a", [NO_PRIV]))
    rig.fake.apply(POLICIES, cap("b", [LABELLED]))
    await rig.converge(oracle(rig, {"a": [not_privileged], "b": [labelled]}))
    assert set(rig.factory.informers) == {PODS} and rig.factory.owners(PODS) == {"a", "b"}
    assert len(rig.fake.log("list", "pods")) == 1  # shared: one LIST for both policies
    # Retarget b to Deployments: a second informer starts, pods stays (a still holds it).
    rig.fake.apply(POLICIES, cap("b", [{"expression": "object.spec.template.spec.containers.size() > 0"}],
                                 group="apps", resources=("deployments",)))
    await rig.converge(lambda: {**oracle(rig, {"a": [not_privileged]})(),
                                "ns0": oracle(rig, {"a": [not_privileged]})()["ns0"] | {
                                    ("b", "validations[0]", "d", "pass")}})
    assert set(rig.factory.informers) == {PODS, GVR("apps", "v1", "deployments")}
    rig.fake.delete(POLICIES, "a")
    rig.fake.delete(POLICIES, "b")
    await rig.converge(lambda: {})
    assert rig.factory.informers == {}
    watches = len(rig.fake.log("watch", "pods"))
    rig.fake.apply("pods", pod("after", "ns0"))
    await asyncio.sleep(0.2)
    assert len(rig.fake.log("watch", "pods")) == watches and len(rig.fake.log("list", "pods")) == 1


WIDGETS = GVR("example.com", "v1", "widgets")


def widget_crd() -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": True, "storage": True}]}}


async def test_d5_crd_added_and_removed_while_running(rig: Rig) -> None:
    rig.fake.apply(POLICIES, cap("sized", [{"expression": "object.spec.size <= 3", "message": "too big"}],
                                 group="example.com", resources=("widgets",)))
    for i, size in enumerate((1, 5, 3)):
        rig.fake.apply("widgets", {"apiVersion": "example.com/v1", "kind": "Widget",
                                   "metadata": {"name": f"w{i}", "namespace": "ns0"}, "spec": {"size": size}})
    await start(rig)
    await asyncio.sleep(0.2)
    assert rig.factory.informers == {}  # not served yet: nothing to inform on
    expected = oracle(rig, {"sized": [lambda o: o["spec"]["size"] <= 3]}, resource="widgets")
    refreshes = rig.dynamic.refreshes
    rig.fake.apply("customresourcedefinitions", widget_crd())
    await rig.converge(expected)
    assert set(rig.factory.informers) == {WIDGETS} and rig.dynamic.refreshes > refreshes
    report = rig.reports()["ns0"]
    assert {(r["resources"][0]["kind"], r["resources"][0]["apiVersion"]) for r in report["results"]} == \
        {("Widget", "example.com/v1")}
    rig.fake.delete("customresourcedefinitions", "widgets.example.com")
    await rig.converge(lambda: {})
    assert rig.factory.informers == {}


async def test_d6_only_the_leader_writes_and_a_new_leader_adopts_and_cleans_up(rig: Rig) -> None:
    seed(rig, n=6, namespaces=2)
    rig.leader[0] = False
    # A stale report from an earlier run for a namespace that no longer has anything.
    rig.fake.apply("policyreports", {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                                     "metadata": {"name": "tollgate-polr-ns-gone", "namespace": "gone",
                                                  "labels": {"app.kubernetes.io/managed-by": "tollgate"}},
                                     "summary": {"fail": 1}, "results": []})
    rig.fake.apply(POLICIES, cap("no-privileged", [NO_PRIV]))
    await start(rig)
    for _ in range(200):
        if rig.auditor.idle() and rig.writer.desired():
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)
    assert writes(rig) == [] and set(rig.writer.desired()) == {"ns0", "ns1"}
    rig.leader[0] = True
    await rig.converge(oracle(rig, {"no-privileged": [not_privileged]}))
    assert "gone" not in rig.reports()
    assert sorted((q["verb"], q["namespace"]) for q in writes(rig)) == [("delete", "gone"), ("post", "ns0"),
                                                                        ("post", "ns1")]


async def test_d7_policy_that_reads_user_info_is_reported_not_auditable(rig: Rig) -> None:
    seed(rig, n=3, namespaces=1)
    rig.fake.apply(POLICIES, cap("who", [{"expression": "request.userInfo.username != 'mallory'"}]))
    await start(rig)
    await rig.converge(lambda: {None: {("who", "", "who", "skip")}})
    (result,) = rig.reports()[None]["results"]
    assert "request.userInfo" in result["message"] and result["resources"][0]["kind"] == "ClusterAdmissionPolicy"
    assert rig.factory.informers == {}  # never informs on what it cannot audit


async def test_d8_budget_refusal_is_reported_and_lifted(rig: Rig) -> None:
    seed(rig, n=12)
    rig.factory.budget = Budget(max_objects=5)
    rig.fake.apply(POLICIES, cap("no-privileged", [NO_PRIV]))
    await start(rig)
    # The pods informer starts (nothing cached yet), its LIST brings 12 > 5: it is stopped and the policy says why.
    await rig.converge(lambda: {None: {("no-privileged", "", "no-privileged", "skip")}})
    assert rig.factory.informers == {}
    (note,) = rig.reports()[None]["results"]
    assert note["message"] == "informer v1/pods refused: stopped after its LIST: 12 objects > budget of 5"
    assert len(rig.fake.log("list", "pods")) == 1
    # A larger budget and the next discovery refresh start it again.
    rig.factory.budget = Budget(max_objects=100)
    rig.dynamic.request_refresh()
    await rig.converge(oracle(rig, {"no-privileged": [not_privileged]}))
    assert set(rig.factory.informers) == {PODS}


async def test_d9_namespace_label_change_reevaluates_that_namespace(rig: Rig) -> None:
    seed(rig, n=9)
    for ns, audited in (("ns0", "true"), ("ns1", "false"), ("ns2", "true")):
        rig.fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": ns, "labels": {"audit": audited}}})
    rig.fake.apply(POLICIES, cap("no-privileged", [NO_PRIV],
                                 match={"namespaceSelector": {"matchLabels": {"audit": "true"}}}))
    await start(rig)

    def selected(ns: str) -> bool:
        return bool(rig.fake.state("namespaces")[ns]["metadata"]["labels"]["audit"] == "true")

    def expected() -> Rows:
        rows = oracle(rig, {"no-privileged": [not_privileged]})()
        return {ns: r for ns, r in rows.items() if ns is not None and selected(ns)}

    await rig.converge(expected)
    assert set(rig.reports()) == {"ns0", "ns2"}
    evaluations = rig.auditor.evaluations
    rig.fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "ns1", "labels": {"audit": "true"}}})
    await rig.converge(expected)
    assert set(rig.reports()) == {"ns0", "ns1", "ns2"}
    assert rig.auditor.evaluations - evaluations == 3  # only ns1's three pods were re-evaluated


async def test_d10_a_policy_reading_namespace_object_is_reevaluated_on_a_namespace_change(rig: Rig) -> None:
    # No namespaceSelector: only the parse tree says the policy reads Namespaces (namespaceObject in its CEL).
    seed(rig, n=6, namespaces=2)
    for ns in ("ns0", "ns1"):
        rig.fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": ns, "labels": {"tier": "dev"}}})
    owned = {"expression": "namespaceObject.metadata.labels.tier == 'dev'", "message": "not a dev namespace"}
    rig.fake.apply(POLICIES, cap("dev-only", [owned]))
    await start(rig)

    def dev(o: dict[str, Any]) -> bool:
        return bool(rig.fake.state("namespaces")[o["metadata"]["namespace"]]["metadata"]["labels"]["tier"] == "dev")

    await rig.converge(oracle(rig, {"dev-only": [dev]}))
    evaluations = rig.auditor.evaluations
    rig.fake.apply("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": "ns1", "labels": {"tier": "prod"}}})
    await rig.converge(oracle(rig, {"dev-only": [dev]}))
    assert rig.auditor.evaluations - evaluations == 3  # only ns1's three pods were re-evaluated
