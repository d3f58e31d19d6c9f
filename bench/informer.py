"""Informer benchmark at scale: sync time against raw fetch+parse, bytes per object, peak RSS.

    python bench/informer.py [--objects 10000 50000 100000] [--repeat 2]
    python bench/informer.py --instructions [--objects 20000]


For each size N, the fake API server (tests/fakeapi) runs in a process of its own holding N ConfigMaps
of ~1 KB (~710 B without managedFields), and each measurement runs in a fresh client process:

* ``raw``: the same pages (limit=500, continue) fetched through KubeListerWatcher.list (kubernetes_asyncio
  ApiClient over HTTP, orjson parse), nothing kept: the floor;
* ``list``: a SharedInformer synced through the paginated LIST (WatchList off), compact store;
* ``watchlist``: the same through WatchList (sendInitialEvents), compact store;
* ``list-dict``: the LIST path keeping parsed dicts (compact off), for comparison.

Every informer drops managedFields on ingest and has one cheap handler. Per run: sync seconds (start to
``has_synced``), the client CPU until the handler was also told of every object (its initial adds are
decoded from the store after the sync), RSS before start, peak RSS while syncing (sampled every 2 ms),
steady RSS once the handler caught up (after a GC), and the transformed JSON bytes kept. Times are the
best of ``--repeat`` runs, wall clock and the client thread's CPU time (the fake server runs in its own
process, and on a shared machine the wall clock of either side moves with the load; the CPU ratio is
the steadier figure). Each row ends with the 1-minute load average when it was printed.
``--instructions`` counts instead of timing (``valgrind --tool=callgrind``, deterministic where CPU time on a
shared machine moves by +-20 % between runs): the raw and list clients run under callgrind against the same
server, which zeroes its counters when the client calls ``os.getsid`` (the timed window starts) and dumps them at
each ``os.getpgid`` (the store synced; the handler caught up). Printed per object: raw fetch+parse, the sync
window and the CPU until the handler caught up, and their ratios to raw. Repeated runs of the same code differ
by up to 0.3k instructions per object at 20k objects (the handler task's first time slice falls inside or
outside the sync window); under valgrind a 100k run takes minutes.
Goals (issue 22), at 100k objects: RSS per cached object <= 2x its transformed JSON size; peak during
sync <= 1.2x steady (both over the process's RSS before the informer started); sync <= 1.2x raw
fetch+parse of the same pages, same run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAGE = 500
PAGE_SIZE_BYTES = os.sysconf("SC_PAGE_SIZE")


def configmap(i: int) -> dict[str, Any]:
    """A ~1 KB ConfigMap: ~710 B of it without managedFields."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i:06d}", "namespace": f"ns-{i % 50}", "labels": {"app": f"a{i % 7}",
                                                                                        "tier": "backend"},
                         "annotations": {"owner": "team-x"},
                         "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                                            "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
                                            "fieldsType": "FieldsV1",
                                            "fieldsV1": {"f:data": {".": {}, "f:payload": {}},
                                                         "f:metadata": {"f:labels": {".": {}, "f:app": {},
                                                                                     "f:tier": {}}}}}]},
            "data": {"payload": "x" * 400}}


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_SIZE_BYTES


# -- the server process ----------------------------------------------------------------------------------------------

async def serve(objects: int) -> None:
    from tests.fakeapi.server import FakeApiServer

    fake = FakeApiServer()
    for i in range(objects):
        fake._store("configmaps", configmap(i))
    fake.history.clear()
    gc.collect()
    gc.freeze()  # the fake's 100k objects never change: no GC pauses of the server inside a client's timing
    await fake.start()
    print(fake.port, flush=True)
    await asyncio.Event().wait()


# -- the client processes --------------------------------------------------------------------------------------------

class Sampler:
    """Peak RSS of this process, sampled every 2 ms in a thread (off: only the RSS at the end, for --instructions,
    whose counts would include the thread's)."""

    def __init__(self, on: bool = True) -> None:
        self._on = on
        self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, rss())

    def __enter__(self) -> Sampler:
        if self._on:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._on:
            self._thread.join()
        self.peak = max(self.peak, rss())


async def measure(url: str, mode: str, sample: bool = True) -> dict[str, Any]:
    import orjson

    from webhook.informer import ListOptions, ReflectorOptions, ResourceEventHandlerFuncs, SharedInformer
    from webhook.informer.store import decode
    from webhook.kube.client import api_client_for_url
    from webhook.kube.listwatch import KubeListerWatcher

    if not sample:  # --instructions: valgrind runs ~50x slower, and the handler's time slices are wall-clock
        from webhook.informer import handlers
        handlers.HANDLER_TIME_SLICE *= 50  # as many objects per slice as at native speed
    client = api_client_for_url(url)
    lw = KubeListerWatcher(client, group="", version="v1", plural="configmaps")
    # Warm the connection pool and the code paths with one small page.
    await lw.list(ListOptions(resource_version="0", limit=1))
    gc.collect()
    base = rss()
    out: dict[str, Any] = {"mode": mode}
    with Sampler(sample) as sampler:
        os.getsid(0)  # a marker for --instructions (callgrind zeroes its counters here)
        started = time.perf_counter()
        cpu = time.thread_time()  # this thread only: the client's own work (not the sampler, not the server)
        if mode == "raw":
            count, token = 0, None
            while True:
                page = await lw.list(ListOptions(resource_version=None if token else "0", limit=PAGE,
                                                 continue_token=token))
                count += len(page.items)
                token = page.continue_token
                del page
                if not token:
                    break
            out["sync_s"] = time.perf_counter() - started
            out["cpu_s"] = time.thread_time() - cpu
            os.getpgid(0)  # a marker for --instructions (callgrind dumps the window's counts here)
            out["objects"] = count
        else:
            inf = SharedInformer(lw, name="configmaps", compact=mode != "list-dict",
                                 reflector_options=ReflectorOptions(use_watch_list=mode == "watchlist"))
            seen = [0]
            inf.add_event_handler(ResourceEventHandlerFuncs(add=lambda _o, _i: seen.__setitem__(0, seen[0] + 1),
                                                            sync_calls="loop"))
            await inf.start()
            await inf.wait_for_sync()
            out["sync_s"] = time.perf_counter() - started
            out["cpu_s"] = time.thread_time() - cpu
            os.getpgid(0)  # --instructions: the sync window's counts
            while not inf.handlers_idle():
                await asyncio.sleep(0.01)
            out["delivered_s"] = time.perf_counter() - started
            out["cpu_delivered_s"] = time.thread_time() - cpu
            os.getpgid(0)  # --instructions: the counts until the handler caught up
            out["objects"] = len(inf.indexer)
            out["used_watch_list"] = inf.reflector.used_watch_list
    out["peak_rss"] = sampler.peak - base
    if mode != "raw":
        gc.collect()
        await asyncio.sleep(0.2)
        out["steady_rss"] = rss() - base
        out["json_bytes"] = sum(len(orjson.dumps(decode(v))) for _, v in inf.indexer.list_stored())
        # Lookup latency (O(1): the same at every size).
        keys = inf.indexer.list_keys()[:: max(1, len(inf.indexer) // 1000)]
        t = time.perf_counter()
        for _ in range(10):
            for k in keys:
                inf.indexer.get_by_key(k)
        out["lookup_us"] = (time.perf_counter() - t) / (10 * len(keys)) * 1e6
        await inf.stop()
    out["base_rss"] = base
    await client.close()
    return out


# -- the driver ------------------------------------------------------------------------------------------------------

def run_client(url: str, mode: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--client", url, mode], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def count_instructions(url: str, mode: str, scratch: Path) -> list[int]:
    """Instructions of ``mode``'s client between its markers: [sync window, sync to caught up] (raw: one)."""
    out = scratch / f"callgrind.{mode}"
    proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--zero-before=getsid",
                           "--dump-before=getpgid", "--dump-instr=no", "--compress-strings=no",
                           sys.executable, __file__, "--client", url, mode, "--no-sampler"],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    counts = []
    for part in range(1, 3):
        path = Path(f"{out}.{part}")
        if not path.exists():
            break
        for line in path.read_text().splitlines():
            if line.startswith("summary:"):
                counts.append(int(line.split()[1]))
                break
        path.unlink()
    Path(out).unlink(missing_ok=True)
    return counts


def main_instructions(sizes: list[int]) -> int:
    import tempfile

    print(f"machine: {cpu_model()}, {platform.python_implementation()} {platform.python_version()};"
          " instructions per object under callgrind")
    print("| objects | raw fetch+parse | list: sync | ratio | list: until the handler caught up | ratio |")
    print("|---|--:|--:|--:|--:|--:|")
    for n in sizes:
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(n)], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            url = f"http://127.0.0.1:{int(server.stdout.readline())}"
            with tempfile.TemporaryDirectory() as scratch:
                raw = count_instructions(url, "raw", Path(scratch))[0] / n
                sync, caught_up = count_instructions(url, "list", Path(scratch))
            sync_k, delivered_k = sync / n, (sync + caught_up) / n
            print(f"| {n:,} | {raw / 1000:.2f}k | {sync_k / 1000:.2f}k | {sync_k / raw:.3f}x |"
                  f" {delivered_k / 1000:.2f}k | {delivered_k / raw:.3f}x |", flush=True)
        finally:
            server.terminate()
            server.wait()
    return 0


def main(sizes: list[int], repeat: int) -> int:
    modes = ("raw", "list", "watchlist", "list-dict")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, {platform.python_implementation()} "
          f"{platform.python_version()}; load {os.getloadavg()[0]:.1f}")
    print("| objects | path | sync | raw fetch+parse | ratio | client CPU: sync / raw | ratio |"
          " CPU until handlers caught up | ratio |"
          " transformed JSON/object | RSS/object | RSS/JSON | peak/steady | lookup | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(n)], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            url = f"http://127.0.0.1:{port}"
            best: dict[str, dict[str, Any]] = {}
            cpu_runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
            for _ in range(repeat):
                for mode in modes:
                    r = run_client(url, mode)
                    cpu_runs[mode].append(r)
                    if mode not in best or r["sync_s"] < best[mode]["sync_s"]:
                        best[mode] = r
            raw = best["raw"]["sync_s"]
            raw_cpu = min(r["cpu_s"] for r in cpu_runs["raw"])
            for mode in modes[1:]:
                r = best[mode]
                cpu = min(x["cpu_s"] for x in cpu_runs[mode])
                delivered = min(x["cpu_delivered_s"] for x in cpu_runs[mode])
                per_json = r["json_bytes"] / r["objects"]
                per_rss = r["steady_rss"] / r["objects"]
                print(f"| {n:,} | {mode}{' (WatchList)' if r.get('used_watch_list') else ''} | {r['sync_s']:.2f} s |"
                      f" {raw:.2f} s | {r['sync_s'] / raw:.2f}x | {cpu:.2f} s / {raw_cpu:.2f} s |"
                      f" {cpu / raw_cpu:.2f}x | {delivered:.2f} s | {delivered / raw_cpu:.2f}x |"
                      f" {per_json:.0f} B | {per_rss:.0f} B |"
                      f" {per_rss / per_json:.2f}x | {r['peak_rss'] / r['steady_rss']:.2f}x"
                      f" ({r['peak_rss'] / 1e6:.0f}/{r['steady_rss'] / 1e6:.0f} MB) | {r['lookup_us']:.1f} us |"
                      f" {os.getloadavg()[0]:.1f} |",
                      flush=True)
        finally:
            server.terminate()
            server.wait()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        asyncio.run(serve(int(sys.argv[2])))
    elif len(sys.argv) > 3 and sys.argv[1] == "--client":
        print(json.dumps(asyncio.run(measure(sys.argv[2], sys.argv[3], sample="--no-sampler" not in sys.argv))))
    else:
        p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        p.add_argument("--objects", type=int, nargs="+", default=[10_000, 50_000, 100_000])
        p.add_argument("--repeat", type=int, default=3)
        p.add_argument("--instructions", action="store_true",
                       help="count instructions under callgrind (raw and list clients) instead of timing")
        a = p.parse_args()
        if a.instructions:
            sys.exit(main_instructions(a.objects if "--objects" in sys.argv else [20_000]))
        sys.exit(main(a.objects, a.repeat))
