"""``python -m tests.realapi [--dir DIR] [--port PORT]``: a real API server to run ``tollgate serve`` against by hand.

Starts etcd and kube-apiserver (tests/realapi/install.sh must have run), installs Tollgate's CRDs, RBAC and
empty webhook configurations from manifests/ and the policy sets from policies/, writes the serving
certificate (``tollgate certs``) and a kubeconfig with the ``tollgate`` ServiceAccount's token, prints the
commands to serve and to try it, and runs until Ctrl-C (then stops both by PID).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import threading
from pathlib import Path

from tests.realapi.cluster import Cluster, find_binaries
from tests.realapi.tollgate import Deployment, tollgate_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realapi", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="working directory (default: a new temporary one)")
    parser.add_argument("--port", type=int, default=8443, help="the port you will serve Tollgate on (default 8443)")
    args = parser.parse_args(argv)
    binaries = find_binaries()
    if isinstance(binaries, str):
        print(f"python -m tests.realapi: {binaries}", file=sys.stderr)
        return 2
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="tollgate-realapi-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(workdir, binaries)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster.start()
    try:
        deployment = Deployment(cluster, workdir)
        deployment.install()
        deployment.apply_policy_sets()
        url = f"https://127.0.0.1:{args.port}"
        serve = [*tollgate_command(), "serve", "--kubeconfig", str(deployment.sa_kubeconfig),
                 "--cert-dir", str(deployment.cert_dir), "--host", "127.0.0.1", "--port", str(args.port),
                 "--webhook-url", url]
        kubectl = f"KUBECONFIG={cluster.kubeconfig} {binaries.kubectl}"
        pod = ('{"spec":{"containers":[{"name":"priv","image":"registry.example.com/pause:3.10",'
               '"securityContext":{"privileged":true}}]}}')
        print(f"""
kube-apiserver {cluster.url} (etcd {cluster.etcd_url}); files, logs and audit log in {workdir}
CRDs, RBAC and policies installed. Serve Tollgate as its ServiceAccount (its leader registers the webhooks):

  {shlex.join(serve)}

Then try it:

  {kubectl} run priv --image=registry.example.com/pause:3.10 --overrides={shlex.quote(pod)}
  {kubectl} get clusteradmissionpolicies

Ctrl-C stops kube-apiserver and etcd.""", flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
