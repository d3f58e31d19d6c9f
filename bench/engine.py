"""Engine benchmark, in process (no HTTP, no TLS): microseconds of CPU per AdmissionReview.

    python bench/engine.py [--seconds 3] [--json out.json]

Streams (each a list of parsed AdmissionRequests, evaluated round-robin):
  replica    one Pod (the reference payload) repeated: what a memo could serve
  distinct   128 different compliant Pods (the reference Pod with names, labels, images, tags and
             container counts varied), so no two requests share an object
  corpus     every Pod of the vendored Kyverno Pod Security corpus, renamed (mostly denied: the slow path)
  large      one ~100 KB Pod (many containers with env and volume mounts)
Policy sets: every policy under policies/ (the shipped set), and the policy-count sweep — 100 and 200
policies that all match Pods, generated as renamed copies of the shipped Pod Security policies.

What is timed per request: RequestCoordinates.of + PolicyIndex.plan + evaluate_validating (the handler's
work minus JSON parsing and response building), in process CPU time, with the decision memo as the server
runs it (``serve`` default, webhook/policy/memo.py); beside it the same without the memo, the planned path
without projection (the plans' ``projections`` emptied, so the whole object is bound and converted) and the
per-policy path (no plan, every policy evaluated on its own). In the distinct and corpus streams every
request gets container images no earlier request had (a sequence number in the tag, as bench/distinct.lua
does over HTTP), so no memo can hold a whole request; fused programs that do not read images can still
be served, as for replicas of one workload in a cluster. The projection figure is the JSON nodes
(values and map keys) of the bound ``object``, whole → projected, averaged over the stream. Figures are
medians of 9 passes, the three paths' passes interleaved. Ratios, not absolute numbers, are what compare
across machines; bench/admission.py puts them next to the bare server's CPU per request measured in the
same run.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webhook.policy import (  # noqa: E402
    InMemoryLookups,
    PolicyIndex,
    RequestCoordinates,
    evaluate_validating,
)
from webhook.policy.budget import INLINE_WORK_BUDGET  # noqa: E402
from webhook.policy.matching import View  # noqa: E402
from webhook.policy.memo import DecisionMemo  # noqa: E402
from webhook.policy.model import Reference  # noqa: E402
from webhook.policy.plan import Plan  # noqa: E402

CORPUS = ROOT / "tests" / "fixtures" / "kyverno-pod-security-cel"
PAYLOAD = ROOT / "bench" / "reference" / "make_payload.py"


def documents(root: Path) -> list[dict[str, Any]]:
    """Every YAML document under ``root`` (recursively)."""
    out: list[dict[str, Any]] = []
    for path in sorted(root.rglob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    return out


#: The namespace of the reference payload's Pods (bench/reference/make_payload.py), which policies/namespaces.yaml
#: does not define. In a cluster a Pod's Namespace exists; without it every request took the error path of the
#: policies reading ``namespaceObject`` (an error, a warning and an Event each time), which no cluster shows.
REQUEST_NAMESPACES = ("shop-prod",)


def request_namespaces() -> list[dict[str, Any]]:
    """The Namespace objects of :data:`REQUEST_NAMESPACES`, labelled as Kubernetes 1.21+ labels every namespace."""
    return [{"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}
            for name in REQUEST_NAMESPACES]


def shipped() -> tuple[list[dict[str, Any]], InMemoryLookups]:
    """The policies under policies/ as ``serve --local policies/`` serves them, and the caches beside them.

    Imported kinds (Kyverno, Gatekeeper, Kubernetes VAP/MAP) are converted as the server converts them
    (:func:`webhook.files.inputs.load_policies`): until 2026-11-28 this read only the native kinds, so the
    in-process figure left out the imported examples the served directory holds (4 of its 32 policies,
    among them the costliest on a Pod). ``spec.references`` are answered from the directory's objects of
    the referenced resource, as ``--local`` serves them; the ConfigMaps, Namespaces and the requests'
    namespaces (:func:`request_namespaces`) stand in for the caches.
    """
    from webhook.files.inputs import load_policies
    from webhook.policy.model import parse_references
    from webhook.policy.resources import resource_for_kind

    loaded = load_policies([ROOT / "policies"])
    docs = documents(ROOT / "policies")
    policies = [p.doc.obj for p in loaded]
    wanted = {(r.api_version, r.resource) for p in policies for r in parse_references(p.get("spec") or {})}
    objects: dict[Reference, dict[tuple[str, str], dict[str, Any]]] = {}
    for d in docs:
        api_version, meta = d.get("apiVersion"), d.get("metadata") or {}
        if not isinstance(api_version, str) or "name" not in meta:
            continue
        r = resource_for_kind(str(d.get("kind")), api_version)
        if (api_version, r.plural) in wanted:
            key = (str(meta.get("namespace") or ("default" if r.namespaced else "")), str(meta["name"]))
            obj = {**d, "metadata": {**meta, "namespace": key[0]}} if r.namespaced else d
            objects.setdefault(Reference(api_version, r.plural), {}).setdefault(key, obj)
    lookups = InMemoryLookups(namespaces=[d for d in docs if d.get("kind") == "Namespace"] + request_namespaces(),
                              configmaps=[d for d in docs if d.get("kind") == "ConfigMap"],
                              objects={ref: list(objs.values()) for ref, objs in objects.items()})
    return policies, lookups


def pod_security_variants(n: int) -> list[dict[str, Any]]:
    """``n`` policies that all match Pods: renamed copies of the shipped Pod Security policies."""
    base = [d for d in documents(ROOT / "policies" / "pod-security") if d.get("kind") == "ClusterAdmissionPolicy"]
    out = []
    for i in range(n):
        doc = copy.deepcopy(base[i % len(base)])
        doc["metadata"]["name"] = f"{doc['metadata']['name']}-{i:03d}"
        out.append(doc)
    return out


def request_for(pod: dict[str, Any], uid: str) -> dict[str, Any]:
    """A CREATE AdmissionRequest for ``pod`` in its namespace (default)."""
    ns = pod["metadata"].setdefault("namespace", "default")
    return {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": ns,
            "name": pod["metadata"].get("name", ""), "operation": "CREATE",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": pod, "oldObject": None, "dryRun": False}


def corpus_stream() -> list[dict[str, Any]]:
    """Every Pod of the Kyverno corpus, renamed and labelled so each request is different (mostly denied)."""
    pods = [d for d in documents(CORPUS) if d.get("kind") == "Pod"]
    out = []
    for i, original in enumerate(pods):
        pod = copy.deepcopy(original)
        pod["metadata"]["name"] = f"bench-{i:04d}"
        pod["metadata"].setdefault("labels", {})["team"] = "payments"
        out.append(request_for(pod, f"uid-{i}"))
    return out


def distinct_stream(n: int = 128, *, marker: str = "") -> list[dict[str, Any]]:
    """``n`` different compliant Pods: the reference Pod with its name, labels, images, tags and
    container count varied, so every request has a different object and most are allowed.

    ``marker`` is appended to every image tag (``"-__SEQ__"``: bench/distinct.lua puts a sequence number there).
    """
    base = replica_stream()[0]["object"]
    out = []
    for i in range(n):
        pod = copy.deepcopy(base)
        pod["metadata"]["name"] = f"web-{i:04d}"
        pod["metadata"]["labels"] = {"team": "payments", "app": f"app-{i % 17}", "tier": ("web", "db", "cache")[i % 3]}
        template = pod["spec"]["containers"][0]
        pod["spec"]["containers"] = []
        for c in range(1 + i % 3):
            container = copy.deepcopy(template)
            container["name"] = f"c{c}"
            container["image"] = f"registry.example.com/team/app-{i % 11}:{i}.{c}{marker}"
            pod["spec"]["containers"].append(container)
        out.append(request_for(pod, f"uid-{i}"))
    return out


def replica_stream() -> list[dict[str, Any]]:
    """The reference AdmissionReview's Pod (it passes the restricted profile), labelled for the examples."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(PAYLOAD)], cwd=tmp, check=True, capture_output=True)
        review = json.loads((Path(tmp) / "admissionreview.json").read_text())
    review["request"]["object"]["metadata"].setdefault("labels", {})["team"] = "payments"
    return [review["request"]]


def large_stream(target_bytes: int = 100_000) -> list[dict[str, Any]]:
    """One Pod of about ``target_bytes`` of JSON: containers with env vars and volume mounts."""
    containers = []
    i = 0
    while len(json.dumps(containers)) < target_bytes:
        containers.append({"name": f"c{i}", "image": "registry.example.com/app:1.0",
                           "env": [{"name": f"VAR_{j}", "value": "x" * 20} for j in range(10)],
                           "volumeMounts": [{"name": "data", "mountPath": f"/data/{j}"} for j in range(3)],
                           "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                               "capabilities": {"drop": ["ALL"]},
                                               "seccompProfile": {"type": "RuntimeDefault"}}})
        i += 1
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "large", "namespace": "default", "labels": {"team": "payments"}},
           "spec": {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}]}}
    return [request_for(pod, "uid-large")]


#: Passes per figure; the variants' passes alternate, so a slow spell of a shared machine hits them alike.
PASSES = 9


def _stamper(stream: list[dict[str, Any]]) -> Any:
    """A function giving a request's containers image tags no earlier request had (``<tag>-<n>``)."""
    counter = itertools.count()
    bases = {id(c): c.get("image", "") for r in stream for c in (r.get("object") or {}).get("spec", {}).get(
        "containers", []) if isinstance(c, dict)}

    def stamp(r: dict[str, Any]) -> None:
        n = next(counter)
        for c in r["object"]["spec"]["containers"]:
            c["image"] = f"{bases[id(c)]}-{n}"
    return stamp


def _per_request(variants: list[tuple[Any, Any]], stream: list[dict[str, Any]], seconds: float, *,
                 unique: bool = False) -> list[float]:
    """Median µs per request of each ``(fn, before)`` variant over :data:`PASSES` interleaved passes.

    With ``unique``, every request is given new image tags first (the same cost in every variant).
    """
    stamp = _stamper(stream) if unique else None
    passes: list[list[float]] = [[] for _ in variants]
    for _ in range(PASSES):
        for (fn, before), out in zip(variants, passes, strict=True):
            if before is not None:
                before()
            n = 0
            t0 = time.process_time()
            while time.process_time() - t0 < seconds / PASSES:
                for r in stream:
                    if stamp is not None:
                        stamp(r)
                    fn(r)
                n += len(stream)
            out.append((time.process_time() - t0) / n * 1e6)
    return [round(statistics.median(p), 1) for p in passes]


def json_nodes(value: Any) -> int:
    """JSON values and map keys in ``value``."""
    if isinstance(value, dict):
        return 1 + sum(1 + json_nodes(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(json_nodes(v) for v in value)
    return 1


def _bound_nodes(plans: list[Plan], stream: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean JSON nodes of the request's ``object``, whole and as its plan binds it (the object view)."""
    whole = bound = 0
    for plan, r in zip(plans, stream, strict=True):
        projection = (plan.projections or {}).get(View.OBJECT)
        whole += json_nodes(r["object"])
        bound += json_nodes(projection.apply(r["object"], None)[0] if projection is not None else r["object"])
    return round(whole / len(stream), 1), round(bound / len(stream), 1)


def measure(policies: list[dict[str, Any]], lookups: InMemoryLookups, stream: list[dict[str, Any]],
            seconds: float, *, unique: bool = False) -> dict[str, Any]:
    """CPU µs per request on the planned path with the memo and the inline work budget's estimate (the
    server's), and without the estimate: without the memo, without projection, and on the per-policy path;
    ``unique``: every request gets new image tags (see the module)."""
    if unique:
        stream = copy.deepcopy(stream)  # stamped in place
    index = PolicyIndex()
    for p in policies:
        index.upsert(p)
    for r in stream:  # compile every plan first, as the server's background task does
        index.plan(RequestCoordinates.of(r))
    while index.compile_pending():
        pass
    allowed = sum(evaluate_validating(r, index.plan(RequestCoordinates.of(r)), lookups).allowed for r in stream)
    plans = [index.plan(RequestCoordinates.of(r)) for r in stream]
    projections = [p.projections for p in plans]

    def project(on: bool) -> None:
        for plan, projection in zip(plans, projections, strict=True):
            plan.projections = projection if on else {}

    memo = DecisionMemo()
    sizes = {id(r): len(json.dumps(r, separators=(",", ":"))) for r in stream}

    # As the server calls the engine: with the inline work budget's estimate of the request (the variants below
    # are the engine alone: without projection a Pod of 3 containers estimates over the budget).
    def memoized(r: dict[str, Any]) -> Any:
        return evaluate_validating(r, index.plan(RequestCoordinates.of(r)), lookups, memo=memo,
                                   work_budget=INLINE_WORK_BUDGET, body_bytes=sizes[id(r)])

    def planned(r: dict[str, Any]) -> Any:
        return evaluate_validating(r, index.plan(RequestCoordinates.of(r)), lookups)

    def per_policy(r: dict[str, Any]) -> Any:
        return evaluate_validating(r, index.candidates(RequestCoordinates.of(r)), lookups)

    memo_us, projected_us, unprojected_us, per_policy_us = _per_request(
        [(memoized, lambda: project(True)), (planned, lambda: project(True)), (planned, lambda: project(False)),
         (per_policy, lambda: project(True))], stream, seconds, unique=unique)
    nodes_whole, nodes_bound = _bound_nodes(plans, stream)
    return {"us_per_review": memo_us, "us_per_review_without_memo": projected_us,
            "memo_hit_ratio": round(memo.hits / max(1, memo.hits + memo.misses), 3),
            "us_per_review_without_projection": unprojected_us,
            "us_per_review_per_policy_path": per_policy_us, "requests": len(stream),
            "allowed_share": round(allowed / len(stream), 3), "policies": len(policies),
            "object_nodes": nodes_whole, "object_nodes_bound": nodes_bound}


def run(seconds: float) -> dict[str, Any]:
    """Every stream × policy set; returns ``{name: figures}``."""
    policies, lookups = shipped()
    distinct = distinct_stream()
    out = {
        "replica/shipped": measure(policies, lookups, replica_stream(), seconds),
        "distinct/shipped": measure(policies, lookups, distinct, seconds, unique=True),
        "corpus/shipped": measure(policies, lookups, corpus_stream(), seconds),
        "large/shipped": measure(policies, lookups, large_stream(), seconds),
    }
    for n in (22, 100, 200):
        out[f"distinct/pod-security-x{n}"] = measure(pod_security_variants(n), lookups, distinct, seconds,
                                                     unique=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per point (default 3)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    figures = run(args.seconds)
    print(f"{'stream/policies':<28} {'policies':>8} {'requests':>8} {'allowed':>8} {'µs/review':>10} {'memo hits':>9} "
          f"{'no memo':>8} {'no projection':>13} {'per-policy path':>15} {'object nodes (bound)':>21}")
    for name, f in figures.items():
        nodes = f"{f['object_nodes']:.0f} ({f['object_nodes_bound']:.0f})"
        print(f"{name:<28} {f['policies']:>8} {f['requests']:>8} {f['allowed_share']:>8.2f} "
              f"{f['us_per_review']:>10.1f} {f['memo_hit_ratio']:>9.2f} {f['us_per_review_without_memo']:>8.1f} "
              f"{f['us_per_review_without_projection']:>13.1f} {f['us_per_review_per_policy_path']:>15.1f} {nodes:>21}")
    sweep = [figures[f"distinct/pod-security-x{n}"]["us_per_review"] for n in (22, 100, 200)]
    print(f"\npolicy-count sweep (22 → 100 → 200 Pod policies): {sweep[0]:.0f} → {sweep[1]:.0f} → {sweep[2]:.0f} µs"
          f" ({sweep[2] / sweep[0]:.1f}x for 9.1x the policies)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
