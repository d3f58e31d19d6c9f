"""Informer benchmark: initial sync, event throughput and cache memory, against the HTTP fake API server.

    python bench/informer.py [--objects 10000] [--events 10000]

Measures, through the real KubeListerWatcher (kubernetes_asyncio ApiClient over HTTP on 127.0.0.1)
and SharedInformer:
  * initial sync of N ConfigMaps of ~2 KB (paginated LIST, 500 per page);
  * MODIFIED events applied per second (a burst of E events over 100 objects);
  * cache memory (tracemalloc, after the sync) versus the compact JSON bytes of the objects.
Goals (issue 2): sync <= 2 s, >= 20k events/s, memory <= 3x JSON bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakeapi.server import FakeApiServer
from webhook.informer import ReflectorOptions, SharedInformer
from webhook.kube.client import api_client_for_url
from webhook.kube.listwatch import KubeListerWatcher


def configmap(i: int, version: int = 0) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i:05d}", "namespace": f"ns-{i % 20}", "labels": {"app": f"a{i % 7}"}},
            "data": {"payload": ("x" * 1900) + str(version)}}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


async def main(objects: int, events: int) -> int:
    fake = FakeApiServer()
    await fake.start()
    for i in range(objects):
        fake.apply("configmaps", configmap(i))
    json_bytes = sum(len(json.dumps(o, separators=(",", ":"))) for o in fake.state("configmaps").values())
    client = api_client_for_url(fake.url)
    inf = SharedInformer(KubeListerWatcher(client, group="", version="v1", plural="configmaps"),
                         name="configmaps", reflector_options=ReflectorOptions(min_watch_timeout=300))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    await inf.start()
    await inf.wait_for_sync(60)
    sync_s = time.perf_counter() - started
    # Cache memory: what the informer holds after the sync (objects, indices); the fake's own copies
    # were allocated before tracing started.
    await asyncio.sleep(0.2)
    cache_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()

    before = inf.events_applied
    started = time.perf_counter()
    for n in range(events):
        fake.apply("configmaps", configmap(n % 100, version=n + 1))
    while inf.events_applied - before < events:
        await asyncio.sleep(0.001)
    events_s = events / (time.perf_counter() - started)
    await inf.stop()
    await client.close()
    await fake.stop()

    rows = [
        ("initial sync", f"{objects} ConfigMaps (~2 KB)", f"{sync_s:.2f} s", "<= 2 s", sync_s <= 2),
        ("event throughput", f"{events} MODIFIED", f"{events_s:,.0f} events/s", ">= 20,000/s", events_s >= 20000),
        ("cache memory", f"{json_bytes / 1e6:.1f} MB of JSON", f"{cache_bytes / 1e6:.1f} MB "
         f"({cache_bytes / json_bytes:.2f}x)", "<= 3x", cache_bytes <= 3 * json_bytes),
    ]
    print(f"machine: {cpu_model()}, {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.system()} {platform.release()}")
    print(f"{'metric':<18} {'workload':<26} {'measured':<26} {'goal':<12} met")
    for metric, workload, measured, goal, met in rows:
        print(f"{metric:<18} {workload:<26} {measured:<26} {goal:<12} {'yes' if met else 'NO'}")
    print("note: event throughput includes the fake server producing the events in the same process")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--objects", type=int, default=10_000)
    p.add_argument("--events", type=int, default=10_000)
    a = p.parse_args()
    sys.exit(asyncio.run(main(a.objects, a.events)))
