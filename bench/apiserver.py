"""What a user feels: Pod creates through a real kube-apiserver, without webhooks, with a no-op webhook, with Tollgate.

    python bench/apiserver.py [--quick] [--json out.json] [--compare bench/baseline.json]

Needs tests/realapi/install.sh (kube-apiserver 1.20 and etcd) and wrk (``apt-get install wrk``).

One run, one API server (etcd, kube-apiserver without audit log, on 127.0.0.1), Tollgate's manifests and the
policy sets of policies/ installed as a user would (tests/realapi/tollgate.py), and these scenarios, each with a
Namespace of its own (``bench-<scenario>``, labelled ``bench.tollgate.dev/scenario: <scenario>``) whose webhook
configurations select only it, all registered at once, so a point of one scenario follows a point of another
within a second, with no configuration change between them:

  none      no webhooks: the API server's own cost of a Pod create (admission plugins, etcd write)
  noop      the configurations Tollgate generates for the shipped policies (``tollgate webhook-config --url``),
            pointing at the bare aiohttp server of bench/reference/ (orjson + uvloop), which allows everything
            without a patch: the API server's cost of calling the webhooks, the floor
  noop-patch
            the same no-op server, but its /mutate answers the very JSONPatch Tollgate gives the bench's Pod
            (fetched from Tollgate once at start): the floor of the mutating call, with the API server's cost
            of applying the patch in it
  tollgate  the same configurations pointing at ``tollgate serve`` (under its ServiceAccount, every policy of
            policies/pod-security/restricted and policies/examples, webhook management off so the
            configurations stay the bench's)
  noop-validate, tollgate-validate
            the same without the mutating configuration's webhooks: the validating path alone (what the
            Pod Security policies cost without the add-default-labels example's mutation)

Every create matches every registered webhook's rules and evaluates its namespaceSelector (the API server's
cheap, in-memory part), in every scenario alike.

Load: wrk, keep-alive HTTPS with a bearer token, one thread, c=1 and c=16; each request creates a compliant
Pod (``generateName``: a new Pod every time), which Tollgate admits and mutates (add-default-labels). Every
point gets WARMUP_S seconds of unmeasured load, then --seconds measured; points are repeated (--repeat) in
the order of SCENARIOS, reversed every other repetition (A B B A: each Tollgate scenario is measured right
beside its floor, before it as often as after), and the median reported, Pods deleted after each point. The
ratios are the median over repetitions of each repetition's ratio (this shared machine's speed drifts by up to
1.5x over minutes: a ratio of two points seconds apart carries less of it than a ratio of two medians).
Nothing is pinned: kube-apiserver, etcd, the webhook server and wrk share the machine's cores, as they would
share a small node; the 1-minute load average is recorded per point (other work on the machine shows there).
Reported per point: throughput (creates/s), p50/p99 latency, CPU microseconds per create of kube-apiserver, etcd and the
webhook server (utime+stime from /proc), the mean duration of each webhook call as the API server measured
it (``apiserver_admission_webhook_admission_duration_seconds``) and Tollgate's
own handling per endpoint (``tollgate_admission_duration_seconds``), and the ratios tollgate/noop and
tollgate/noop-patch.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster_objects import compliant_pod  # noqa: E402
from tests.realapi.cluster import Cluster, find_binaries, free_port, stop_process, wait_until  # noqa: E402
from tests.realapi.tollgate import NAMESPACE, Deployment, Tollgate, tollgate_command  # noqa: E402

BENCH = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")
WARMUP_S = 2
SCENARIOS = ("none", "noop", "noop-patch", "tollgate", "noop-validate", "tollgate-validate")
#: (Tollgate, its floor) pairs whose ratios are reported.
PAIRS = (("tollgate", "noop"), ("tollgate", "noop-patch"), ("tollgate-validate", "noop-validate"))
CONCURRENCY = (1, 16)
#: The label of each scenario's Namespace, which its webhook configurations select.
SCENARIO_LABEL = "bench.tollgate.dev/scenario"
CONFIG_API = "/apis/admissionregistration.k8s.io/v1"
WEBHOOK_METRIC = "apiserver_admission_webhook_admission_duration_seconds"
TOLLGATE_METRIC = "tollgate_admission_duration_seconds"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def histogram_sums(text: str, metric: str, label: str) -> dict[str, tuple[float, float]]:
    """``{label value: (sum, count)}`` of a Prometheus histogram, summed over its other labels."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        for suffix, index in (("_sum", 0), ("_count", 1)):
            if line.startswith(metric + suffix + "{"):
                key = re.search(rf'{label}="([^"]*)"', line)
                entry = out.setdefault(key.group(1) if key else "", [0.0, 0.0])
                entry[index] += float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def mean_ms(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Mean of each histogram over the interval, in milliseconds."""
    out = {}
    for key, (total, count) in after.items():
        t0, c0 = before.get(key, (0.0, 0.0))
        if count > c0:
            out[key] = round((total - t0) / (count - c0) * 1000, 3)
    return out


class NoopServer:
    """bench/reference/server_aiohttp.py (orjson + uvloop), serving with Tollgate's certificate."""

    def __init__(self, cert_dir: Path, workdir: Path, patch_file: Path | None = None) -> None:
        self.patch_file = patch_file
        self.dir = workdir / "noop-certs"
        self.dir.mkdir(exist_ok=True)
        shutil.copy(cert_dir / "tls.crt", self.dir / "server.crt")
        shutil.copy(cert_dir / "tls.key", self.dir / "server.key")
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / "reference" / "server_aiohttp.py"), "--port", str(self.port),
             "--certdir", str(self.dir), "--json", "orjson", "--loop", "uvloop",
             *(["--patch-file", str(self.patch_file)] if self.patch_file else [])],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("READY"):
            raise RuntimeError(f"the no-op server did not start: {line!r}")

    def stop(self) -> None:
        stop_process(self.proc)


class Bench:
    def __init__(self, cluster: Cluster, deployment: Deployment, tollgate: Tollgate, noop: NoopServer,
                 noop_patch: NoopServer, workdir: Path) -> None:
        self.cluster, self.deployment, self.tollgate, self.noop = cluster, deployment, tollgate, noop
        self.noop_patch = noop_patch
        self.workdir = workdir
        self.configs = {"none": self.generated(None), "noop": self.generated(noop.url),
                        "noop-patch": self.generated(noop_patch.url), "tollgate": self.generated(tollgate.url)}
        for name in ("noop", "tollgate"):
            self.configs[f"{name}-validate"] = [
                {**c, "webhooks": c["webhooks"] if c["kind"] == "ValidatingWebhookConfiguration" else []}
                for c in self.configs[name]]
        self.bodies = {}
        for scenario in SCENARIOS:
            self.bodies[scenario] = workdir / f"pod-{scenario}.json"
            self.bodies[scenario].write_text(json.dumps(bench_pod(namespace_of(scenario))))
        self.pids = {"kube-apiserver": cluster.apiserver_pid, "etcd": cluster.etcd_pid}

    def generated(self, url: str | None) -> list[dict[str, Any]]:
        """The configurations ``tollgate webhook-config --url URL`` prints (no webhooks without a URL)."""
        policies = self.workdir / "policies.yaml"
        policies.write_text(yaml.safe_dump_all(self.deployment.live_policies()))
        out = subprocess.run([*tollgate_command(), "webhook-config", "--policies", str(policies),
                              "--url", url or "https://127.0.0.1:1", "--namespace", NAMESPACE,
                              "--ca-bundle", str(self.deployment.cert_dir / "ca.crt")],
                             check=True, capture_output=True, text=True).stdout
        configs = [d for d in yaml.safe_load_all(out) if d]
        if url is None:
            for config in configs:
                config["webhooks"] = []
        return configs

    def install(self) -> None:
        """Each scenario's configurations, selecting only its Namespace; waits for the API server to apply them.

        The installed Tollgate's own configurations are emptied (the bench's scoped copies replace them).
        """
        for config in self.configs["none"]:
            path = f"{CONFIG_API}/{config['kind'].lower()}s/{config['metadata']['name']}"
            live = self.cluster.request("GET", path).json()
            live["webhooks"] = []
            answer = self.cluster.request("PUT", path, live)
            assert answer.status == 200, answer.body[:300]
        for scenario in SCENARIOS:
            for config in scoped(self.configs[scenario], scenario):
                answer = self.cluster.request("POST", f"{CONFIG_API}/{config['kind'].lower()}s", config)
                assert answer.status == 201, answer.body[:300]

        def applied() -> bool:  # Tollgate's mutation (add-default-labels) shows only with Tollgate's patch
            for scenario in SCENARIOS:
                answer = self.cluster.request("POST", f"/api/v1/namespaces/{namespace_of(scenario)}/pods?dryRun=All",
                                              json.loads(self.bodies[scenario].read_text()))
                assert answer.status == 201, answer.body[:300]
                labelled = "tollgate.dev/managed" in (answer.json()["metadata"].get("labels") or {})
                if labelled != (scenario in ("tollgate", "noop-patch")):
                    return False
            return True

        wait_until(applied, timeout=30, what="the API server to apply the scenarios' webhook configurations")
        time.sleep(1.0)  # both configurations' informers, not only the mutating one's

    def wrk(self, scenario: str, conc: int, seconds: float) -> dict[str, Any]:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{conc}", f"-d{round(seconds)}s", "--latency", "-s", str(BENCH / "apiserver.lua"),
             f"{self.cluster.url}/api/v1/namespaces/{namespace_of(scenario)}/pods"],
            capture_output=True, text=True, timeout=seconds + 60,
            env={**os.environ, "BODY_FILE": str(self.bodies[scenario]), "TOKEN": self.cluster.admin_token})
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
        if line is None:
            raise RuntimeError(f"wrk gave no summary (rc={out.returncode}): {out.stdout[-300:]} {out.stderr[-300:]}")
        data = json.loads(line[len("WRKJSON "):])
        non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
        errors = sum(data[k] for k in ("err_connect", "err_read", "err_write", "err_timeout"))
        bad = [int(s) for s in data["bad_statuses"].split()]
        return {"requests": data["requests"], "seconds": data["duration_us"] / 1e6,
                "p50_ms": data["lat_p50_us"] / 1000, "p99_ms": data["lat_p99_us"] / 1000,
                "errors": errors + (int(non2xx.group(1)) if non2xx else 0),
                "error_statuses": {str(s): bad.count(s) for s in sorted(set(bad))},
                "last_error": data["last_error"]}

    def point(self, scenario: str, conc: int, seconds: float) -> dict[str, Any]:
        self.wrk(scenario, conc, WARMUP_S)
        pids = dict(self.pids)
        if scenario != "none":
            proc = (self.tollgate if scenario.startswith("tollgate")
                    else self.noop_patch if scenario == "noop-patch" else self.noop).proc
            assert proc is not None
            pids["webhook server"] = proc.pid
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        api0 = histogram_sums(self.cluster.request("GET", "/metrics").body.decode(), WEBHOOK_METRIC, "name")
        tg0 = histogram_sums(self.tollgate.get("/metrics")[1], TOLLGATE_METRIC, "endpoint")
        result = self.wrk(scenario, conc, seconds)
        cpu1 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        api1 = histogram_sums(self.cluster.request("GET", "/metrics").body.decode(), WEBHOOK_METRIC, "name")
        tg1 = histogram_sums(self.tollgate.get("/metrics")[1], TOLLGATE_METRIC, "endpoint")
        n = max(result["requests"], 1)
        result.update(scenario=scenario, c=conc, loadavg=os.getloadavg()[0],
                      rps=round(result["requests"] / result["seconds"], 1),
                      cpu_us={k: round((cpu1[k] - cpu0[k]) / n * 1e6) for k in pids},
                      webhook_call_ms=mean_ms(api0, api1), tollgate_handling_ms=mean_ms(tg0, tg1))
        self.delete_pods(namespace_of(scenario))
        return result

    def delete_pods(self, namespace: str) -> None:
        """Delete the point's Pods: thousands after c=16, which one DeleteCollection may not finish in the API
        server's request timeout (504: what it deleted stays deleted, so deleting again converges)."""
        for _ in range(30):
            answer = self.cluster.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", timeout=300)
            if answer.status == 200:
                return
            assert answer.status == 504, answer.body[:300]
        raise RuntimeError("the bench's Pods could not be deleted in 30 DeleteCollection calls")


def namespace_of(scenario: str) -> str:
    """The Namespace whose Pod creates the scenario's webhook configurations select."""
    return f"bench-{scenario}"


def create_namespaces(cluster: Cluster) -> None:
    """Each scenario's Namespace, labelled with its name."""
    for scenario in SCENARIOS:
        answer = cluster.request("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace_of(scenario), "labels": {SCENARIO_LABEL: scenario}}})
        assert answer.status == 201, answer.body[:300]


def scoped(configs: list[dict[str, Any]], scenario: str) -> list[dict[str, Any]]:
    """``configs`` renamed for ``scenario`` (configurations ``bench-<scenario>``, webhooks ``<scenario>.<name>``),
    each webhook's namespaceSelector narrowed to the scenario's Namespace; configurations without webhooks dropped."""
    out = []
    for config in configs:
        if not config["webhooks"]:
            continue
        webhooks = []
        for original in config["webhooks"]:
            webhook = json.loads(json.dumps(original))
            webhook["name"] = f"{scenario}.{webhook['name']}"
            selector = webhook.setdefault("namespaceSelector", {})
            selector.setdefault("matchExpressions", []).append(
                {"key": SCENARIO_LABEL, "operator": "In", "values": [scenario]})
            webhooks.append(webhook)
        out.append({"apiVersion": config["apiVersion"], "kind": config["kind"],
                    "metadata": {"name": f"bench-{scenario}", "labels": {SCENARIO_LABEL: scenario}},
                    "webhooks": webhooks})
    return out


def bench_pod(namespace: str) -> dict[str, Any]:
    """The compliant Pod every create sends (``generateName``: a new Pod each time)."""
    pod = compliant_pod(namespace, "unused")
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "bench-"
    return pod


def tollgate_patch(tollgate: Tollgate) -> bytes:
    """The JSONPatch (JSON) Tollgate's /mutate answers for the bench's Pod."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "bench", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": namespace_of("tollgate"),
        "operation": "CREATE", "userInfo": {"username": "admin", "groups": ["system:masters"]},
        "object": bench_pod(namespace_of("tollgate")), "oldObject": None}}
    status, answer = tollgate.review(review, "/mutate")
    response = answer.get("response") or {}
    if status != 200 or response.get("patchType") != "JSONPatch":
        raise RuntimeError(f"Tollgate's /mutate gave no JSONPatch for the bench Pod: {status} {answer}")
    return base64.b64decode(response["patch"])


def median_point(points: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float:
        return round(statistics.median(p[key] for p in points), 3)

    def med_dict(key: str) -> dict[str, float]:
        keys = {k for p in points for k in p[key]}
        return {k: round(statistics.median(p[key].get(k, 0) for p in points), 3) for k in sorted(keys)}

    return {"scenario": points[0]["scenario"], "c": points[0]["c"], "runs": len(points), "rps": med("rps"),
            "p50_ms": med("p50_ms"), "p99_ms": med("p99_ms"), "errors": sum(p["errors"] for p in points),
            "requests": sum(p["requests"] for p in points), "cpu_us": med_dict("cpu_us"),
            "webhook_call_ms": med_dict("webhook_call_ms"), "tollgate_handling_ms": med_dict("tollgate_handling_ms")}


def paired_ratios(ours: list[dict[str, Any]], floor: list[dict[str, Any]]) -> dict[str, float]:
    """The median over repetitions of each repetition's p50, p99 and throughput ratio (``ours[i]`` / ``floor[i]``)."""
    def med(key: str) -> float:
        return round(float(statistics.median(a[key] / b[key] for a, b in zip(ours, floor, strict=True))), 2)

    return {"p50": med("p50_ms"), "p99": med("p99_ms"), "throughput": med("rps")}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| scenario | c | creates/s | p50 ms | p99 ms | CPU µs/create: apiserver / etcd / webhook | "
             "webhook calls as the API server timed them, ms | errors |",
             "|---|--:|--:|--:|--:|--|--|--:|"]
    for r in rows:
        cpu = r["cpu_us"]
        calls = ", ".join(f"{k} {v}" for k, v in r["webhook_call_ms"].items()) or "-"
        lines.append(f"| {r['scenario']} | {r['c']} | {r['rps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                     f"{cpu.get('kube-apiserver', 0):,.0f} / {cpu.get('etcd', 0):,.0f} / "
                     f"{cpu.get('webhook server', 0):,.0f} | {calls} | {r['errors']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two repetitions of 4 s per point")
    parser.add_argument("--seconds", type=int, default=10, help="measured seconds per point (default 10)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per point (default 3)")
    parser.add_argument("--json", type=Path, help="write the results here")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import compare  # bench/compare.py: the regression gate

    compare.add_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.repeat = 4, 2
    binaries = find_binaries()
    if isinstance(binaries, str):
        print(f"bench/apiserver.py: {binaries}", file=sys.stderr)
        return 2
    if shutil.which("wrk") is None:
        print("bench/apiserver.py: wrk not found (apt-get install wrk)", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="tollgate-bench-apiserver-"))
    cluster = Cluster(workdir, binaries, audit=False)
    deployment = Deployment(cluster, workdir)
    noop: NoopServer | None = None
    noop_patch: NoopServer | None = None
    tollgate: Tollgate | None = None
    try:
        cluster.start()
        deployment.install()
        deployment.apply_policy_sets()
        create_namespaces(cluster)
        tollgate = Tollgate(cluster, workdir, deployment.sa_kubeconfig, deployment.cert_dir,
                            args=["--no-manage-webhooks"])
        tollgate.start()
        noop = NoopServer(deployment.cert_dir, workdir)
        noop.start()
        # The floor of the mutating call: the no-op answering /mutate with the very patch Tollgate gives
        # the bench's Pod, so the API server's cost of applying it is in both.
        patch_file = workdir / "tollgate-patch.json"
        patch_file.write_bytes(tollgate_patch(tollgate))
        noop_patch = NoopServer(deployment.cert_dir, workdir, patch_file)
        noop_patch.start()
        bench = Bench(cluster, deployment, tollgate, noop, noop_patch, workdir)
        calls = {c["kind"]: [h["name"] for h in c["webhooks"]] for c in bench.configs["tollgate"]}
        print(f"webhook entries (a 1.20 server drops matchConditions: each is called for every Pod create): {calls}",
              flush=True)
        bench.install()
        points: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for conc in CONCURRENCY:
            for rep in range(args.repeat):
                for scenario in SCENARIOS if rep % 2 == 0 else SCENARIOS[::-1]:
                    p = bench.point(scenario, conc, args.seconds)
                    points.setdefault((scenario, conc), []).append(p)
                    print(f"  c={conc} {scenario:17} {p['rps']:8.1f}/s p50 {p['p50_ms']:6.2f} ms p99 "
                          f"{p['p99_ms']:6.2f} ms cpu {p['cpu_us']} calls {p['webhook_call_ms']} "
                          f"tollgate {p['tollgate_handling_ms']} errors {p['errors']} {p['error_statuses']} "
                          f"{p['last_error'][:160]} load {p['loadavg']:.1f}",
                          flush=True)
        rows = [median_point(points[(s, c)]) for c in CONCURRENCY for s in SCENARIOS]
        ratios = {f"{a}/{b} c={c}": paired_ratios(points[(a, c)], points[(b, c)])
                  for c in CONCURRENCY for a, b in PAIRS}
        print()
        print(table(rows))
        for name, r in ratios.items():
            print(f"{name}: p50 {r['p50']}x, p99 {r['p99']}x, throughput {r['throughput']}x")
        # The gate: Tollgate over its floor (the no-op answering the same patch) at c=16, where a user feels it.
        floor = ratios["tollgate/noop-patch c=16"]
        validate = ratios["tollgate-validate/noop-validate c=16"]
        gated = {"c16_p50_x_noop_patch": compare.figure(floor["p50"], compare.LOWER),
                 "c16_p99_x_noop_patch": compare.figure(floor["p99"], compare.LOWER),
                 "c16_throughput_x_noop_patch": compare.figure(floor["throughput"], compare.HIGHER),
                 "c16_validate_p50_x_noop": compare.figure(validate["p50"], compare.LOWER),
                 "c16_validate_throughput_x_noop": compare.figure(validate["throughput"], compare.HIGHER)}
        machine = {"cpus": os.cpu_count(), "platform": platform.platform(),
                   "python": platform.python_version(), "cpu": cpu_model()}
        if args.json:
            args.json.write_text(json.dumps({
                "machine": machine,
                "seconds": args.seconds, "repeat": args.repeat, "warmup_s": WARMUP_S, "webhooks": calls,
                "rows": rows, "ratios": ratios, "gate": gated,
                "points": [p for ps in points.values() for p in ps]}, indent=1))
        return compare.gate(args, "apiserver", gated, "--quick" if args.quick else f"{args.seconds}s x {args.repeat}",
                            machine)
    finally:
        for server in (noop, noop_patch):
            if server is not None:
                server.stop()
        if tollgate is not None:
            tollgate.stop()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
