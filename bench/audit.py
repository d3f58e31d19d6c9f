"""Background audit benchmark: 10,000 Pods in 100 namespaces, from start to complete PolicyReports.

    python bench/audit.py [--pods 10000] [--namespaces 100]

The fake API server runs in a child process (so its own copy of the objects does not count in this
process's RSS); this process runs the production path: discovery, the dynamic pods informer
(KubeListerWatcher over kubernetes_asyncio), the Auditor evaluating a two-validation background policy
with the admission engine, and the PolicyReportWriter writing one PolicyReport per namespace over HTTP.

Measures:
  * seconds from start to complete reports (every namespace's report written, results = pods x 2);
  * RSS growth per cached object (cache + results + report state + allocator high water;
    /proc/self/statm), JSON bytes per object for comparison, and with --tracemalloc the live Python
    heap per object once reports are complete;
  * object evaluations per second after a policy edit (full re-evaluation of every Pod), and the
    seconds until the rewritten reports are on the server;
  * the one-shot path on the same server: ``tollgate audit --kubeconfig`` as a user runs it (a subprocess:
    discovery, the Pods listed once in pages of 500, the same evaluation, the reports printed), its seconds
    and their ratio to the server's start-to-complete-reports (``--no-once`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakeapi.server import FakeApiServer
from webhook.audit.auditor import Auditor
from webhook.informer import ReflectorOptions
from webhook.informer.discovered import DynamicInformers
from webhook.informer.dynamic import DynamicInformerFactory
from webhook.informer.gvr import GVR
from webhook.kube.client import api_client_for_url
from webhook.kube.discovery import Discovery
from webhook.kube.listwatch import KubeListerWatcher
from webhook.kube.reports import PolicyReportWriter, call_json
from webhook.policy import InMemoryLookups

NO_PRIV = {"expression": "object.spec.containers.all(c, !(c.?securityContext.?privileged.orValue(false)))",
           "message": "privileged containers are not allowed"}
LABELLED = {"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
            "message": "a team label is required"}


def pod(i: int, namespaces: int) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": f"registry.example.com/app:{i % 13}",
                                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                                 "env": [{"name": f"E{j}", "value": "v" * 20} for j in range(5)]}
    if i % 7 == 0:  # 7 is coprime with the namespace count: every namespace has some
        container["securityContext"] = {"privileged": True}
    labels = {"app": f"a{i % 50}"} | ({"team": "t"} if i % 3 else {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i:05d}", "namespace": f"ns-{i % namespaces:03d}", "labels": labels,
                         "uid": f"uid-{i}", "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"containers": [container], "nodeName": f"node-{i % 40}"}}


def policy(message: str) -> dict[str, Any]:
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": "ClusterAdmissionPolicy",
            "metadata": {"name": "baseline"},
            "spec": {"background": True, "match": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]},
                     "validations": [{**NO_PRIV, "message": message}, LABELLED]}}


async def serve(pods: int, namespaces: int) -> None:
    fake = FakeApiServer()
    await fake.start()
    for i in range(pods):
        fake.apply("pods", pod(i, namespaces))
    print(fake.url, flush=True)
    await asyncio.Event().wait()


def rss() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


async def wait(cond: Any, timeout: float = 300.0) -> float:
    start = time.perf_counter()
    while not cond():
        if time.perf_counter() - start > timeout:
            raise TimeoutError("benchmark did not converge")
        await asyncio.sleep(0.01)
    return time.perf_counter() - start


def once(url: str, pods: int, expected: int) -> dict[str, Any]:
    """``tollgate audit --kubeconfig`` against the benchmark's server, timed from process start to exit."""
    import yaml

    with tempfile.TemporaryDirectory(prefix="tollgate-bench-") as tmp:
        kubeconfig, policies = Path(tmp) / "kubeconfig", Path(tmp) / "policy.yaml"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "bench",
            "clusters": [{"name": "bench", "cluster": {"server": url}}], "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "u"}}]}))
        policies.write_text(yaml.safe_dump(policy("privileged containers are not allowed")))
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "webhook", "audit", "-p", str(policies), "--kubeconfig",
                               str(kubeconfig), "-o", "json"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[1])
        seconds = time.perf_counter() - started
    reports = json.loads(proc.stdout)["items"]
    rows = sum(len(r["results"]) for r in reports)
    assert proc.returncode == 1 and rows == expected, (proc.returncode, rows, proc.stderr)
    return {"once_process_s": round(seconds, 2), "once_evaluations_per_s": round(pods / seconds)}


async def main(pods: int, namespaces: int, trace: bool = False, one_shot: bool = True) -> int:
    child = subprocess.Popen([sys.executable, __file__, "--serve", "--pods", str(pods), "--namespaces",
                              str(namespaces)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        api = api_client_for_url(url)
        await call_json(api, "POST", "/apis/tollgate.dev/v1alpha1/clusteradmissionpolicies",
                        policy("privileged containers are not allowed"))
        opts = ReflectorOptions(min_watch_timeout=300)

        def lw(gvr: GVR) -> KubeListerWatcher:
            return KubeListerWatcher(api, group=gvr.group, version=gvr.version, plural=gvr.resource)

        factory = DynamicInformerFactory(lw, reflector_options=opts)
        dynamic = DynamicInformers(factory, Discovery(api).snapshot, refresh_interval=0)
        writer = PolicyReportWriter(api, is_leader=lambda: True, batch_delay=0.1, writes_per_second=50, burst=100)
        auditor = Auditor(dynamic, InMemoryLookups(), writer.submit)
        policy_obj = (await call_json(api, "GET", "/apis/tollgate.dev/v1alpha1/clusteradmissionpolicies/baseline"))
        base_rss = rss()
        if trace:
            tracemalloc.start()
        started = time.perf_counter()
        await dynamic.start()
        await auditor.start()
        await writer.start()
        auditor.upsert_policy(policy_obj)
        expected = pods * 2

        def complete() -> bool:
            return auditor.idle() and writer.idle() and writer.writes >= namespaces

        pods_gvr = GVR("", "v1", "pods")
        await wait(lambda: (i := factory.informer(pods_gvr)) is not None and i.has_synced())
        synced = time.perf_counter() - started
        await wait(lambda: auditor.evaluations >= pods and auditor.idle())
        evaluated = time.perf_counter() - started
        try:
            await wait(complete)
        except TimeoutError:
            print(json.dumps({"auditor_idle": auditor.idle(), "writer_idle": writer.idle(),
                              "desired": len(writer.desired()), "writes": writer.writes, "errors": writer.errors,
                              "evaluations": auditor.evaluations, "running": [str(g) for g in factory.informers],
                              "results": sum(len(r["results"]) for r in writer.desired().values())}),
                  file=sys.stderr)
            raise
        to_reports = time.perf_counter() - started
        grown = rss() - base_rss
        live = tracemalloc.get_traced_memory()[0] if trace else 0
        tracemalloc.stop()
        inf = factory.informer(GVR("", "v1", "pods"))
        assert inf is not None and len(inf.indexer) == pods
        usage = factory.usage()[GVR("", "v1", "pods")]
        on_server = await call_json(api, "GET", "/apis/wgpolicyk8s.io/v1alpha2/policyreports")
        assert sum(len(r["results"]) for r in on_server["items"]) == expected

        # Policy edit: a new message on the first validation -> every Pod re-evaluated, failing rows change.
        evals, writes = auditor.evaluations, writer.writes
        edited = json.loads(json.dumps(policy_obj))
        edited["spec"]["validations"][0]["message"] = "no privileged containers, please"
        edit_start = time.perf_counter()
        auditor.upsert_policy(edited)
        await wait(lambda: auditor.evaluations - evals >= pods and auditor.idle())
        reeval = time.perf_counter() - edit_start
        changed = len({i % namespaces for i in range(0, pods, 7)})  # namespaces with a failing first validation
        await wait(lambda: writer.idle() and writer.writes - writes >= changed)
        rewritten = time.perf_counter() - edit_start

        await auditor.stop()
        await writer.stop()
        await dynamic.stop()
        await api.close()
        one = await asyncio.to_thread(once, url, pods, expected) if one_shot else {}
        if one:
            one["once_to_server_complete_reports_ratio"] = round(one["once_process_s"] / to_reports, 2)
        print(json.dumps({
            "pods": pods, "namespaces": namespaces, "results": expected,
            "start_to_informer_synced_s": round(synced, 2),
            "start_to_all_evaluated_s": round(evaluated, 2),
            "start_to_complete_reports_s": round(to_reports, 2),
            "rss_growth_bytes_per_object": round(grown / pods),
            "json_bytes_per_object": round(usage.bytes / pods),
            **({"live_python_heap_bytes_per_object": round(live / pods)} if trace else {}),
            "policy_edit_evaluations_per_s": round(pods / reeval),
            "policy_edit_to_rewritten_reports_s": round(rewritten, 2),
            "report_writes": writer.writes,
            **one,
            "python": sys.version.split()[0],
        }, indent=2))
    finally:
        child.terminate()
        child.wait()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--tracemalloc", action="store_true",
                        help="also report the live Python heap per object (slower; timings not comparable)")
    parser.add_argument("--no-once", action="store_true", help="skip the one-shot tollgate audit --kubeconfig run")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.serve:
        asyncio.run(serve(a.pods, a.namespaces))
    else:
        sys.exit(asyncio.run(main(a.pods, a.namespaces, a.tracemalloc, not a.no_once)))
