"""Evaluation plans decide exactly as the per-policy path does (property test), and fuse what they should."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures import ROOT, fixture_dir
from tests.unit.policy.helpers import pod, policy, request
from webhook.policy import InMemoryLookups, PolicyIndex, RequestCoordinates, evaluate_mutating, evaluate_validating
from webhook.policy.cel.env import environment
from webhook.policy.engine import RequestContext, ValidationOutcome
from webhook.policy.engine.fused import fused_passes
from webhook.policy.matching import View
from webhook.policy.memo import DecisionMemo
from webhook.policy.model import Reference
from webhook.policy.plan import MIN_EVALUATIONS, PROBE_EVERY, build_plan, fusable, scoped_fusable
from webhook.policy.projection import ALL

ENV = environment()


KINDS = {"Pod": ("", "pods"), "Deployment": ("apps", "deployments"), "StatefulSet": ("apps", "statefulsets"),
         "DaemonSet": ("apps", "daemonsets"), "ReplicaSet": ("apps", "replicasets"), "Job": ("batch", "jobs"),
         "CronJob": ("batch", "cronjobs"), "ReplicationController": ("", "replicationcontrollers")}


def _docs(root: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(root.rglob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    return out


SHIPPED = _docs(ROOT / "policies")
POLICIES = [d for d in SHIPPED if d.get("kind") in ("ClusterAdmissionPolicy", "AdmissionPolicy")]
LOOKUPS = InMemoryLookups(namespaces=[d for d in SHIPPED if d.get("kind") == "Namespace"],
                          configmaps=[d for d in SHIPPED if d.get("kind") == "ConfigMap"],
                          objects={Reference("v1", "configmaps"): [d for d in SHIPPED if d.get("kind") == "ConfigMap"]})
#: Policies that exercise the fallback: runtime errors, Warn/Audit actions, non-bool results, selectors.
EXTRA = [
    policy("zz-errors", validations=[{"expression": "object.spec.containers[0].nope == 1"}]),
    policy("zz-warn", validationActions=["Warn"], validations=[{"expression": "object.metadata.name != 'web-3'"}]),
    policy("zz-audit", validationActions=["Audit"], failurePolicy="Ignore",
           validations=[{"expression": "size(object.spec.containers) < 3"}]),
    policy("zz-nonbool", failurePolicy="Ignore", validations=[{"expression": "dyn(object.metadata.name)"}]),
    policy("zz-labels", objectSelector={"matchLabels": {"tier": "db"}},
           validations=[{"expression": "has(object.metadata.annotations)", "message": "db pods need annotations"}]),
    # Scoped groups (plan.scoped_fusable): params with a matchCondition that is sometimes false and an audit
    # annotation; references; a matchCondition that errors on Pods without a team label.
    policy("zz-params", paramRef={"name": "allowed-registries", "namespace": "tollgate-system",
                                  "parameterNotFoundAction": "Deny"},
           matchConditions=[{"name": "not-web-3", "expression": "object.metadata.name != 'web-3'"}],
           variables=[{"name": "registries", "expression": "params.data.registries.split(',')"}],
           validations=[{"expression": "object.spec.containers.all(c, variables.registries.exists(r, "
                                       "c.image.startsWith(r.trim())))", "message": "registry"}],
           auditAnnotations=[{"key": "registries", "valueExpression": "variables.registries.join(',')"}]),
    policy("zz-references", references=[{"apiVersion": "v1", "resource": "configmaps"}],
           variables=[{"name": "cm", "expression": 'resource.Get("v1", "configmaps", "tollgate-system", '
                                                   '"allowed-registries")'}],
           validations=[{"expression": "variables.cm != null && object.spec.containers.all(c, "
                                       "variables.cm.data.registries.split(',').exists(r, "
                                       "c.image.startsWith(r.trim())))", "message": "registry (references)"}]),
    policy("zz-condition-errors", failurePolicy="Ignore",
           matchConditions=[{"name": "team", "expression": "object.metadata.labels['team'] != 'none'"}],
           validations=[{"expression": "size(object.spec.containers) < 4"}]),
]


def _request_for(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    group, resource = KINDS[obj["kind"]]
    version = obj.get("apiVersion", "v1").rpartition("/")[2]
    ns = (obj.get("metadata") or {}).get("namespace") or "default"
    return request(obj, resource=resource, group=group, version=version, kind=obj["kind"], namespace=ns) | {
        "uid": uid}


def _corpus() -> list[dict[str, Any]]:
    objs = [d for d in _docs(fixture_dir("kyverno-pod-security-cel")) if d.get("kind") in KINDS]
    objs += [d for d in _docs(ROOT / "policies" / "examples") if d.get("kind") in KINDS]
    reqs = [_request_for(o, f"corpus-{i}") for i, o in enumerate(objs)]
    for path in sorted(fixture_dir("kubewarden-admission-requests").glob("*.json")):
        reqs.append(json.loads(path.read_text()))
    return reqs


def _index(extra: list[dict[str, Any]]) -> PolicyIndex:
    index = PolicyIndex()
    for p in [*POLICIES, *extra]:
        index.upsert(p)
    return index


@functools.cache
def _index_with_fallbacks() -> PolicyIndex:
    return _index(EXTRA)


def _outcome(out: ValidationOutcome) -> tuple[Any, ...]:
    return (out.allowed, out.code, out.reason, out.message, out.warnings, out.audit_annotations,
            [(r.policy, r.result, r.message, sorted(r.actions), r.code, r.reason) for r in out.results])


#: One decision memo across every request of the module: passes remembered for one request are looked up by
#: the requests after it (the corpus and the generated Pods share many Pod Security fields).
MEMO = DecisionMemo()
#: Hits on a request's first evaluation with the memo: passes another request stored.
CROSS_HITS = [0]


def _both(index: PolicyIndex, req: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[Any, ...], int]:
    """Both paths' outcomes, and how many policies a fused program proved passing.

    The planned path is also run with the decision memo, twice (the second time every pass it can hold is held):
    each outcome must be the planned path's own.
    """
    coords = RequestCoordinates.of(req)
    plan = index.plan(coords).compile_all()
    planned = evaluate_validating(req, plan, LOOKUPS)
    for attempt in range(2):
        hits = MEMO.hits
        assert _outcome(evaluate_validating(req, plan, LOOKUPS, memo=MEMO)) == _outcome(planned)
        if attempt == 0:
            CROSS_HITS[0] += MEMO.hits - hits
    per_policy = evaluate_validating(req, index.candidates(coords), LOOKUPS)
    return _outcome(planned), _outcome(per_policy), len(fused_passes(plan, RequestContext(req, LOOKUPS), None,
                                                                      annotations={}))


@pytest.mark.parametrize("extra", [[], EXTRA], ids=["shipped", "shipped+fallbacks"])
def test_plans_decide_like_the_per_policy_path_on_every_fixture_request(extra: list[dict[str, Any]]) -> None:
    index = _index(extra)
    reqs = _corpus()
    assert len(reqs) > 300
    proved = 0
    for req in reqs:
        planned, per_policy, fused = _both(index, req)
        assert planned == per_policy, req.get("name") or req["object"]["metadata"].get("name")
        proved += fused > 0
    # The corpus is mostly non-compliant (each violation sends its chunk down the per-policy path), yet the fast
    # path is taken for some requests too, so both paths are compared.
    assert proved > 0
    # Passes stored for one request were served by the memo for others.
    assert CROSS_HITS[0] > 0


_container = st.fixed_dictionaries(
    {"name": st.sampled_from(["app", "side", "init"]),
     "image": st.sampled_from(["registry.example.com/app:1", "docker.io/library/nginx:latest",
                               "ghcr.io/example/tool:2", "registry.example.com/db"])},
    optional={"securityContext": st.fixed_dictionaries({}, optional={
        "privileged": st.booleans(), "allowPrivilegeEscalation": st.booleans(), "runAsNonRoot": st.booleans(),
        "runAsUser": st.sampled_from([0, 1000]), "capabilities": st.fixed_dictionaries({}, optional={
            "drop": st.sampled_from([["ALL"], ["NET_RAW"]]), "add": st.sampled_from([["NET_BIND_SERVICE"],
                                                                                     ["SYS_ADMIN"]])}),
        "seccompProfile": st.sampled_from([{"type": "RuntimeDefault"}, {"type": "Unconfined"}])}),
        "ports": st.lists(st.fixed_dictionaries({"containerPort": st.integers(1, 9000)},
                                                optional={"hostPort": st.sampled_from([0, 80, 5500])}), max_size=2),
        "resources": st.sampled_from([{}, {"limits": {"cpu": "1", "memory": "1Gi"}}])})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers=st.lists(_container, min_size=1, max_size=4),
       labels=st.dictionaries(st.sampled_from(["team", "tier", "app"]), st.sampled_from(["db", "payments", "x"]),
                              max_size=3),
       host_network=st.booleans(), kind=st.sampled_from(["Pod", "Deployment", "CronJob"]),
       namespace=st.sampled_from(["default", "team-a"]))
def test_plans_decide_like_the_per_policy_path_on_generated_pods(
        containers: list[dict[str, Any]], labels: dict[str, str], host_network: bool, kind: str,
        namespace: str) -> None:
    spec: dict[str, Any] = {"containers": containers, "hostNetwork": host_network}
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "gen", "namespace": namespace, "labels": labels}, "spec": spec}
    if kind == "Deployment":
        obj = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "gen", "namespace": namespace},
               "spec": {"template": {"metadata": {"labels": labels}, "spec": spec}}}
    elif kind == "CronJob":
        obj = {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": "gen", "namespace": namespace},
               "spec": {"jobTemplate": {"spec": {"template": {"metadata": {"labels": labels}, "spec": spec}}}}}
    planned, per_policy, _ = _both(_index_with_fallbacks(), _request_for(obj, "gen"))
    assert planned == per_policy


#: Mutating policies whose programs read parts of the object, return parts of it, and chain (each sees the last
#: one's result): /mutate binds the object pruned to what they can read.
MUTATING = [
    policy("m1-copy-image", failurePolicy="Ignore", mutations=[{"patchType": "ApplyConfiguration",
           "applyConfiguration": {"expression": "{'metadata': {'annotations': {'first-image': "
                                                "object.spec.containers[0].image}}}"}}]),
    policy("m2-containers", failurePolicy="Ignore", mutations=[{"patchType": "JSONPatch", "jsonPatch": {
        "expression": "[{'op': 'add', 'path': '/metadata/annotations/containers', 'value': "
                      "object.spec.containers.map(c, c.name).join(',')}]"}}]),
    policy("m3-echo", failurePolicy="Fail", mutations=[{"patchType": "ApplyConfiguration", "applyConfiguration": {
        # metadata.labels, not spec.nodeSelector: an ApplyConfiguration may not set an atomic map (as Kubernetes).
        "expression": "{'metadata': {'labels': has(object.metadata.labels) ? object.metadata.labels : "
                      "{'seen': object.metadata.annotations['first-image']}}}"}}]),
    policy("m4-security", failurePolicy="Ignore", mutations=[{"patchType": "JSONPatch", "jsonPatch": {
        "expression": "object.spec.containers.exists(c, has(c.securityContext)) ? [] : "
                      "[{'op': 'add', 'path': '/spec/containers/0/securityContext', 'value': "
                      "{'runAsNonRoot': true}}]"}}]),
]


def test_mutations_on_the_projected_object_patch_like_the_whole_object() -> None:
    index = _index(MUTATING)
    changed = 0
    for req in _corpus():
        coords = RequestCoordinates.of(req)
        plan = index.plan(coords).compile_all()
        if any(policy.mutating for policy, _ in plan.entries):
            assert plan.mutation_projections and plan.mutation_projections.get(View.OBJECT) is not None
        projected = evaluate_mutating(req, plan, LOOKUPS)
        whole = evaluate_mutating(req, index.candidates(coords), LOOKUPS)
        assert (projected.allowed, projected.message, projected.patch, projected.warnings,
                [(r.policy, r.result, r.message) for r in projected.results]) == (
            whole.allowed, whole.message, whole.patch, whole.warnings,
            [(r.policy, r.result, r.message) for r in whole.results]), req["uid"]
        changed += bool(projected.patch)
    assert changed > 100


def test_a_compliant_pod_is_decided_by_fused_programs_alone() -> None:
    compliant = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "ok", "namespace": "default", "labels": {"team": "payments"}},
                 "spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                          "containers": [{"name": "app", "image": "registry.example.com/app:1.2",
                                          "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                                          "securityContext": {"allowPrivilegeEscalation": False,
                                                              "capabilities": {"drop": ["ALL"]}}}]}}
    index = _index([])
    req = _request_for(compliant, "ok")
    planned, per_policy, fused = _both(index, req)
    assert planned == per_policy and planned[0] is True
    plan = index.plan(RequestCoordinates.of(req))
    # Every fused policy is proved passing by the fused programs, except the Audit example that reports every Pod
    # in namespace default (its own program is false, so it is decided per policy).
    assert fused == len(plan.fused) - 1 > 12
    assert "kyverno-disallow-default-namespace" in {plan.entries[i][0].name for i in plan.fused}


def test_an_iteration_budget_overflow_in_a_fused_program_falls_back_per_policy() -> None:
    big = pod(images=tuple(f"registry.example.com/c{i}:1" for i in range(400)))
    index = _index([])
    req = request(big)
    req["object"]["metadata"]["labels"] = {"team": "payments"}
    planned, per_policy, fused = _both(index, req)
    assert planned == per_policy
    # 400 containers overflow the iteration budget of the larger fused programs: their policies are decided one
    # by one, so fewer policies are proved by fused programs, and the decision is still the per-policy one.
    assert fused < len(index.plan(RequestCoordinates.of(req)).fused)


def test_what_is_fused_and_what_is_not() -> None:
    index = _index(EXTRA)
    plan = build_plan(RequestCoordinates.of(request(pod())), index.candidates(RequestCoordinates.of(request(pod()))))
    fused = {plan.entries[i][0].name for i in plan.fused}
    # Selectors and broken policies are never fused; mutations never are. paramRef and auditAnnotations make a
    # scoped group of one policy, never memoized.
    assert "zz-labels" not in fused and "add-default-labels" not in fused
    scoped = {plan.entries[g.positions[0]][0].name: g for g in plan.groups if g.scoped is not None}
    assert "allowed-registries" in scoped and all(len(g.positions) == 1 for g in scoped.values())
    plan.compile_all()
    assert all(g.memo is None for g in plan.groups if g.scoped is not None)
    # Warn/Audit-only policies get programs of their own, never shared with Deny policies.
    own = {plan.entries[g.positions[0]][0].name for g in plan.groups if len(g.positions) == 1}
    assert {"zz-warn", "zz-audit", "disallow-latest-tag"} <= own
    assert {"disallow-privileged-containers", "zz-errors"} <= fused
    # Every fusable policy is in a group, a lone one too (its validations are then one program).
    assert fused == {p.name for p, _ in plan.entries if fusable(p) or scoped_fusable(p)}


def test_a_plan_binds_the_object_pruned_to_what_its_programs_read() -> None:
    index = _index([])
    req = request(pod(labels={"team": "payments"}))
    req["object"]["metadata"]["annotations"] = {"note": "x" * 100}
    req["object"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    plan = index.plan(RequestCoordinates.of(req)).compile_all()
    assert plan.projections is not None
    projection = plan.projections[View.OBJECT]
    assert projection is not None
    # The planned path binds the pruned object for fused and per-policy programs alike (the property tests
    # above compare it with the per-policy path on the whole object).
    ctx = RequestContext(req, LOOKUPS)
    ctx.project(plan.projections)
    bound = ENV.compile("object").eval(ctx.activation(View.OBJECT)).plain_value()
    assert "annotations" not in bound["metadata"] and "env" not in bound["spec"]["containers"][0]
    assert bound["spec"]["containers"][0]["image"] == "registry.example.com/app:1"
    assert bound["metadata"]["labels"] == {"team": "payments"}
    assert req["object"]["metadata"]["annotations"]  # the request is not modified
    # A policy that reads the object whole turns pruning off for its view (oldObject is still pruned).
    whole = _index([policy("zz-whole", validations=[{"expression": "string(object) != ''"}])])
    projections = whole.plan(RequestCoordinates.of(req)).compile_all().projections
    assert projections is not None and projections[View.OBJECT] is not None
    assert projections[View.OBJECT].object is ALL


def test_identical_expressions_are_evaluated_once_in_a_group() -> None:
    copies = []
    for i in range(5):
        doc = copy.deepcopy(next(p for p in POLICIES if p["metadata"]["name"] == "disallow-host-path"))
        doc["metadata"]["name"] = f"copy-{i}"
        copies.append(doc)
    index = PolicyIndex()
    for doc in copies:
        index.upsert(doc)
    plan = index.plan(RequestCoordinates.of(request(pod())))
    assert len(plan.groups) == 1 and len(plan.groups[0].positions) == 5
    assert plan.groups[0].source.count("&&") == 0  # five policies, one distinct conjunct


def test_plans_are_compiled_off_the_request_path_and_forgotten_on_any_policy_change() -> None:
    pending: list[int] = []
    index = PolicyIndex(on_pending=lambda: pending.append(1))
    for p in POLICIES:
        index.upsert(p)
    coords = RequestCoordinates.of(request(pod()))
    plan = index.plan(coords)
    assert plan.pending and pending == [1]  # queued, not compiled on the request path
    assert all(g.program is None for g in plan.groups)
    assert index.plan(coords) is plan
    while index.compile_pending():
        pass
    assert not plan.pending and all(g.program is not None for g in plan.groups)
    assert plan.projections is not None and plan.projections[View.OBJECT] is not None
    index.upsert(policy("new"))
    assert index.plan(coords) is not plan


def test_a_new_plan_is_projected_when_it_is_built_before_its_groups_compile() -> None:
    # Until a plan is projected, its requests bind and measure whole objects: the inline work estimate of the
    # shipped policies on a Pod of 3 containers was then over the budget, so such Pods went to a worker until
    # every group of the plan had compiled. The index projects a plan when it builds it.
    index = PolicyIndex()
    for p in POLICIES:
        index.upsert(p)
    plan = index.plan(RequestCoordinates.of(request(pod())))
    assert plan.projections is not None and plan.projections[View.OBJECT] is not None
    assert plan.mutation_projections is not None
    assert plan.pending and all(not g.compiled for g in plan.groups)


def test_a_fused_program_that_almost_never_passes_is_probed_not_evaluated_on_every_request() -> None:
    index = PolicyIndex()
    index.upsert(policy("reports", validationActions=["Warn"],
                        validations=[{"expression": "object.metadata.name != 'web'", "message": "named web"}]))
    lookups = InMemoryLookups()
    web, other = request(pod("web")), request(pod("api"))
    plan = index.plan(RequestCoordinates.of(web)).compile_all()
    (group,) = plan.groups

    def warnings(req: dict[str, Any]) -> list[str]:
        return evaluate_validating(req, plan, lookups).warnings

    for _ in range(MIN_EVALUATIONS):
        assert warnings(web) == ["reports: named web"]
    assert (group.outcomes.tries, group.outcomes.successes) == (MIN_EVALUATIONS, 0)
    for _ in range(PROBE_EVERY - 1):  # skipped: decided per policy alone, with the same answer
        assert warnings(web) == ["reports: named web"]
    assert (group.outcomes.tries, group.outcomes.successes) == (MIN_EVALUATIONS, 0)
    assert warnings(web) == ["reports: named web"]  # the probe
    assert (group.outcomes.tries, group.outcomes.successes) == (MIN_EVALUATIONS + 1, 0)
    # The workload changes: probes see passes, and once they are 5% of the window, every request is evaluated.
    for _ in range(PROBE_EVERY * 4):
        assert warnings(other) == []
    assert group.worth_evaluating()
    before = group.outcomes.tries
    assert warnings(other) == [] and group.outcomes.tries == before + 1
