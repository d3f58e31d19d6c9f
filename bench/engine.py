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
work minus JSON parsing and response building), in process CPU time; the per-policy path (no plan, every
policy evaluated on its own) is timed beside it. Figures are medians of
3 passes. Ratios, not absolute numbers, are what compare across machines; bench/admission.py puts them
next to the bare server's CPU per request measured in the same run.
"""

from __future__ import annotations

import argparse
import copy
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

CORPUS = ROOT / "tests" / "fixtures" / "kyverno-pod-security-cel"
PAYLOAD = ROOT / "bench" / "reference" / "make_payload.py"


def documents(root: Path) -> list[dict[str, Any]]:
    """Every YAML document under ``root`` (recursively)."""
    out: list[dict[str, Any]] = []
    for path in sorted(root.rglob("*.yaml")):
        out.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    return out


def shipped() -> tuple[list[dict[str, Any]], InMemoryLookups]:
    """The policies under policies/ and the ConfigMaps/Namespaces beside them."""
    docs = documents(ROOT / "policies")
    policies = [d for d in docs if d.get("kind") in ("ClusterAdmissionPolicy", "AdmissionPolicy")]
    lookups = InMemoryLookups(namespaces=[d for d in docs if d.get("kind") == "Namespace"],
                              configmaps=[d for d in docs if d.get("kind") == "ConfigMap"])
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


def distinct_stream(n: int = 128) -> list[dict[str, Any]]:
    """``n`` different compliant Pods: the reference Pod with its name, labels, images, tags and
    container count varied, so every request has a different object and most are allowed."""
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
            container["image"] = f"registry.example.com/team/app-{i % 11}:{i}.{c}"
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


def _per_request(fn: Any, stream: list[dict[str, Any]], seconds: float) -> float:
    passes = []
    for _ in range(3):
        n = 0
        t0 = time.process_time()
        while time.process_time() - t0 < seconds / 3:
            for r in stream:
                fn(r)
            n += len(stream)
        passes.append((time.process_time() - t0) / n * 1e6)
    return round(statistics.median(passes), 1)


def measure(policies: list[dict[str, Any]], lookups: InMemoryLookups, stream: list[dict[str, Any]],
            seconds: float) -> dict[str, Any]:
    """CPU µs per request on the planned path (the server's) and the per-policy path (median of 3 passes)."""
    index = PolicyIndex()
    for p in policies:
        index.upsert(p)
    for r in stream:  # compile every plan first, as the server's background task does
        index.plan(RequestCoordinates.of(r))
    while index.compile_pending():
        pass
    allowed = sum(evaluate_validating(r, index.plan(RequestCoordinates.of(r)), lookups).allowed for r in stream)
    planned = _per_request(lambda r: evaluate_validating(r, index.plan(RequestCoordinates.of(r)), lookups),
                           stream, seconds)
    per_policy = _per_request(lambda r: evaluate_validating(r, index.candidates(RequestCoordinates.of(r)), lookups),
                              stream, seconds)
    return {"us_per_review": planned, "us_per_review_per_policy_path": per_policy, "requests": len(stream),
            "allowed_share": round(allowed / len(stream), 3), "policies": len(policies)}


def run(seconds: float) -> dict[str, Any]:
    """Every stream × policy set; returns ``{name: figures}``."""
    policies, lookups = shipped()
    distinct = distinct_stream()
    out = {
        "replica/shipped": measure(policies, lookups, replica_stream(), seconds),
        "distinct/shipped": measure(policies, lookups, distinct, seconds),
        "corpus/shipped": measure(policies, lookups, corpus_stream(), seconds),
        "large/shipped": measure(policies, lookups, large_stream(), seconds),
    }
    for n in (22, 100, 200):
        out[f"distinct/pod-security-x{n}"] = measure(pod_security_variants(n), lookups, distinct, seconds)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per point (default 3)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    figures = run(args.seconds)
    print(f"{'stream/policies':<28} {'policies':>8} {'requests':>8} {'allowed':>8} {'µs/review':>10} "
          f"{'per-policy path':>15}")
    for name, f in figures.items():
        print(f"{name:<28} {f['policies']:>8} {f['requests']:>8} {f['allowed_share']:>8.2f} "
              f"{f['us_per_review']:>10.1f} {f['us_per_review_per_policy_path']:>15.1f}")
    sweep = [figures[f"distinct/pod-security-x{n}"]["us_per_review"] for n in (22, 100, 200)]
    print(f"\npolicy-count sweep (22 → 100 → 200 Pod policies): {sweep[0]:.0f} → {sweep[1]:.0f} → {sweep[2]:.0f} µs"
          f" ({sweep[2] / sweep[0]:.1f}x for 9.1x the policies)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
