"""An upgrade under load on kube-apiserver 1.20, as docs/upgrading.md describes it.

Tollgate runs behind a stand-in for its Service (a TCP proxy to the ready replicas, as kube-proxy sends
connections to a Service's ready endpoints) with the shipped policies enforced, while a client keeps
creating Pods through the API server: a privileged one (must be denied by Tollgate's policy) and a
compliant one (must be admitted), in turn. Then:

1. the CRDs are re-applied (until Established), then the install manifests (CRDs first, then the server);
2. the rollout: a new Tollgate process is started and becomes ready (/readyz 200) before it is added to the
   Service; the old one leaves the Service and gets SIGTERM (it answers its kept-alive connections with
   ``Connection: close`` for ``--shutdown-delay``, then exits); the new one takes the Lease over.

Every request of the client is checked: no must-deny admitted, no must-allow refused, no answer other than
Tollgate's own decision (a "failed calling webhook" would be a review that reached no replica); no policy
lost by the API server or by the new process. Waits are on events: readiness, the Lease, the client's counts.

Marked ``disruptive``: it stops the session's Tollgate and starts it again at the end.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from tests.realapi.cluster import free_port, wait_until
from tests.realapi.helpers import DENIED, compliant_pod, new_namespace, privileged, unique
from tests.realapi.tollgate import (
    LEASE,
    NAMESPACE,
    Deployment,
    Tollgate,
    crd_documents,
    install_documents,
)

pytestmark = [pytest.mark.disruptive, pytest.mark.timeout(300)]
#: The old replica's ``--shutdown-delay`` (the Deployment's preStop window, shorter than its 5 s default).
SHUTDOWN_DELAY = "2"


class ServiceProxy:
    """A Service's stand-in on 127.0.0.1: each new TCP connection goes to one of the ready backends (round
    robin), bytes piped both ways until either side closes; a backend removed keeps its open connections
    (as kube-proxy's conntrack does) but gets no new ones."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.backends: list[int] = []
        self._next = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.refused = 0  # connections that found no ready backend

    def start(self) -> None:
        thread = threading.Thread(target=self._accept, name="service-proxy", daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._server.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def add(self, port: int) -> None:
        with self._lock:
            self.backends.append(port)

    def remove(self, port: int) -> None:
        with self._lock:
            self.backends.remove(port)

    def _pick(self) -> int | None:
        with self._lock:
            if not self.backends:
                return None
            self._next += 1
            return self.backends[self._next % len(self.backends)]

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            port = self._pick()
            if port is None:
                self.refused += 1
                client.close()
                continue
            try:
                backend = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                self.refused += 1
                client.close()
                continue
            for src, dst in ((client, backend), (backend, client)):
                thread = threading.Thread(target=self._pipe, args=(src, dst), daemon=True)
                thread.start()
                self._threads.append(thread)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.5)
        try:
            while not self._stop.is_set():
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
            with contextlib.suppress(OSError):
                src.close()


@dataclass
class Client:
    """Creates a must-deny and a must-allow Pod in turn through the API server (as the admin) until stopped."""

    deployment: Deployment
    namespace: str
    answers: list[tuple[str, int, str]] = field(default_factory=list)  # (expected, HTTP status, message)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            for expected, pod in (("deny", privileged(compliant_pod(self.namespace, unique("must-deny")))),
                                  ("allow", compliant_pod(self.namespace, unique("must-allow")))):
                resp = self.deployment.cluster.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", pod)
                try:
                    message = str(json.loads(resp.body).get("message") or "")
                except ValueError:
                    message = resp.body.decode(errors="replace")
                self.answers.append((expected, resp.status, message))

    def wrong(self) -> list[tuple[str, int, str]]:
        """Answers that are not Tollgate's right decision."""
        return [(e, s, m) for e, s, m in self.answers
                if not ((e == "allow" and s == 201)
                        or (e == "deny" and s in (400, 403, 422) and DENIED in m
                            and "disallow-privileged-containers" in m))]


def lease_holder(deployment: Deployment) -> str:
    resp = deployment.cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}")
    return str(resp.json()["spec"].get("holderIdentity") or "") if resp.status == 200 else ""


def webhook_urls(deployment: Deployment) -> set[str]:
    urls = set()
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for hook in deployment.live_webhook_configuration(kind).get("webhooks") or []:
            urls.add(hook["clientConfig"].get("url", "").split("/validate")[0].split("/mutate")[0])
    return urls


def policy_keys(deployment: Deployment) -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" if p["metadata"].get("namespace")
            else p["metadata"]["name"] for p in deployment.live_policies()}


def replica(deployment: Deployment, proxy: ServiceProxy, identity: str) -> Tollgate:
    return Tollgate(deployment.cluster, deployment.workdir, deployment.sa_kubeconfig, deployment.cert_dir,
                    identity=identity, args=["--webhook-url", proxy.url, "--ready-max-staleness", "5",
                                             "--shutdown-delay", SHUTDOWN_DELAY])


@pytest.fixture
def proxy(deployment: Deployment) -> Iterator[ServiceProxy]:
    """The Service stand-in; the session's Tollgate is stopped for the test and started again after it."""
    deployment.stop()
    service = ServiceProxy()
    service.start()
    try:
        yield service
    finally:
        service.stop()
        deployment.start()
        deployment.wait_for_webhooks(timeout=60)


def test_crds_and_manifests_reapplied_and_a_rollout_lose_no_policy_and_no_decision(
        deployment: Deployment, proxy: ServiceProxy, report: Callable[[str], None]) -> None:
    policies = policy_keys(deployment)
    old = replica(deployment, proxy, "tollgate-upgrade-old")
    new = replica(deployment, proxy, "tollgate-upgrade-new")
    client = Client(deployment, "")
    thread = threading.Thread(target=client.run, name="upgrade-client", daemon=True)
    try:
        old.start()  # returns once /readyz answers 200: only then is it an endpoint
        proxy.add(old.port)
        wait_until(lambda: lease_holder(deployment) == old.identity, timeout=60, what="the old replica to lead")
        wait_until(lambda: webhook_urls(deployment) == {proxy.url}, timeout=60,
                   what="the webhook configurations to call the Service")
        assert policies <= set(old.readyz()[1]["policies"])
        client.namespace = new_namespace(deployment, "upgrade")  # Namespaces are reviewed too: once it serves
        thread.start()
        wait_until(lambda: len(client.answers) >= 6, timeout=60, what="decisions before the upgrade")

        # 1. CRDs first, then the install manifests.
        crds = crd_documents()
        deployment.apply(crds)
        deployment.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                           *(f"crd/{d['metadata']['name']}" for d in crds), check=True)
        deployment.apply(install_documents())
        assert webhook_urls(deployment) == {proxy.url}, "re-applying the manifests reset the webhook rules"
        before_rollout = len(client.answers)
        wait_until(lambda: len(client.answers) >= before_rollout + 4, timeout=60,
                   what="decisions after the manifests were re-applied")

        # 2. The rollout: the new replica ready and in the Service, then the old one out and SIGTERMed.
        new.start()
        proxy.add(new.port)
        proxy.remove(old.port)
        old.stop()  # SIGTERM; returns once the process has exited
        assert old.proc is not None and old.proc.returncode == 0, old.log_text()[-2000:]
        wait_until(lambda: lease_holder(deployment) == new.identity, timeout=60,
                   what="the new replica to take the Lease over")
        after_rollout = len(client.answers)
        wait_until(lambda: len(client.answers) >= after_rollout + 6, timeout=60,
                   what="decisions after the rollout")
    finally:
        client.stop.set()
        if thread.is_alive():
            thread.join(timeout=60)
        old.stop()
        new_policies = set(new.readyz()[1]["policies"]) if new.proc is not None and new.proc.poll() is None else set()
        new.stop()

    assert policy_keys(deployment) == policies, "the API server lost or gained policies"
    assert policies <= new_policies, f"the new replica does not serve {sorted(policies - new_policies)}"
    assert webhook_urls(deployment) == {proxy.url}
    denies = sum(1 for e, _, _ in client.answers if e == "deny")
    report(f"upgrade: {len(client.answers)} Pods created through the API server ({denies} must-deny), "
           f"{after_rollout - before_rollout} during the new replica's start and the old one's SIGTERM, "
           f"{len(client.wrong())} wrong or missed; {len(policies)} policies kept")
    assert denies >= 8 and len(client.answers) - denies >= 8, client.answers
    assert client.wrong() == [], client.wrong()
    assert proxy.refused == 0
