"""Policy-engine cost of a Pod with N containers under every shipped policy (issue #13).

    python bench/containers.py [--sizes 10,100,1000,3000,10000] [--root DIR]

For each N, in a fresh subprocess (so peak RSS is per N): compile policies/pod-security/** and
policies/examples/** (with their ConfigMaps and Namespaces), then time one validating and one
mutating evaluation of a CREATE of a Pod with N containers (each with an image, resources and a
securityContext, as the Pod Security policies read them). Prints engine milliseconds (median of 3)
and the process's peak RSS. ``--root`` points at another checkout (e.g. an older commit exported
with ``git archive``) to measure before/after with the same script.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def pod(n: int) -> dict[str, object]:
    containers = [
        {
            "name": f"c{i}",
            "image": f"registry.example.com/app/c{i}:1.{i}",
            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "50m", "memory": "32Mi"}},
            "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
            "ports": [{"containerPort": 8000 + i % 1000}],
        }
        for i in range(n)
    ]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "big", "namespace": "default", "labels": {"team": "a"}},
            "spec": {"containers": containers, "securityContext": {"runAsNonRoot": True}}}


def child(root: Path, n: int) -> dict[str, float]:
    sys.path.insert(0, str(root))
    from webhook.files.requests import build_request
    from webhook.files.yamlio import load_paths
    from webhook.policy.engine import evaluate_mutating, evaluate_validating
    from webhook.policy.index import PolicyIndex
    from webhook.policy.lookups import InMemoryLookups

    dirs = [root / "policies" / "pod-security", root / "policies" / "examples"]

    def _docs_of(paths: list[Path], kinds: set[str]) -> list[dict[str, Any]]:
        return [doc.obj for doc in load_paths(paths) if doc.kind in kinds]

    index = PolicyIndex()
    compiled = []
    for doc in _docs_of(dirs, {"ClusterAdmissionPolicy", "AdmissionPolicy"}):
        state = index.upsert(doc)
        if state.result.policy is not None:
            compiled.append(state.result.policy)
    lookups = InMemoryLookups(namespaces=_docs_of(dirs, {"Namespace"}), configmaps=_docs_of(dirs, {"ConfigMap"}))
    request = build_request(pod(n), operation="CREATE",
                            user_info={"username": "bench", "groups": ["system:authenticated"]})
    times = []
    for _ in range(3):
        start = time.perf_counter()
        evaluate_validating(request, compiled, lookups)
        evaluate_mutating(request, compiled, lookups)
        times.append((time.perf_counter() - start) * 1000)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"n": n, "policies": len(compiled), "engine_ms": statistics.median(times), "peak_rss_mb": rss_mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,3000,10000")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.root.resolve(), args.child)))
        return 0
    print(f"{'N':>6} {'policies':>8} {'engine ms':>10} {'peak RSS MB':>12}")
    for n in (int(s) for s in args.sizes.split(",")):
        proc = subprocess.run([sys.executable, __file__, "--root", str(args.root), "--child", str(n)],
                              capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            print(f"{n:>6} failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr else proc.returncode}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{r['n']:>6} {r['policies']:>8} {r['engine_ms']:>10.1f} {r['peak_rss_mb']:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
