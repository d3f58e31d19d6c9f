"""Soak: Tollgate at a fixed fraction of its maximum rate while policies and ConfigMaps change.

    python bench/soak.py [--minutes 10] [--rps N | --fraction 0.5] [--json out.json]

Starts ``tollgate serve --local DIR`` (DIR is a copy of policies/, made at run time) pinned to CPU 0,
measures its maximum keep-alive rate with wrk (c=8, 5 s) unless ``--rps`` is given, then sends the
reference 6 KB Pod CREATE AdmissionReview at ``fraction`` x that rate from an open-loop Python aiohttp
load generator on CPU 1 (one keep-alive TLS connection pool, requests started on a fixed schedule, so a
slow server shows up as latency, not as a lower offered rate). Meanwhile, every ``--edit-interval``
seconds it rewrites a ClusterAdmissionPolicy file (an annotation) and the allowed-registries ConfigMap
(one more registry), which the server's --local watch turns into MODIFIED events, recompiles and
re-indexes. Reports per minute: requests, errors (transport errors, non-200, or a decision other than
allowed), p50/p99 latency (ms) and the server's RSS (VmRSS, MiB); and RSS growth from the end of the
first minute (after warm-up) to the end. Goals (issue 7): RSS growth < 5 %, 0 errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import admission as adm  # noqa: E402  (bench/admission.py: free_port, run_wrk, REF)

POLICY_FILE = Path("examples/disallow-latest-tag/policy.yaml")
CONFIGMAP_FILE = Path("examples/allowed-registries/configmap.yaml")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def edit(local: Path, n: int) -> None:
    """Rewrite one policy (annotation) and one ConfigMap (an extra registry) so both informers see MODIFIED."""
    docs = list(yaml.safe_load_all((local / POLICY_FILE).read_text()))
    docs[0]["metadata"].setdefault("annotations", {})["bench.tollgate.dev/revision"] = str(n)
    (local / POLICY_FILE).write_text(yaml.safe_dump_all(docs))
    cms = list(yaml.safe_load_all((local / CONFIGMAP_FILE).read_text()))
    base = cms[0]["data"]["registries"].split(", soak-")[0]
    cms[0]["data"]["registries"] = f"{base}, soak-{n}.example.com/"
    (local / CONFIGMAP_FILE).write_text(yaml.safe_dump_all(cms))


async def load(url: str, body: bytes, ca: Path, *, rps: float, seconds: float, pid: int, local: Path,
               edit_interval: float) -> list[dict[str, Any]]:
    import aiohttp

    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    minutes: list[dict[str, Any]] = []
    cur: dict[str, Any] = {"lat": [], "errors": 0, "error_samples": []}
    inflight: set[asyncio.Task[None]] = set()

    async def one(session: aiohttp.ClientSession) -> None:
        t0 = time.perf_counter()
        bucket = cur
        try:
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                data = await resp.read()
                if resp.status != 200 or json.loads(data)["response"]["allowed"] is not True:
                    raise RuntimeError(f"status {resp.status}: {data[:200]!r}")
        except Exception as e:  # noqa: BLE001 - every failure counts; keep a few for the report
            bucket["errors"] += 1
            if len(bucket["error_samples"]) < 3:
                bucket["error_samples"].append(repr(e)[:200])
            return
        bucket["lat"].append((time.perf_counter() - t0) * 1000)

    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=64)) as session:
        start = loop.time()
        next_minute, next_edit, sent, n_edit = start + 60, start + edit_interval, 0, 0
        while True:
            now = loop.time()
            if now - start >= seconds:
                break
            due = int((now - start) * rps)
            while sent < due:
                t = asyncio.create_task(one(session))
                inflight.add(t)
                t.add_done_callback(inflight.discard)
                sent += 1
            if now >= next_edit:
                n_edit += 1
                edit(local, n_edit)
                next_edit += edit_interval
            if now >= next_minute:
                minutes.append(_close(cur, pid, n_edit))
                cur = {"lat": [], "errors": 0, "error_samples": []}
                next_minute += 60
            await asyncio.sleep(0.002)
        if inflight:
            await asyncio.wait(inflight, timeout=10)
        minutes.append(_close(cur, pid, n_edit))
    return minutes


def _close(bucket: dict[str, Any], pid: int, edits: int) -> dict[str, Any]:
    lat = sorted(bucket["lat"])
    pct = (lambda q: round(lat[min(len(lat) - 1, int(len(lat) * q))], 2)) if lat else (lambda q: None)
    row = {"requests": len(lat) + bucket["errors"], "errors": bucket["errors"], "p50_ms": pct(0.5),
           "p99_ms": pct(0.99), "rss_mib": round(rss_mib(pid), 1), "edits_so_far": edits,
           "error_samples": bucket["error_samples"]}
    print(f"  minute {row}", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rps", type=float, help="offered rate; default: --fraction x the measured maximum")
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--edit-interval", type=float, default=2.0, help="seconds between policy+ConfigMap edits")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    work = Path(tempfile.mkdtemp(prefix="tollgate-soak-"))
    proc: subprocess.Popen[bytes] | None = None

    def cleanup(*_: Any) -> None:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        local = work / "policies"
        shutil.copytree(ROOT / "policies", local)
        subprocess.run([sys.executable, str(adm.REF / "make_certs.py"), "ec", str(work / "certs")], check=True,
                       cwd=work, capture_output=True)
        (work / "tg").mkdir()
        shutil.copy(work / "certs" / "server.crt", work / "tg" / "tls.crt")
        shutil.copy(work / "certs" / "server.key", work / "tg" / "tls.key")
        subprocess.run([sys.executable, str(adm.REF / "make_payload.py")], check=True, cwd=work, capture_output=True)
        review = json.loads((work / "admissionreview.json").read_bytes())
        review["request"]["object"]["metadata"].setdefault("labels", {})["team"] = "payments"
        body_file = work / "body.json"
        body_file.write_text(json.dumps(review, separators=(",", ":")))
        port = adm.free_port()
        proc = subprocess.Popen(["taskset", "-c", "0", str(Path(sys.executable).parent / "tollgate"), "serve",
                                 "--local", str(local), "--cert-dir", str(work / "tg"), "--port", str(port),
                                 "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("tollgate did not start") from None
                time.sleep(0.1)
        time.sleep(1.0)
        url = f"https://127.0.0.1:{port}/validate"
        if args.rps:
            max_rps, rps = None, args.rps
        else:
            m = adm.run_wrk(url, body_file, 8, 5)
            max_rps = m["requests"] / m["seconds"]
            rps = max_rps * args.fraction
        print(f"max keep-alive RPS (wrk c=8, 5 s): {max_rps and round(max_rps)}; offered: {rps:.0f} rps "
              f"for {args.minutes} min; edits every {args.edit_interval} s", flush=True)
        os.sched_setaffinity(0, {1})  # the load generator on the other core
        rss_start = rss_mib(proc.pid)
        minutes = asyncio.run(load(url, body_file.read_bytes(), work / "certs" / "ca.crt", rps=rps,
                                   seconds=args.minutes * 60, pid=proc.pid, local=local,
                                   edit_interval=args.edit_interval))
        rss_end = rss_mib(proc.pid)
        # Evidence that the edits reached the informers: events applied per cache, from /metrics.
        import urllib.request

        mctx = ssl.create_default_context(cafile=str(work / "certs" / "ca.crt"))
        mctx.check_hostname = False
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=mctx, timeout=5) as resp:
            informer_events = [line for line in resp.read().decode().splitlines()
                               if line.startswith("tollgate_informer_events")]
        baseline = minutes[0]["rss_mib"] if len(minutes) > 1 else rss_start
        errors = sum(m["errors"] for m in minutes)
        growth = (rss_end - baseline) / baseline * 100
        summary = {"max_rps": max_rps and round(max_rps), "offered_rps": round(rps), "minutes": args.minutes,
                   "rss_mib_start": round(rss_start, 1), "rss_mib_after_first_minute": baseline,
                   "rss_mib_end": round(rss_end, 1), "rss_growth_pct_after_warmup": round(growth, 2),
                   "errors": errors, "informer_events": informer_events, "per_minute": minutes,
                   "goals": {"rss_growth_lt_5pct": growth < 5.0, "zero_errors": errors == 0},
                   "load": "open-loop Python aiohttp client (max rate: wrk)", "certificates": "ECDSA P-256"}
        print(json.dumps({k: v for k, v in summary.items() if k != "per_minute"}, indent=2))
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
    except KeyboardInterrupt:
        return 130
    finally:
        cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
