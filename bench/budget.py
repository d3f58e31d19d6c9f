"""The inline cost check's price on the common path: /validate with and without it, in one run.

    python bench/budget.py [--duration 10] [--reps 3]

Two ``tollgate serve --local policies/`` processes, pinned to CPU 0 as in bench/admission.py, one with
the default ``--inline-work-budget`` (every review's estimated evaluation cost is checked before it is
evaluated on the event loop) and one with ``--inline-work-budget 0`` (no check: how every review was
evaluated before). wrk on CPU 1, c=8, kept-alive: the distinct stream (128 compliant Pods, no two
requests alike) and the reference Pod repeated. Interleaved repetitions; medians reported with the
ratio checked/unchecked.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from admission import PY, REF, ROOT, WARMUP_S, Server, cpu_seconds, free_port, run_wrk  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is required: apt-get install wrk")
    import engine

    work = Path(tempfile.mkdtemp(prefix="tollgate-budget-"))
    subprocess.run([PY, str(REF / "make_certs.py"), "ec", str(work / "certs")], check=True, cwd=work,
                   capture_output=True)
    (work / "tg").mkdir()
    shutil.copy(work / "certs" / "server.crt", work / "tg" / "tls.crt")
    shutil.copy(work / "certs" / "server.key", work / "tg" / "tls.key")
    subprocess.run([PY, str(REF / "make_payload.py")], check=True, cwd=work, capture_output=True)
    repeated = work / "admissionreview.json"
    distinct = work / "distinct.jsonl"
    distinct.write_text("\n".join(json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                              "request": r}, separators=(",", ":"))
                                  for r in engine.distinct_stream(marker="-__SEQ__")) + "\n")
    tollgate = str(Path(PY).parent / "tollgate")
    ports = [free_port(), free_port()]
    base = [tollgate, "serve", "--local", str(ROOT / "policies"), "--cert-dir", str(work / "tg"),
            "--log-level", "WARNING"]
    servers = [Server("checked", [*base, "--port", str(ports[0])], ports[0], "/validate", work),
               Server("unchecked", [*base, "--inline-work-budget", "0", "--port", str(ports[1])], ports[1],
                      "/validate", work)]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for s in servers:
            s.start()
            for body in (repeated, distinct):
                run_wrk(s.url, body, 8, WARMUP_S)
        for _ in range(args.reps):
            for stream, body in (("distinct", distinct), ("repeated", repeated)):
                for s in servers:
                    assert s.proc is not None
                    before = cpu_seconds(s.proc.pid)
                    point = run_wrk(s.url, body, 8, args.duration)
                    point["cpu_us"] = (cpu_seconds(s.proc.pid) - before) / max(point["requests"], 1) * 1e6
                    results.setdefault((s.name, stream), []).append(point)
    finally:
        for s in servers:
            s.stop()
    print(f"{'stream':10s} {'server':10s} {'RPS':>8s} {'p99 ms':>8s} {'CPU us/req':>11s} {'errors':>7s}")
    table: dict[tuple[str, str], dict[str, float]] = {}
    for (name, stream), points in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rps = statistics.median(p["requests"] / p["seconds"] for p in points)
        p99 = statistics.median(p["p99_ms"] for p in points)
        cpu = statistics.median(p["cpu_us"] for p in points)
        errors = sum(p["errors"] for p in points)
        table[(name, stream)] = {"rps": rps, "p99": p99, "cpu": cpu}
        print(f"{stream:10s} {name:10s} {rps:8.0f} {p99:8.2f} {cpu:11.0f} {errors:7d}")
    for stream in ("distinct", "repeated"):
        c, u = table[("checked", stream)], table[("unchecked", stream)]
        print(f"{stream}: checked/unchecked RPS {c['rps'] / u['rps']:.2f}, CPU/req {c['cpu'] / u['cpu']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
