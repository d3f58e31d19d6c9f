"""Cost of reading ``spec.references`` caches, in process (no HTTP): microseconds of CPU per review.

    python bench/references.py [--seconds 2] [--json out.json]

The two shipped referential examples, each over caches of growing size, through the server's
``InformerLookups`` over real Indexers (namespace index included):

  unique-ingress-host       a new Ingress with a fresh host, as shipped: ``resource.ByIndex`` on the
                            declared ``host`` index (one Indexer lookup per host)
  unique-ingress-host/List  the same policy written with ``resource.List(..., "")``: lists every
                            Ingress in the cluster per review (the worst case: nothing short-circuits)
  service-selector          a Service in one of 100 namespaces: ``resource.List(..., namespace)``
                            reads that namespace's Deployments through the namespace index

Baseline in the same run: the same review against a policy with the same match and a constant
``true`` validation (the engine's floor for one policy). Also reported: CPU per object to insert it
into the caches (Indexer upsert, including the ``host`` index's CEL). Figures are medians of 3
passes; a review that does not pass (e.g. the iteration budget ran out) is reported as its result.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webhook.caches.lookups import InformerLookups  # noqa: E402
from webhook.informer import NAMESPACE_INDEX  # noqa: E402
from webhook.informer.store import Indexer, namespace_index  # noqa: E402
from webhook.policy import PolicyIndex, RequestCoordinates, evaluate_validating  # noqa: E402
from webhook.policy.model import Reference, ReferenceIndex, parse_policy  # noqa: E402
from webhook.policy.reference_indexes import index_values  # noqa: E402

EXAMPLES = ROOT / "policies" / "examples"
SIZES = (10, 100, 1000, 5000)
NAMESPACES = 100


class _Cache:
    """Just enough of a SharedInformer for InformerLookups: an Indexer that has synced, with the indexes
    ``webhook.caches.references`` would install for ``indexes``."""

    def __init__(self, objects: list[dict[str, Any]], indexes: tuple[ReferenceIndex, ...] = ()) -> None:
        self.indexer = Indexer({NAMESPACE_INDEX: namespace_index,
                                **{i.indexer_name: functools.partial(index_values, i) for i in indexes}})
        for obj in objects:
            self.indexer.upsert(obj)

    def has_synced(self) -> bool:
        return True


def _policy(example: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((EXAMPLES / example / "policy.yaml").read_text()) if d)


def _by_list(policy: dict[str, Any]) -> dict[str, Any]:
    """unique-ingress-host written with resource.List over every namespace instead of the index."""
    listed = copy.deepcopy(policy)
    listed["metadata"]["name"] = "unique-ingress-host-list"
    listed["spec"]["variables"][1]["expression"] = (
        'variables.hosts.filter(h, resource.List("networking.k8s.io/v1", "ingresses", "").items.exists(i, '
        '!(i.metadata.namespace == request.namespace && i.metadata.name == request.name) && '
        'i.spec.?rules.orValue([]).exists(r, r.?host.orValue("") == h)))')
    return listed


def _floor(policy: dict[str, Any]) -> dict[str, Any]:
    floor = copy.deepcopy(policy)
    floor["metadata"]["name"] = "floor"
    spec = floor["spec"]
    spec.pop("references", None)
    spec["variables"], spec["matchConditions"], spec["validations"] = [], [], [{"expression": "true"}]
    return floor


def _ingress(i: int) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": f"ing-{i}", "namespace": f"ns-{i % NAMESPACES}"},
            "spec": {"rules": [{"host": f"app-{i}.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": f"svc-{i}", "port": {"number": 80}}}}]}}]}}


def _deployment(i: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": f"dep-{i}", "namespace": f"ns-{i % NAMESPACES}"},
            "spec": {"selector": {"matchLabels": {"app": f"app-{i}"}},
                     "template": {"metadata": {"labels": {"app": f"app-{i}", "tier": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.example.com/x:1"}]}}}}


def _request(obj: dict[str, Any], group: str, resource: str) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"uid": "u", "kind": {"group": group, "version": "v1", "kind": obj["kind"]},
            "resource": {"group": group, "version": "v1", "resource": resource}, "namespace": meta["namespace"],
            "name": meta["name"], "operation": "CREATE", "userInfo": {"username": "bench"}, "object": obj}


def _time(policy: dict[str, Any], request: dict[str, Any], lookups: InformerLookups, seconds: float) -> float | str:
    index = PolicyIndex()
    index.upsert(policy)
    coords = RequestCoordinates.of(request)
    candidates = index.candidates(coords)
    outcome = evaluate_validating(request, candidates, lookups)
    if not outcome.allowed:  # the reviews are chosen to pass (the full scan is timed): anything else is reported
        return f"{outcome.results[0].result}: {outcome.results[0].message}"
    passes = []
    for _ in range(3):
        n, start, end = 0, time.process_time(), time.perf_counter() + seconds / 3
        while time.perf_counter() < end:
            evaluate_validating(request, candidates, lookups)
            n += 1
        passes.append((time.process_time() - start) / n * 1e6)
    return statistics.median(passes)


def main() -> None:
    """Run both examples over every cache size; print a table and optionally write JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=2.0, help="seconds per point (default 2)")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args()
    unique, service = _policy("unique-ingress-host"), _policy("service-selector-matches-deployment")
    ingresses = Reference("networking.k8s.io/v1", "ingresses")
    deployments = Reference("apps/v1", "deployments")
    new_ingress = _ingress(10**6)
    new_ingress["metadata"]["namespace"] = "ns-0"
    service_obj = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "ns-1"},
                   "spec": {"selector": {"app": "app-1", "tier": "web"}, "ports": [{"port": 80}]}}
    empty = _Cache([])
    host_index = next(r for r in parse_policy(unique).references if r == ingresses).indexes
    ingress_req = _request(new_ingress, "networking.k8s.io", "ingresses")
    service_req = _request(service_obj, "", "services")
    rows = []
    for size in SIZES:
        start = time.process_time()
        caches = {ingresses: _Cache([_ingress(i) for i in range(size)], host_index),
                  deployments: _Cache([_deployment(i) for i in range(size)])}
        indexing = (time.process_time() - start) / (2 * size) * 1e6
        lookups = InformerLookups(empty, empty, lambda: True,  # type: ignore[arg-type]
                                  lambda ref, c=caches: c.get(ref))  # type: ignore[misc]
        row: dict[str, Any] = {
            "objects": size, "cache_insert_us_per_object": indexing,
            "unique_ingress_host_by_index_us": _time(unique, ingress_req, lookups, args.seconds),
            "unique_ingress_host_by_list_us": _time(_by_list(unique), ingress_req, lookups, args.seconds),
            "unique_ingress_floor_us": _time(_floor(unique), ingress_req, lookups, args.seconds),
            "service_selector_us": _time(service, service_req, lookups, args.seconds),
            "service_floor_us": _time(_floor(service), service_req, lookups, args.seconds),
            "deployments_in_namespace": sum(1 for i in range(size) if i % NAMESPACES == 1)}
        rows.append(row)
        print(f"{size:>6} objects: " + ", ".join(
            f"{k.removesuffix('_us')} {v:.1f} us" if isinstance(v, float) else f"{k.removesuffix('_us')} {v}"
            for k, v in row.items() if k != "objects"), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"namespaces": NAMESPACES, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
