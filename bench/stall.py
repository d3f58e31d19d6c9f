"""Event-loop stalls while policies are edited under load (issue #14: "never stalls the event loop for more
than a few ms: measure the worst stall while 50 policies are edited under load").

    python bench/stall.py [--policies 50] [--spread 0] [--duration 5] [--conc 8] [--reps 1]
                          [--cprofile out.txt] [--json out.json]

Serves ``tollgate serve --local DIR`` (a subprocess pinned to CPU 0, with uvloop and the evaluation pool,
exactly as the CLI runs it) where DIR holds ``--policies`` ClusterAdmissionPolicies, one per file: renamed
copies of the shipped Pod Security policies (bench/engine.py ``pod_security_variants``, autogen and all),
each with one more validation, ``object.metadata.labels[?'stall-NNN'] != 'vK'``. The subprocess is this
script in ``--child`` mode: it runs ``webhook.cli.main`` unchanged, adding only
  * a lag probe task on the server's event loop (``asyncio.sleep(0.001)`` in a loop; each wake-up later
    than due by ``--lag-threshold`` ms or more is logged with its time): the loop's stalls, measured
    where they happen;
  * timers around the calls that may block the loop when policies change (the --local file scan, the
    policy event handler, ``compile_policy``, plan building, fused-program compiles, garbage
    collections; each call of 0.2 ms or more) and around reviews (``AdmissionHandler.validate``, from
    0.5 ms), so each stall can be attributed.

Load (on CPU 1): wrk c=``--conc`` over the distinct Pod stream (bench/distinct.lua, 128 compliant Pods),
plus a probe client on one kept-alive connection sending a *marker* review every 5 ms: a compliant Pod
labelled ``stall-NNN: vK`` for every policy, which each policy denies once its edit to version K is in
effect, so the denial message tells how many edits are live. Each repetition has two phases of
``--duration`` seconds: *quiet* (no edits) and *edits* (1 s in, every policy file is rewritten with the
expression's version bumped, all at once or spread over ``--spread`` seconds; atomic renames). The
``--local`` source polls its files every second, so up to 1 s passes before the server sees an edit.

wrk keeps the server saturated, and one loop iteration serves every review that arrived meanwhile, so even
without edits the probe sees iterations of about ``--conc`` x one review's time: the quiet phase's worst
stall is the floor the edit phase compares with.

Reports per phase: wrk RPS, p50/p99/max latency; the probe client's p50/p99/max; the loop's worst stall
and how many stalls exceeded 10 ms; for the edit phase, the times (from the first write) until the
server's first and last compile and until the probe saw the first and all edits in effect; and the worst
stalls with what ran inside them. ``--cprofile`` profiles the server's event loop thread during the edit
phase (cProfile; slows it down, so the latencies of such a run are not comparable).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import admission as adm  # noqa: E402  (bench/admission.py: free_port, Server, REF, PY)

#: Stalls above this many milliseconds count against the goal.
GOAL_MS = 10.0
#: The probe client sends a marker review this often (seconds).
PROBE_INTERVAL = 0.005
MARKER = re.compile(r"stall-(\d{3})-v(\d+)")


# ----------------------------------------------------------------------------------------------------------
# The server side (--child): webhook.cli.main's serve, plus the lag probe and the timers.


class _Trace:
    """Line-buffered ``kind name start_monotonic duration_ms`` records (the parent reads them afterwards)."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", buffering=1)

    def write(self, kind: str, name: str, start: float, ms: float) -> None:
        self.file.write(f"{kind} {name} {start:.6f} {ms:.3f}\n")


def _timed(trace: _Trace, name: str, fn: Any, min_ms: float = 0.2) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            ms = (time.monotonic() - t0) * 1000
            if ms >= min_ms:
                trace.write("call", name, t0, ms)

    wrapper.__name__ = getattr(fn, "__name__", name)
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _instrument(trace: _Trace) -> None:
    """Wrap the calls that run on the loop when policies change (this process only; nothing is edited)."""
    import gc

    from webhook.admission import handler
    from webhook.files import local_source as localsource
    from webhook.policy import events, index, plan

    index.compile_policy = _timed(trace, "compile_policy", index.compile_policy)
    try:  # an edit's compile runs in a thread since CompileOffLoop (webhook/server/policy_events.py)
        from webhook.server import policy_events

        policy_events.compile_policy = _timed(trace, "compile_policy", policy_events.compile_policy)
    except ImportError:
        pass
    index.build_plan = _timed(trace, "build_plan", index.build_plan)
    plan.Plan.compile_next = _timed(trace, "Plan.compile_next", plan.Plan.compile_next)  # type: ignore[method-assign]
    events.PolicyEventHandler.on_add = _timed(trace, "PolicyEventHandler.on_add",  # type: ignore[method-assign]
                                              events.PolicyEventHandler.on_add)
    events.PolicyEventHandler.on_update = _timed(  # type: ignore[method-assign]
        trace, "PolicyEventHandler.on_update", events.PolicyEventHandler.on_update)
    localsource.LocalDirectoryListerWatcher._scan = _timed(  # type: ignore[method-assign]
        trace, "LocalDirectoryListerWatcher._scan", localsource.LocalDirectoryListerWatcher._scan)
    # Reviews of 0.5 ms or more too: a loop iteration runs every request that became ready in it.
    handler.AdmissionHandler.validate = _timed(trace, "AdmissionHandler.validate",  # type: ignore[method-assign]
                                               handler.AdmissionHandler.validate, min_ms=0.5)
    started: dict[int, float] = {}

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[info["generation"]] = time.monotonic()
        elif (t0 := started.pop(info["generation"], None)) is not None:
            ms = (time.monotonic() - t0) * 1000
            if ms >= 0.2:
                trace.write("call", f"gc.gen{info['generation']}", t0, ms)

    gc.callbacks.append(on_gc)


async def _lag_probe(trace: _Trace, threshold_ms: float) -> None:
    """Sleep 1 ms at a time; log every wake-up later than due by ``threshold_ms`` or more."""
    worst = 0.0
    wakeups = 0
    since = time.monotonic()
    while True:
        due = time.monotonic() + 0.001
        await asyncio.sleep(0.001)
        now = time.monotonic()
        lag = (now - due) * 1000
        wakeups += 1
        worst = max(worst, lag)
        if lag >= threshold_ms:
            trace.write("lag", "loop", now, lag)
        if now - since >= 1.0:  # a heartbeat: the probe ran, and its worst lag of the last second
            trace.write("beat", str(wakeups), now, worst)
            worst, wakeups, since = 0.0, 0, now


def child(trace_path: Path, threshold_ms: float, serve_args: list[str]) -> int:
    """Run ``tollgate serve`` with the lag probe and the timers; SIGUSR1/SIGUSR2 start/stop cProfile."""
    import cProfile

    from webhook.cli import main as cli
    from webhook.cli import serve as serve_command

    trace = _Trace(trace_path)
    _instrument(trace)
    profiler = cProfile.Profile()
    profile_out = os.environ.get("STALL_CPROFILE")
    if profile_out:
        signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())

        def stop(*_: Any) -> None:
            profiler.disable()
            profiler.dump_stats(profile_out)

        signal.signal(signal.SIGUSR2, stop)
    serve = serve_command._serve

    async def serve_with_probe(*args: Any) -> None:
        probe = asyncio.get_running_loop().create_task(_lag_probe(trace, threshold_ms))
        try:
            await serve(*args)
        finally:
            probe.cancel()

    serve_command._serve = serve_with_probe  # type: ignore[assignment]
    return cli.main(["serve", *serve_args])


# ----------------------------------------------------------------------------------------------------------
# The bench side: files, load, edits, probe client, report.


def policy_text(doc: dict[str, Any], i: int, version: int) -> str:
    """Policy ``i`` at ``version``: it denies Pods labelled ``stall-NNN: v<version>``."""
    import yaml

    doc = copy.deepcopy(doc)
    doc["spec"]["validations"].append({
        "expression": f"object.metadata.?labels.orValue({{}})[?'stall-{i:03d}'].orValue('') != 'v{version}'",
        "message": f"stall-{i:03d}-v{version}"})
    return str(yaml.safe_dump(doc, sort_keys=False))


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def review_line(request: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request},
                      separators=(",", ":"))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 2)


async def run_wrk(url: str, bodies: Path, conc: int, duration: float) -> dict[str, Any]:
    """wrk -t1 on CPU 1 over the distinct stream; its WRKJSON summary (latencies in ms)."""
    proc = await asyncio.create_subprocess_exec(
        "taskset", "-c", "1", "wrk", "-t1", f"-c{conc}", f"-d{duration}s", "--latency", "-s",
        str(BENCH / "distinct.lua"), url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "BODIES_FILE": str(bodies)})
    out, err = await proc.communicate()
    text = out.decode()
    line = next((ln for ln in text.splitlines() if ln.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no summary (rc={proc.returncode}): {text[-300:]} {err.decode()[-300:]}")
    data = json.loads(line[len("WRKJSON "):])
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    errors = sum(data[k] for k in ("err_connect", "err_read", "err_write", "err_timeout"))
    return {"requests": data["requests"], "rps": round(data["requests"] / (data["duration_us"] / 1e6)),
            "p50_ms": data["lat_p50_us"] / 1000, "p99_ms": data["lat_p99_us"] / 1000,
            "p999_ms": data["lat_p999_us"] / 1000, "max_ms": data["lat_max_us"] / 1000,
            "errors": errors + (int(non2xx.group(1)) if non2xx else 0)}


class ProbeClient:
    """Marker reviews on one kept-alive TLS connection, one every :data:`PROBE_INTERVAL` seconds.

    Each sample is ``(sent, latency_ms, edits_in_effect)``: the policies whose version-``target``
    validation denied the marker.
    """

    def __init__(self, url: str, ca: Path, marker_pod: dict[str, Any], policies: int) -> None:
        self.url, self.ca, self.pod, self.policies = url, ca, marker_pod, policies
        self.samples: list[tuple[float, float, int]] = []
        self.errors = 0
        self.target = 0
        self._body = b""

    def aim(self, version: int) -> None:
        pod = copy.deepcopy(self.pod)
        pod["metadata"]["labels"].update({f"stall-{i:03d}": f"v{version}" for i in range(self.policies)})
        request = {"uid": "marker", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                   "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
                   "name": pod["metadata"]["name"], "operation": "CREATE",
                   "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
                   "object": pod, "oldObject": None, "dryRun": False}
        self.target, self._body = version, review_line(request).encode()

    async def run(self, stop: asyncio.Event) -> None:
        import aiohttp

        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.check_hostname = False
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1)) as session:
            next_at = time.monotonic()
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    async with session.post(self.url, data=self._body,
                                            headers={"Content-Type": "application/json"}) as resp:
                        data = await resp.read()
                    latency = (time.monotonic() - sent) * 1000
                    response = json.loads(data)["response"]
                    message = (response.get("status") or {}).get("message", "")
                    live = sum(1 for _, v in MARKER.findall(message) if int(v) == self.target)
                    self.samples.append((sent, latency, live))
                except Exception:  # noqa: BLE001 - a failed probe is counted, not fatal
                    self.errors += 1
                next_at = max(next_at + PROBE_INTERVAL, time.monotonic())
                await asyncio.sleep(next_at - time.monotonic())


def read_trace(path: Path) -> tuple[list[tuple[float, float]], list[tuple[float, float]],
                                    list[tuple[str, float, float]]]:
    """(lag samples, heartbeats, calls) as ``(time, ms)``, ``(time, worst ms)``, ``(name, start, ms)``."""
    lags, beats, calls = [], [], []
    for line in path.read_text().splitlines():
        kind, name, start, ms = line.split()
        if kind == "lag":
            lags.append((float(start), float(ms)))
        elif kind == "beat":
            beats.append((float(start), float(ms)))
        else:
            calls.append((name, float(start), float(ms)))
    return lags, beats, calls


def stall_breakdown(end: float, ms: float, calls: list[tuple[str, float, float]]) -> dict[str, Any]:
    """What ran on the loop during the stall that ended at ``end`` (ms of each timed call inside it)."""
    begin = end - ms / 1000 - 0.001
    inside: dict[str, list[float]] = {}
    for name, start, dur in calls:
        stop = start + dur / 1000
        overlap = min(stop, end) - max(start, begin)
        if overlap > 0:
            inside.setdefault(name, []).append(overlap * 1000)
    return {name: {"calls": len(v), "ms": round(sum(v), 1)} for name, v in sorted(inside.items())}


def summarize_calls(calls: list[tuple[str, float, float]], begin: float, end: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted({c[0] for c in calls}):
        durations = [ms for n, start, ms in calls if n == name and begin <= start <= end]
        if durations:
            out[name] = {"calls": len(durations), "total_ms": round(sum(durations), 1),
                         "max_ms": round(max(durations), 2), "median_ms": round(statistics.median(durations), 2)}
    return out


def phase_report(name: str, begin: float, end: float, wrk: dict[str, Any], probe: ProbeClient,
                 lags: list[tuple[float, float]], beats: list[tuple[float, float]],
                 calls: list[tuple[str, float, float]]) -> dict[str, Any]:
    in_window = [(t, ms) for t, ms in lags if begin <= t <= end]
    beat_max = [ms for t, ms in beats if begin <= t <= end]  # lags under the threshold are only in these
    latencies = [lat for sent, lat, _ in probe.samples if begin <= sent <= end]
    worst = max([ms for _, ms in in_window] + beat_max + [0.0])
    return {"phase": name, "seconds": round(end - begin, 2), "wrk": wrk,
            "probe": {"requests": len(latencies), "p50_ms": percentile(latencies, 0.5),
                      "p99_ms": percentile(latencies, 0.99), "max_ms": round(max(latencies, default=0.0), 2)},
            "loop_worst_stall_ms": round(worst, 2),
            "loop_stalls_over_goal": sum(1 for _, ms in in_window if ms > GOAL_MS),
            "calls": summarize_calls(calls, begin, end)}


async def run_phases(args: argparse.Namespace, url: str, ca: Path, policy_dir: Path, bodies: Path,
                     docs: list[dict[str, Any]], probe: ProbeClient, server: adm.Server,
                     ) -> list[dict[str, Any]]:
    """Alternate quiet and edit phases; returns the raw timings of each (reports are built afterwards)."""
    phases: list[dict[str, Any]] = []
    version = 0
    for rep in range(args.reps):
        for edits in (False, True):
            target = version + 1
            probe.aim(target)  # never matched in a quiet phase; matched per policy as edits land
            stop = asyncio.Event()
            probe_task = asyncio.create_task(probe.run(stop))
            begin = time.monotonic()
            wrk_task = asyncio.create_task(run_wrk(url, bodies, args.conc, args.duration))
            writes: list[float] = []
            if edits:
                texts = [policy_text(doc, i, target) for i, doc in enumerate(docs)]  # rendered before timing
                await asyncio.sleep(1.0)
                if args.cprofile:
                    assert server.proc is not None
                    os.kill(server.proc.pid, signal.SIGUSR1)
                gap = args.spread / max(len(docs) - 1, 1)
                for i, text in enumerate(texts):
                    write_atomically(policy_dir / f"edit-{i:03d}.yaml", text)
                    writes.append(time.monotonic())
                    if args.spread:
                        await asyncio.sleep(max(writes[0] + gap * (i + 1) - time.monotonic(), 0))
                version = target
            wrk = await wrk_task
            end = time.monotonic()
            stop.set()
            await probe_task
            if edits and args.cprofile:
                assert server.proc is not None
                os.kill(server.proc.pid, signal.SIGUSR2)
            phases.append({"rep": rep, "edits": edits, "begin": begin, "end": end, "wrk": wrk, "writes": writes,
                           "target": target})
            print(f"  rep {rep} {'edits' if edits else 'quiet'}: wrk {wrk['rps']} rps, p99 {wrk['p99_ms']} ms, "
                  f"max {wrk['max_ms']} ms", flush=True)
    return phases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policies", type=int, default=50, help="policies edited (default 50)")
    ap.add_argument("--spread", type=float, default=0.0,
                    help="seconds over which the edits are written (default 0: all at once)")
    ap.add_argument("--duration", type=int, default=5, help="seconds per phase (default 5)")
    ap.add_argument("--conc", type=int, default=8, help="wrk connections (default 8)")
    ap.add_argument("--reps", type=int, default=1, help="quiet + edit phase pairs (default 1)")
    ap.add_argument("--lag-threshold", type=float, default=2.0, help="log loop lags from this many ms (default 2)")
    ap.add_argument("--cprofile", type=Path, help="write the server's cProfile of the edit phases here (text)")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--trace", type=Path, help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.child:
        return child(args.trace, args.lag_threshold, [a for a in rest if a != "--"])
    for tool in ("wrk", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is required: apt-get install wrk util-linux")

    import engine  # bench/engine.py: the Pod Security variants and the distinct stream

    work = Path(tempfile.mkdtemp(prefix="tollgate-stall-"))
    server: adm.Server | None = None
    try:
        subprocess.run([adm.PY, str(adm.REF / "make_certs.py"), "ec", str(work / "certs")], check=True, cwd=work,
                       capture_output=True)
        (work / "tg-certs").mkdir()
        shutil.copy(work / "certs" / "server.crt", work / "tg-certs" / "tls.crt")
        shutil.copy(work / "certs" / "server.key", work / "tg-certs" / "tls.key")
        policy_dir = work / "policies"
        policy_dir.mkdir()
        shutil.copy(ROOT / "policies" / "namespaces.yaml", policy_dir / "namespaces.yaml")
        docs = engine.pod_security_variants(args.policies)
        for i, doc in enumerate(docs):
            (policy_dir / f"edit-{i:03d}.yaml").write_text(policy_text(doc, i, 0))
        stream = engine.distinct_stream()
        bodies = work / "distinct.jsonl"
        bodies.write_text("\n".join(review_line(r) for r in stream) + "\n")
        marker_pod = copy.deepcopy(stream[0]["object"])
        marker_pod["metadata"]["name"] = "marker"
        trace = work / "trace.txt"
        env_profile = work / "cprofile.out"
        port = adm.free_port()
        serve = ["--local", str(policy_dir), "--cert-dir", str(work / "tg-certs"), "--log-level", "WARNING",
                 "--port", str(port)]
        if args.cprofile:
            os.environ["STALL_CPROFILE"] = str(env_profile)
        server = adm.Server("tollgate", [adm.PY, str(Path(__file__).resolve()), "--child", "--trace", str(trace),
                                         "--lag-threshold", str(args.lag_threshold), "--", *serve],
                            port, "/validate", work)
        server.start()
        os.sched_setaffinity(0, {1})  # the editor and the probe client beside wrk, off the server's core
        ca = work / "certs" / "ca.crt"
        answer = adm.sanity(server, review_line(stream[0]).encode(), ca)
        assert answer["allowed"], answer
        probe = ProbeClient(server.url, ca, marker_pod, args.policies)
        print(f"{args.policies} policies; warm-up (2 s)...", flush=True)
        asyncio.run(run_wrk(server.url, bodies, args.conc, 2))
        phases = asyncio.run(run_phases(args, server.url, ca, policy_dir, bodies, docs, probe, server))
        server.stop()
        server = None
        lags, beats, calls = read_trace(trace)
        report = build_report(args, phases, probe, lags, beats, calls)
        if args.cprofile and env_profile.exists():
            import pstats

            with args.cprofile.open("w") as out:
                stats = pstats.Stats(str(env_profile), stream=out)
                stats.sort_stats("cumulative").print_stats(60)
            print(f"cProfile of the edit phases: {args.cprofile}")
        print_report(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def build_report(args: argparse.Namespace, phases: list[dict[str, Any]], probe: ProbeClient,
                 lags: list[tuple[float, float]], beats: list[tuple[float, float]],
                 calls: list[tuple[str, float, float]]) -> dict[str, Any]:
    rows = []
    worst_stalls: dict[str, list[dict[str, Any]]] = {"quiet": [], "edits": []}
    for ph in phases:
        name = "edits" if ph["edits"] else "quiet"
        row = phase_report(name, ph["begin"], ph["end"], ph["wrk"], probe, lags, beats, calls)
        row["rep"] = ph["rep"]
        t0 = ph["writes"][0] if ph["edits"] else ph["begin"]

        def rel(t: float | None, t0: float = t0) -> float | None:
            return None if t is None else round((t - t0) * 1000, 1)

        if ph["edits"]:
            compiles = [(start, ms) for n, start, ms in calls if n == "compile_policy" and t0 <= start <= ph["end"]]
            seen = [(sent + lat / 1000, live) for sent, lat, live in probe.samples if ph["begin"] <= sent <= ph["end"]]
            first = next((t for t, live in seen if live > 0), None)
            every = next((t for t, live in seen if live >= args.policies), None)
            row["edits"] = {
                "policies": len(ph["writes"]), "writes_ms": rel(ph["writes"][-1]),
                "first_compile_ms": rel(min((s for s, _ in compiles), default=None)),
                "last_compile_done_ms": rel(max((s + ms / 1000 for s, ms in compiles), default=None)),
                "compiles": len(compiles),
                "first_in_effect_ms": rel(first), "all_in_effect_ms": rel(every),
                "note": "times from the first file write; the --local source polls every 1 s"}
        for t, ms in sorted((x for x in lags if ph["begin"] <= x[0] <= ph["end"]), key=lambda x: -x[1])[:5]:
            worst_stalls[name].append({"rep": ph["rep"], "at_ms": rel(t), "ms": round(ms, 1),
                                       "inside": stall_breakdown(t, ms, calls)})
        rows.append(row)
    quiet = [r for r in rows if r["phase"] == "quiet"]
    edit = [r for r in rows if r["phase"] == "edits"]
    worst = max((r["loop_worst_stall_ms"] for r in edit), default=None)
    machine = {"cpu": next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                            if ln.startswith("model name")), platform.processor()),
               "cores": os.cpu_count(), "python": platform.python_version()}
    return {
        "machine": machine,
        "setup": {"policies": args.policies, "spread_s": args.spread, "duration_s": args.duration,
                  "conc": args.conc, "reps": args.reps, "lag_threshold_ms": args.lag_threshold,
                  "probe_interval_ms": PROBE_INTERVAL * 1000, "cprofile": bool(args.cprofile),
                  "server": "tollgate serve --local (uvloop, 2 evaluation workers), CPU 0; wrk + probe, CPU 1"},
        "phases": rows,
        "worst_stalls_quiet": sorted(worst_stalls["quiet"], key=lambda s: -s["ms"])[:3],
        "worst_stalls_during_edits": sorted(worst_stalls["edits"], key=lambda s: -s["ms"])[:5],
        "probe_errors": probe.errors,
        "summary": {
            "worst_stall_quiet_ms": max((r["loop_worst_stall_ms"] for r in quiet), default=None),
            "worst_stall_edits_ms": worst,
            "all_in_effect_ms": [r["edits"]["all_in_effect_ms"] for r in edit],
            "goal_worst_stall_le_10ms": {"value": worst, "target": GOAL_MS,
                                         "met": None if worst is None else worst <= GOAL_MS},
        },
    }


def print_report(report: dict[str, Any]) -> None:
    print(f"\nmachine: {report['machine']}\nsetup: {report['setup']}")
    print(f"{'rep':>3} {'phase':<6} {'wrk rps':>7} {'p50':>6} {'p99':>7} {'max':>7} | {'probe p50':>9} "
          f"{'p99':>7} {'max':>7} | {'worst stall':>11} {'>10ms':>5}")
    for r in report["phases"]:
        w, p = r["wrk"], r["probe"]
        print(f"{r['rep']:>3} {r['phase']:<6} {w['rps']:>7} {w['p50_ms']:>6.2f} {w['p99_ms']:>7.2f} "
              f"{w['max_ms']:>7.1f} | {p['p50_ms'] or 0:>9.2f} {p['p99_ms'] or 0:>7.2f} {p['max_ms']:>7.1f} | "
              f"{r['loop_worst_stall_ms']:>11.1f} {r['loop_stalls_over_goal']:>5}")
        if "edits" in r:
            print(f"    edits: {r['edits']}")
            for name, c in r["calls"].items():
                print(f"    {name:<36} {c}")
    for key, title in (("worst_stalls_quiet", "quiet phases (from the phase start)"),
                       ("worst_stalls_during_edits", "edit phases (from the first write)")):
        print(f"\nworst stalls of the {title}, with the timed calls inside each:")
        for s in report[key]:
            print(f"  {s['ms']:>7.1f} ms at +{s['at_ms']} ms: {s['inside']}")
    print(f"\nsummary: {json.dumps(report['summary'])}")


if __name__ == "__main__":
    sys.exit(main())
