"""Attack measurements: GIL, isolation cost, the container-count curve, SIGTERM, slow and malformed clients.

    python bench/attacks.py gil                 # does cel-expr-python release the GIL in Expression.eval?
    python bench/attacks.py cost [--reviews N]  # per-review cost of process isolation on a cheap Pod
    python bench/attacks.py curve [--sizes 10,100,1000,3000,10000] [--modes isolated,inline] [--inline-max 3000]
    python bench/attacks.py sigterm [--clients 8]  # kept-alive clients against `tollgate serve` across SIGTERM
    python bench/attacks.py slowloris [--connections 1000] [--hold 30] [--sustain] [--nofile 1024]
                                      [--modes bare,guarded]   # partial request heads vs reviews and /healthz
    python bench/attacks.py ready [--policies 2000]  # does /readyz say 200 before reviews are answered?
    python bench/attacks.py flood [--attackers 8] [--seconds 15] [--budgets 0,50000000]
                                    # reviews just under 32 KiB vs cheap reviews, with and without the budget
    python bench/attacks.py explain [--validations 64] [--terms 40] [--explanations 3]
                                    # /explain of a tenant policy of long validations vs /healthz

``slowloris`` serves ``policies/`` with the server's soft open-file limit at ``--nofile``, once behind a
bare aiohttp TCPSite (``bare``: how ``serve`` listened before it had limits) and once behind
``webhook.server.listener`` (``guarded``). Each of ``--connections`` clients completes a TLS handshake,
sends part of a request head and waits; meanwhile a prober opens a fresh connection every 100 ms for a
cheap review and for ``/healthz``. Then ``--malformed`` unparsable heads are sent and the server's log is
counted.

``curve`` starts ``tollgate serve --local policies/`` equivalents as subprocesses (127.0.0.1, a free
port) in each mode -- ``inline`` (evaluation on the event loop, as before issue #13) and ``isolated``
(an EvaluationPool of 2 workers) -- then, per container count N, POSTs one N-container Pod review
(``?timeout=30s``) while a probe loop sends a cheap 1-container review and ``GET /healthz`` every
50 ms. Reported: latency and outcome of the big review, max/median latency of the cheap review and of
/healthz while the big one ran, and peak RSS (server; workers summed) sampled every 20 ms from /proc.
Inline runs stop at --inline-max containers (the 10,000-container Pod needed 6.3 GB inline).

``flood`` runs ``tollgate serve --local policies/`` (2 evaluation workers) once per ``--inline-work-budget``
in ``--budgets`` (0: no check, every body up to 32 KiB evaluated inline, as before issue #21). ``--attackers``
clients send, back to back, the largest Pod review under 32 KiB (the body stays inline by size); a prober
sends a cheap 1-container review every 50 ms. Reported: the cheap reviews' p50/p99/max, the flood's reviews
answered per second and how they were answered, and the over-budget counter from /metrics.

``explain`` serves ``--local`` a directory holding one tenant AdmissionPolicy (namespace ``default``) of
``--validations`` validations, each ``--terms`` comparisons long and false on the probe Pod (so every one
is explained with its operands), with ``--explain``. It POSTs ``--explanations`` explanations of that policy,
one after the other, while a prober GETs ``/healthz`` every 10 ms. Reported: each explanation's status and
latency, and /healthz's p50/p99/max while they ran (issue #29 item 5: 3.95 s on the loop before).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.component.server.isolated import big_pod_review, shipped_documents  # noqa: E402


def _wait_ready(url: str, ctx: ssl.SSLContext, timeout: float) -> None:
    """Poll ``url``/readyz every 0.2 s until it answers 200; RuntimeError after ``timeout`` seconds."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/readyz", context=ctx, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not become ready") from None
            time.sleep(0.2)


def local_certs(name: str) -> tuple[Path, ssl.SSLContext]:
    """A temp dir holding a CA and a serving certificate for localhost/127.0.0.1, and a client context trusting it."""
    from webhook.tls import generate as certs

    tmp = Path(tempfile.mkdtemp(prefix=f"tollgate-{name}-"))
    paths = certs.write_certs(tmp, dns_names=["localhost"], ip_addresses=["127.0.0.1"], days=1)
    return tmp, ssl.create_default_context(cafile=str(paths.ca))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _handler() -> Any:
    from webhook.admission.handler import AdmissionHandler
    from webhook.policy import PolicyIndex
    from webhook.policy.lookups import InMemoryLookups

    docs = shipped_documents()
    index = PolicyIndex()
    for d in docs:
        if d.get("kind") in ("ClusterAdmissionPolicy", "AdmissionPolicy"):
            index.upsert(d)
    return AdmissionHandler(index, InMemoryLookups(namespaces=[d for d in docs if d.get("kind") == "Namespace"],
                                                   configmaps=[d for d in docs if d.get("kind") == "ConfigMap"]))


# -- gil ---------------------------------------------------------------------------------------------------
def gil(args: argparse.Namespace) -> None:
    """A heartbeat thread stamps time while another thread evaluates a big review with the shipped policies."""
    handler = _handler()
    for n in args.sizes:
        request = big_pod_review(n)["request"]
        stamps: list[float] = []
        stop = threading.Event()

        def heartbeat(stop: threading.Event = stop, stamps: list[float] = stamps) -> None:
            while not stop.is_set():
                stamps.append(time.perf_counter())
                time.sleep(0.001)

        hb = threading.Thread(target=heartbeat)
        hb.start()
        time.sleep(0.05)
        done: list[float] = []
        ev = threading.Thread(target=lambda request=request, done=done: (
            handler.validate(request), done.append(time.perf_counter())))
        t0 = time.perf_counter()
        ev.start()
        ev.join()
        t1 = done[0]
        time.sleep(0.05)
        stop.set()
        hb.join()
        inside = [t0] + [s for s in stamps if t0 < s < t1] + [t1]
        gap = max(b - a for a, b in itertools.pairwise(inside))
        expected = (t1 - t0) / 0.001
        print(f"N={n:>5}: evaluation {1000 * (t1 - t0):8.1f} ms in a thread; heartbeat (1 ms sleep loop) ran "
              f"{len(inside) - 2} times (~{expected:.0f} if the GIL were free); longest heartbeat gap "
              f"{1000 * gap:8.1f} ms", flush=True)


# -- cost --------------------------------------------------------------------------------------------------
async def _cost(args: argparse.Namespace) -> None:
    from webhook.admission.isolation.evaluators import Evaluator, InlineEvaluator, IsolatedEvaluator
    from webhook.admission.isolation.pool import EvaluationPool
    from webhook.server.settings import DEFAULTS

    handler = _handler()
    request = big_pod_review(1, uid="cheap")["request"]
    results: dict[str, list[float]] = {}
    pool = EvaluationPool(workers=args.workers, memory_limit_bytes=DEFAULTS.eval_memory_limit_bytes)
    await pool.start()
    try:
        evaluators: dict[str, Evaluator] = {"inline": InlineEvaluator(handler),
                                            f"isolated ({args.workers} workers)": IsolatedEvaluator(handler, pool)}
        for _round in range(3):  # interleaved rounds against a noisy shared machine
            for name, evaluator in evaluators.items():
                for _ in range(50):  # warm-up (workers compile the policies on first sight)
                    await evaluator("validate", request, 10)
                times = results.setdefault(name, [])
                for _ in range(args.reviews):
                    t = time.perf_counter()
                    decision = await evaluator("validate", request, 10)
                    times.append(time.perf_counter() - t)
                assert decision.decision == "allowed", decision
    finally:
        await pool.close()
    base = statistics.median(results["inline"])
    for name, times in results.items():
        times.sort()
        med, p99 = statistics.median(times), times[int(len(times) * 0.99)]
        print(f"{name:<22} median {1e6 * med:7.0f} us  p99 {1e6 * p99:7.0f} us  "
              f"(+{1e6 * (med - base):.0f} us over inline)", flush=True)


# -- curve -------------------------------------------------------------------------------------------------
SERVE = '''
import asyncio, sys
from pathlib import Path
from aiohttp import web
from webhook.server.app import CERTS, create_app
from webhook.server.settings import DEFAULTS, Settings
from webhook.admission.server import AdmissionServer

async def main(mode, port, cert_dir):
    settings = Settings(local_dir=Path(sys.argv[4]), cert_file=Path(cert_dir) / "tls.crt",
                        key_file=Path(cert_dir) / "tls.key", host="127.0.0.1", port=port, write_status=False,
                        eval_workers=0)
    app = create_app(settings)
    server = next(r.handler.__self__ for r in app.router.routes()
                  if isinstance(getattr(r.handler, "__self__", None), AdmissionServer))
    pool = None
    if mode == "isolated":
        from webhook.admission.isolation.pool import EvaluationPool
        from webhook.admission.isolation.evaluators import IsolatedEvaluator
        pool = EvaluationPool(workers=2, memory_limit_bytes=DEFAULTS.eval_memory_limit_bytes)
        await pool.start()
        server.evaluator = IsolatedEvaluator(server.handler, pool)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=app[CERTS].context).start()
    print("READY", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
'''


def rss_tree(pid: int) -> tuple[int, int]:
    """(server RSS, sum of its children's RSS) in bytes."""
    def rss(p: int) -> int:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0
    children: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            children += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return rss(pid), sum(rss(c) for c in children)


async def _curve_one(url: str, ctx: ssl.SSLContext, pid: int, n: int) -> dict[str, Any]:
    import aiohttp

    cheap_body = json.dumps(big_pod_review(1, uid="cheap")).encode()
    big_body = json.dumps(big_pod_review(n)).encode()
    headers = {"Content-Type": "application/json"}
    cheap: list[float] = []
    health: list[float] = []
    peak = [0, 0]
    done = asyncio.Event()

    async def sampler() -> None:
        while not done.is_set():
            server, workers = rss_tree(pid)
            peak[0], peak[1] = max(peak[0], server), max(peak[1], workers)
            await asyncio.sleep(0.02)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        async def prober() -> None:
            while not done.is_set():
                t = time.perf_counter()
                async with session.post(url + "/validate", data=cheap_body, headers=headers) as r:
                    await r.read()
                cheap.append(time.perf_counter() - t)
                t = time.perf_counter()
                async with session.get(url + "/healthz") as r:
                    await r.read()
                health.append(time.perf_counter() - t)
                await asyncio.sleep(0.05)

        tasks = [asyncio.ensure_future(sampler()), asyncio.ensure_future(prober())]
        await asyncio.sleep(0.2)
        t = time.perf_counter()
        async with session.post(url + "/validate?timeout=30s", data=big_body, headers=headers) as r:
            status = r.status
            body = await r.json(content_type=None)
        big = time.perf_counter() - t
        done.set()
        await asyncio.gather(*tasks)
    response = body.get("response", {}) if isinstance(body, dict) else {}
    outcome = "allowed" if response.get("allowed") else (response.get("status", {}).get("message", "")[:60]
                                                         or f"HTTP {status}")
    return {"n": n, "body_bytes": len(big_body), "big_s": big, "outcome": outcome,
            "cheap_max_s": max(cheap) if cheap else None, "cheap_p50_s": statistics.median(cheap) if cheap else None,
            "healthz_max_s": max(health) if health else None, "cheap_count": len(cheap),
            "server_rss_mb": peak[0] / 2**20, "workers_rss_mb": peak[1] / 2**20}


def curve(args: argparse.Namespace) -> None:

    tmp, ctx = local_certs("attacks")
    rows = []
    for mode in args.modes:
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen([sys.executable, "-c", SERVE, mode, str(port), str(tmp), str(ROOT / "policies")],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        try:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != b"READY":
                raise RuntimeError(f"{mode} server did not start")
            time.sleep(1.5)  # informers sync (--local polls every second)
            for n in args.sizes:
                if mode == "inline" and n > args.inline_max:
                    continue
                row = asyncio.run(_curve_one(f"https://localhost:{port}", ctx, proc.pid, n))
                row["mode"] = mode
                rows.append(row)
                print(f"{mode:<9} N={n:>5} ({row['body_bytes'] / 2**20:5.2f} MiB): big {row['big_s']:6.2f} s "
                      f"[{row['outcome']}]; cheap max {row['cheap_max_s'] or 0:6.3f} s p50 "
                      f"{row['cheap_p50_s'] or 0:6.3f} s ({row['cheap_count']} sent); /healthz max "
                      f"{row['healthz_max_s'] or 0:6.3f} s; peak RSS server {row['server_rss_mb']:6.0f} MB, "
                      f"workers {row['workers_rss_mb']:6.0f} MB", flush=True)
        finally:
            proc.kill()
            proc.wait()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


# -- sigterm ----------------------------------------------------------------------------------------------
async def _sigterm(args: argparse.Namespace) -> None:
    """Kept-alive clients loop on /validate against ``tollgate serve --local policies``; SIGTERM after 1 s."""
    import signal

    import aiohttp


    tmp, ctx = local_certs("sigterm")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--local", str(ROOT / "policies"),
                             "--cert-dir", str(tmp), "--port", str(port), "--log-level", "WARNING"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    url = f"https://localhost:{port}/validate"
    body = json.dumps(big_pod_review(1)).encode()
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            await asyncio.sleep(0.1)
    await asyncio.sleep(2)  # informers sync
    counts: dict[str, int] = {}

    async def client() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1)) as session:
            while True:
                try:
                    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                        await r.read()
                        key = f"HTTP {r.status}"
                except aiohttp.ClientConnectorError:
                    counts["refused (listener closed)"] = counts.get("refused (listener closed)", 0) + 1
                    return
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                    key = f"cut off ({type(e).__name__})"
                counts[key] = counts.get(key, 0) + 1

    tasks = [asyncio.ensure_future(client()) for _ in range(args.clients)]
    await asyncio.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    code = proc.wait(30)
    print(f"exit {code} {time.perf_counter() - started:.1f} s after SIGTERM; {counts}", flush=True)


# -- slowloris -------------------------------------------------------------------------------------------
SLOWLORIS_SERVE = '''
import asyncio, resource, sys
from pathlib import Path
from aiohttp import web
from webhook import logs
from webhook.server.app import CERTS, create_app
from webhook.server.listener import start_listener
from webhook.server.settings import Settings

async def main(mode, port, cert_dir, policies, nofile):
    logs.setup("INFO")
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    settings = Settings(local_dir=Path(policies), cert_file=Path(cert_dir) / "tls.crt",
                        key_file=Path(cert_dir) / "tls.key", host="127.0.0.1", port=port, eval_workers=0)
    app = create_app(settings)
    if mode == "guarded":
        await start_listener(app, settings)
    else:  # what serve ran before the listener had limits: a bare aiohttp TCPSite
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=app[CERTS].context, backlog=1024,
                          reuse_address=True).start()
    print("READY", flush=True)
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])))
'''
PARTIAL_HEAD = b"POST /validate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


async def _slowloris(args: argparse.Namespace, mode: str, port: int, ctx: ssl.SSLContext) -> dict[str, Any]:
    """Hold ``--connections`` partial request heads for ``--hold`` seconds (reopening what the server cuts when
    ``--sustain``) while a prober opens a fresh connection every 100 ms for a review and for /healthz."""
    import aiohttp

    cheap = json.dumps(big_pod_review(1, uid="cheap")).encode()
    started = time.perf_counter()
    cut_after: list[float] = []
    open_failures = 0
    holding = 0
    stop = asyncio.Event()
    gate = asyncio.Semaphore(64)  # handshakes in flight at once

    async def hold_one() -> None:
        nonlocal open_failures, holding
        while not stop.is_set():
            try:
                async with gate:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost"), 15)
                    writer.write(PARTIAL_HEAD)
                    await writer.drain()
            except (OSError, TimeoutError, ssl.SSLError):
                open_failures += 1
                await asyncio.sleep(0.5)
                continue
            opened = time.perf_counter()
            holding += 1
            try:
                read = asyncio.ensure_future(reader.read())
                stopped = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if read in done:
                    cut_after.append(time.perf_counter() - opened)
                for task in (read, stopped):
                    task.cancel()
            except (OSError, ssl.SSLError):
                cut_after.append(time.perf_counter() - opened)
            finally:
                holding -= 1
                writer.transport.abort()
            if not args.sustain:
                return

    probes: dict[str, list[float]] = {"validate": [], "healthz": []}
    failures: dict[str, int] = {"validate": 0, "healthz": 0}
    held_samples: list[tuple[float, int]] = []

    async def probe() -> None:
        while not stop.is_set():
            for name, method, path, body in (("validate", "POST", "/validate", cheap),
                                             ("healthz", "GET", "/healthz", None)):
                t = time.perf_counter()
                try:  # a fresh connection each time, as a new API server connection would be
                    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, force_close=True),
                                                     timeout=aiohttp.ClientTimeout(total=10)) as session:
                        async with session.request(method, f"https://localhost:{port}{path}", data=body,
                                                   headers={"Content-Type": "application/json"}) as r:
                            await r.read()
                            ok = r.status == 200
                except (aiohttp.ClientError, OSError, TimeoutError):
                    ok = False
                if ok:
                    probes[name].append(time.perf_counter() - t)
                else:
                    failures[name] += 1
            held_samples.append((time.perf_counter() - started, holding))
            await asyncio.sleep(0.1)

    tasks = [asyncio.ensure_future(hold_one()) for _ in range(args.connections)]
    prober = asyncio.ensure_future(probe())
    await asyncio.sleep(args.hold)
    held_at_end = holding
    stop.set()
    await asyncio.gather(*tasks, prober, return_exceptions=True)
    await _malformed(port, ctx, args.malformed)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        async with session.get(f"https://localhost:{port}/metrics") as r:
            wanted = ("tollgate_http_connections_closed_total", "tollgate_http_malformed_requests_total")
            metrics = [line for line in (await r.text()).splitlines() if line.startswith(wanted)]

    def pct(values: list[float], q: float) -> float:
        return sorted(values)[min(int(len(values) * q), len(values) - 1)] if values else float("nan")

    return {"mode": mode, "held_max": max((h for _, h in held_samples), default=0),
            "held_end": held_at_end, "open_failures": open_failures,
            "cut": len(cut_after), "cut_p50_s": pct(cut_after, 0.5), "cut_max_s": max(cut_after, default=float("nan")),
            **{f"{k}_ok": len(v) for k, v in probes.items()}, **{f"{k}_failed": v for k, v in failures.items()},
            **{f"{k}_p50_s": pct(v, 0.5) for k, v in probes.items()},
            **{f"{k}_max_s": max(v, default=float("nan")) for k, v in probes.items()}, "metrics": metrics}


async def _malformed(port: int, ctx: ssl.SSLContext, count: int) -> None:
    for _ in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nBad Header\r\n\r\n")
        await reader.readline()
        writer.transport.abort()


def slowloris(args: argparse.Namespace) -> None:
    import resource


    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the attacker needs more than the server has
    tmp, ctx = local_certs("slowloris")
    for mode in args.modes:
        port = free_port()
        log = tmp / f"{mode}.log"
        with log.open("wb") as stderr:
            proc = subprocess.Popen([sys.executable, "-c", SLOWLORIS_SERVE, mode, str(port), str(tmp),
                                     str(ROOT / "policies"), str(args.nofile)], stdout=subprocess.PIPE,
                                    stderr=stderr, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
        try:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != b"READY":
                raise RuntimeError(f"{mode} server did not start")
            time.sleep(2)  # informers sync
            row = asyncio.run(_slowloris(args, mode, port, ctx))
        finally:
            proc.kill()
            proc.wait()
        text = log.read_text(errors="replace")
        print(f"{mode:<8} {args.connections} partial heads held {args.hold:.0f} s"
              f"{' (reopened when cut)' if args.sustain else ''}, server RLIMIT_NOFILE {args.nofile}: "
              f"open at once max {row['held_max']}, at the end {row['held_end']}; failed to open "
              f"{row['open_failures']}; cut {row['cut']} (after p50 {row['cut_p50_s']:.1f} s, max "
              f"{row['cut_max_s']:.1f} s)", flush=True)
        for name in ("validate", "healthz"):
            print(f"         {name:<8} ok {row[name + '_ok']}, failed {row[name + '_failed']}, p50 "
                  f"{1000 * row[name + '_p50_s']:.0f} ms, max {1000 * row[name + '_max_s']:.0f} ms", flush=True)
        print(f"         server log: {len(text.splitlines())} lines, {text.count('Traceback')} tracebacks "
              f"(incl. {args.malformed} malformed heads sent after the attack); {'; '.join(row['metrics'])}",
              flush=True)


# -- ready ----------------------------------------------------------------------------------------------
async def _ready(args: argparse.Namespace) -> None:
    """Start the app on ``--policies`` policies (fake API server) and poll /readyz and /validate back to back."""
    import aiohttp

    from tests.component.server.conftest import serve_tls
    from tests.fakeapi.server import FakeApiServer
    from tests.unit.policy.helpers import policy
    from webhook.kube.client import api_client_for_url
    from webhook.server.app import create_app
    from webhook.server.settings import Settings
    from webhook.tls import generate as certs

    fake = FakeApiServer()
    await fake.start()
    fake.apply("namespaces", {"metadata": {"name": "default"}})
    for i in range(args.policies):
        fake.apply("clusteradmissionpolicies", policy(f"p{i:05}", operations=("CREATE",), validations=[
            {"expression": f"object.metadata.name != 'forbidden-{i}'"}]))
    tmp = Path(tempfile.mkdtemp(prefix="tollgate-ready-"))
    paths = certs.write_certs(tmp, dns_names=["localhost"], days=1)
    client = api_client_for_url(fake.url)
    app = create_app(Settings(cert_file=paths.cert, key_file=paths.key, write_status=False, manage_webhooks=False,
                              eval_workers=0), api_client=client)
    started = time.perf_counter()
    runner, port = await serve_tls(app)
    url = f"https://localhost:{port}"
    body = json.dumps(big_pod_review(1)).encode()
    first: dict[str, float] = {}
    refused_while_ready = 0
    try:
        connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=str(paths.ca)))
        async with aiohttp.ClientSession(connector=connector) as session:
            while len(first) < 2:
                async with session.get(url + "/readyz") as r:
                    if r.status == 200:
                        first.setdefault("readyz", time.perf_counter() - started)
                async with session.post(url + "/validate", data=body,
                                        headers={"Content-Type": "application/json"}) as r:
                    if r.status == 200:
                        first.setdefault("validate", time.perf_counter() - started)
                    elif "readyz" in first:
                        refused_while_ready += 1
    finally:
        await runner.cleanup()
        await client.close()
        await fake.stop()
    print(f"{args.policies} policies: /readyz 200 after {first['readyz']:.2f} s, first review answered after "
          f"{first['validate']:.2f} s; reviews answered 503 after /readyz said 200: {refused_while_ready}", flush=True)


# -- flood ------------------------------------------------------------------------------------------------
async def _loop_cpu_probe(path: Path) -> None:
    """Wake every 1 ms; write each interval in which the loop thread used 1 ms of CPU or more (``cpu_ms wall_ms``).

    The CPU the event loop's own thread spends between two wake-ups is how long a review arriving then waits
    behind the loop's work on an idle core; the wall time adds whatever else the machine runs.
    """
    with path.open("a", buffering=1) as out:
        while True:
            wall, cpu = time.monotonic(), time.thread_time()
            await asyncio.sleep(0.001)
            cpu_ms, wall_ms = (time.thread_time() - cpu) * 1000, (time.monotonic() - wall) * 1000 - 1
            if cpu_ms >= 1:
                out.write(f"{cpu_ms:.3f} {wall_ms:.3f}\n")


def probed_serve(trace: Path, serve_args: list[str]) -> int:
    """``tollgate serve`` (``webhook.cli.main`` unchanged) with :func:`_loop_cpu_probe` on its event loop."""
    from webhook.cli import main as cli
    from webhook.cli import serve as serve_command

    serve = serve_command._serve

    async def serve_with_probe(*args: Any) -> None:
        probe = asyncio.get_running_loop().create_task(_loop_cpu_probe(trace))
        try:
            await serve(*args)
        finally:
            probe.cancel()

    serve_command._serve = serve_with_probe  # type: ignore[assignment]
    return cli.main(["serve", *serve_args])


def _loop_cpu(trace: Path) -> dict[str, float]:
    """p99 and max of the loop's CPU per 1 ms wake-up interval, from :func:`_loop_cpu_probe`'s file."""
    cpu = sorted(float(line.split()[0]) for line in trace.read_text().splitlines() if line.strip())
    if not cpu:
        return {"loop_cpu_stalls": 0, "loop_cpu_p99_ms": 0.0, "loop_cpu_max_ms": 0.0}
    return {"loop_cpu_stalls": len(cpu), "loop_cpu_p99_ms": cpu[int(0.99 * (len(cpu) - 1))],
            "loop_cpu_max_ms": cpu[-1]}


def _largest_review_under(limit: int) -> bytes:
    n, body = 1, b""
    while True:
        candidate = json.dumps(big_pod_review(n + 1, uid="flood")).encode()
        if len(candidate) >= limit:
            return body
        n, body = n + 1, candidate


async def _flood_one(url: str, ctx: ssl.SSLContext, attackers: int, seconds: float) -> dict[str, Any]:
    import aiohttp

    cheap_body = json.dumps(big_pod_review(1, uid="cheap")).encode()
    flood_body = _largest_review_under(32 * 1024)
    headers = {"Content-Type": "application/json"}
    cheap: list[float] = []
    outcomes: dict[str, int] = {}
    done = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        async def attacker() -> None:
            while not done.is_set():
                async with session.post(url + "/validate?timeout=10s", data=flood_body, headers=headers) as r:
                    body = await r.json(content_type=None)
                response = body.get("response", {}) if isinstance(body, dict) else {}
                key = "allowed" if response.get("allowed") else f"denied {response.get('status', {}).get('code')}"
                outcomes[key] = outcomes.get(key, 0) + 1

        async def prober() -> None:
            while not done.is_set():
                t = time.perf_counter()
                async with session.post(url + "/validate", data=cheap_body, headers=headers) as r:
                    await r.read()
                cheap.append(time.perf_counter() - t)
                await asyncio.sleep(0.05)

        tasks = [asyncio.ensure_future(attacker()) for _ in range(attackers)] + [asyncio.ensure_future(prober())]
        await asyncio.sleep(seconds)
        done.set()
        await asyncio.gather(*tasks)
        async with session.get(url + "/metrics") as r:
            metrics = await r.text()
    over = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("tollgate_evaluation_over_budget_total{"))
    cheap.sort()
    return {"flood_body_bytes": len(flood_body), "flood_per_s": sum(outcomes.values()) / seconds,
            "flood_outcomes": outcomes, "over_budget": over, "cheap_count": len(cheap),
            "cheap_p50_s": statistics.median(cheap), "cheap_p99_s": cheap[int(0.99 * (len(cheap) - 1))],
            "cheap_max_s": cheap[-1]}


def flood(args: argparse.Namespace) -> None:

    tmp, ctx = local_certs("flood")
    rows = []
    for budget in args.budgets:
        port = free_port()
        trace = tmp / f"loop-cpu-{budget}.txt"
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "probed-serve", str(trace), "--",
                                 "--local", str(ROOT / "policies"),
                                 "--cert-dir", str(tmp), "--port", str(port), "--eval-workers", "2",
                                 "--inline-work-budget", str(budget), "--log-level", "warning"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        try:
            url = f"https://localhost:{port}"
            _wait_ready(url, ctx, 30)
            time.sleep(args.settle)  # past the start's one-off work (the heap frozen 1 s after sync: a full collection)
            trace.write_text("")  # the probe's records from now on: the flood, not the start
            row = asyncio.run(_flood_one(url, ctx, args.attackers, args.seconds))
            row.update(_loop_cpu(trace))
            row["inline_work_budget"] = budget
            rows.append(row)
            print(f"budget {budget:>11}: flood {row['flood_body_bytes']} B x {args.attackers} clients, "
                  f"{row['flood_per_s']:6.1f}/s {row['flood_outcomes']}, over budget {row['over_budget']:.0f}; "
                  f"cheap p50 {row['cheap_p50_s'] * 1000:6.1f} ms p99 {row['cheap_p99_s'] * 1000:7.1f} ms "
                  f"max {row['cheap_max_s'] * 1000:7.1f} ms ({row['cheap_count']} sent); loop CPU per 1 ms wake-up: "
                  f"{row['loop_cpu_stalls']} over 1 ms, p99 {row['loop_cpu_p99_ms']:.1f} ms "
                  f"max {row['loop_cpu_max_ms']:.1f} ms", flush=True)
        finally:
            proc.kill()
            proc.wait()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


# -- explain ----------------------------------------------------------------------------------------------
def _long_tenant_policy(validations: int, terms: int) -> dict[str, Any]:
    chain = " && ".join(f"object.metadata.name != 'n{i}'" for i in range(terms))
    return {"apiVersion": "tollgate.dev/v1alpha1", "kind": "AdmissionPolicy",
            "metadata": {"name": "long", "namespace": "default"},
            "spec": {"match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                                  "operations": ["CREATE"]}]},
                     "validations": [{"expression": f"({chain} && object.metadata.name == 'never') || {j} < 0"}
                                     for j in range(validations)]}}


async def _explain_one(url: str, ctx: ssl.SSLContext, explanations: int) -> dict[str, Any]:
    import aiohttp

    body = json.dumps(big_pod_review(1, uid="explain")).encode()
    headers = {"Content-Type": "application/json"}
    probes: list[float] = []
    answers: list[tuple[int, float]] = []
    done = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        async def prober() -> None:
            while not done.is_set():
                t = time.perf_counter()
                async with session.get(url + "/healthz") as r:
                    await r.read()
                probes.append(time.perf_counter() - t)
                await asyncio.sleep(0.01)

        task = asyncio.ensure_future(prober())
        await asyncio.sleep(0.5)
        probes.clear()
        for _ in range(explanations):
            t = time.perf_counter()
            async with session.post(url + "/explain?policy=default/long", data=body, headers=headers) as r:
                await r.read()
                answers.append((r.status, time.perf_counter() - t))
        done.set()
        await task
    probes.sort()
    return {"explanations": answers, "healthz_count": len(probes), "healthz_p50_s": statistics.median(probes),
            "healthz_p99_s": probes[int(0.99 * (len(probes) - 1))], "healthz_max_s": probes[-1]}


def explain(args: argparse.Namespace) -> None:
    import yaml

    tmp, ctx = local_certs("explain")
    served = tmp / "policies"
    served.mkdir()
    (served / "long.yaml").write_text(yaml.safe_dump(_long_tenant_policy(args.validations, args.terms)))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--local", str(served), "--explain",
                             "--cert-dir", str(tmp), "--port", str(port), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        url = f"https://localhost:{port}"
        _wait_ready(url, ctx, 60)
        row = asyncio.run(_explain_one(url, ctx, args.explanations))
    finally:
        proc.kill()
        proc.wait()
    print(f"{args.validations} validations x {args.terms} terms: explanations "
          + ", ".join(f"{status} in {seconds:.2f} s" for status, seconds in row["explanations"])
          + f"; /healthz p50 {row['healthz_p50_s'] * 1000:.1f} ms p99 {row['healthz_p99_s'] * 1000:.1f} ms "
            f"max {row['healthz_max_s'] * 1000:.1f} ms ({row['healthz_count']} probes)", flush=True)


def main() -> None:
    if sys.argv[1:2] == ["probed-serve"]:  # the flood's server: python bench/attacks.py probed-serve TRACE -- ARGS
        sys.exit(probed_serve(Path(sys.argv[2]), sys.argv[4:]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gil")
    g.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 3000])
    c = sub.add_parser("cost")
    c.add_argument("--reviews", type=int, default=1000)
    c.add_argument("--workers", type=int, default=2)
    cv = sub.add_parser("curve")
    cv.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[10, 100, 1000, 3000, 10000])
    cv.add_argument("--modes", type=lambda s: s.split(","), default=["isolated", "inline"])
    cv.add_argument("--inline-max", type=int, default=3000)
    cv.add_argument("--json", help="write the rows here")
    st = sub.add_parser("sigterm")
    st.add_argument("--clients", type=int, default=8)
    sl = sub.add_parser("slowloris")
    sl.add_argument("--connections", type=int, default=1000)
    sl.add_argument("--hold", type=float, default=30.0, help="seconds the attack lasts")
    sl.add_argument("--sustain", action="store_true", help="reopen every connection the server cuts")
    sl.add_argument("--nofile", type=int, default=1024, help="the server's soft RLIMIT_NOFILE")
    sl.add_argument("--malformed", type=int, default=1000, help="malformed request heads sent after the attack")
    sl.add_argument("--modes", type=lambda s: s.split(","), default=["bare", "guarded"])
    rd = sub.add_parser("ready")
    rd.add_argument("--policies", type=int, default=2000)
    fl = sub.add_parser("flood")
    fl.add_argument("--attackers", type=int, default=8)
    fl.add_argument("--seconds", type=float, default=15.0)
    fl.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=[0, 50_000_000])
    fl.add_argument("--settle", type=float, default=3.0, help="seconds between ready and the flood (default 3)")
    fl.add_argument("--json", help="write the rows here")
    ex = sub.add_parser("explain")
    ex.add_argument("--validations", type=int, default=64)
    ex.add_argument("--terms", type=int, default=40)
    ex.add_argument("--explanations", type=int, default=3)
    args = parser.parse_args()
    if args.command == "explain":
        explain(args)
    elif args.command == "flood":
        flood(args)
    elif args.command == "ready":
        asyncio.run(_ready(args))
    elif args.command == "slowloris":
        slowloris(args)
    elif args.command == "sigterm":
        asyncio.run(_sigterm(args))
    elif args.command == "gil":
        gil(args)
    elif args.command == "cost":
        asyncio.run(_cost(args))
    else:
        curve(args)


if __name__ == "__main__":
    main()
