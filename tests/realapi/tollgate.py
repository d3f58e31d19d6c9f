"""Tollgate deployed against a :class:`~tests.realapi.cluster.Cluster`, as its own process, the way a user would.

* the CRDs and the shipped install manifests (namespace, ServiceAccount, RBAC, the two webhook
  configurations created empty) plus the kustomize components Tollgate's flags need
  (``background-audit`` and ``references`` RBAC, the ``policy-reports`` CRDs), read through their
  kustomizations;
* a TokenRequest token for the ServiceAccount ``tollgate-system/tollgate``: Tollgate runs with exactly the
  shipped RBAC, under that identity;
* ``tollgate certs --ip 127.0.0.1`` for the serving certificate; ``tollgate serve --kubeconfig ...`` on a
  free 127.0.0.1 port, stopped by PID;
* the webhook configurations written by Tollgate's leader (``serve --webhook-url``: clientConfig.url on
  127.0.0.1), which :meth:`Deployment.webhook_differences` compares with ``tollgate webhook-config --url``.

Nothing here imports ``webhook``: Tollgate is a program under test.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from tests.realapi.cluster import REPO, Cluster, free_port, stop_process, wait_until

NAMESPACE = "tollgate-system"
SERVICE_ACCOUNT = "tollgate"
SA_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
LEASE = "tollgate-status-writer"
POLICY_KINDS = ("ClusterAdmissionPolicy", "AdmissionPolicy")
POLICY_RESOURCES = {"ClusterAdmissionPolicy": "clusteradmissionpolicies", "AdmissionPolicy": "admissionpolicies"}
#: What of manifests/install and the components can exist without a kubelet: no Deployment, Service or PDB
#: (Tollgate runs as a local process instead).
INSTALLED_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                   "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
#: The kustomize components the flags below need: --background-audit (its RBAC and the PolicyReport CRDs),
#: and the RBAC of the shipped policies' spec.references.
COMPONENTS = ("background-audit", "policy-reports", "references")
#: The policy sets a user applies (kustomizations under policies/); namespace team-a must exist first.
POLICY_SETS = ("policies/pod-security/restricted", "policies/examples")




def missing_fields(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Paths of what ``sent`` holds that ``stored`` lacks or holds differently (defaults may add fields)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [f"{path or '.'}: sent an object, stored {stored!r}"]
        return [p for key, value in sent.items()
                for p in (missing_fields(value, stored[key], f"{path}.{key}") if key in stored
                          else [f"{path}.{key}: pruned"])]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [f"{path}: sent {len(sent)} items, stored {stored!r}"]
        return [p for i, (a, b) in enumerate(zip(sent, stored, strict=True))
                for p in missing_fields(a, b, f"{path}[{i}]")]
    return [] if sent == stored else [f"{path}: sent {sent!r}, stored {stored!r}"]


# -- manifests ---------------------------------------------------------------------------------------------------


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """The mapping documents of one YAML file."""
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def kustomize_resources(directory: Path) -> list[dict[str, Any]]:
    """The documents a kustomization's (or component's) ``resources`` and ``components`` name, recursively.

    Only those are followed: generators, patches and image rewrites touch kinds these tests do not
    apply (the Secret, the Deployment), and kubectl 1.20's built-in kustomize cannot read these files.
    """
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for entry in [*(kustomization.get("resources") or []), *(kustomization.get("components") or [])]:
        path = (directory / entry).resolve()
        docs += kustomize_resources(path) if path.is_dir() else load_yaml_documents(path)
    return docs


def component_documents() -> list[dict[str, Any]]:
    """The documents of :data:`COMPONENTS`."""
    return [d for c in COMPONENTS for d in kustomize_resources(REPO / "manifests" / "components" / c)]


def crd_documents() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of manifests/crds and of the :data:`COMPONENTS`."""
    docs = kustomize_resources(REPO / "manifests" / "crds") + component_documents()
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


def install_documents() -> list[dict[str, Any]]:
    """manifests/install and the :data:`COMPONENTS`, without the CRDs and the kinds a kubelet would run."""
    docs = kustomize_resources(REPO / "manifests" / "install")
    docs += [d for d in component_documents() if d not in docs]
    return [d for d in docs if d.get("kind") in INSTALLED_KINDS]


def policy_set_documents() -> list[dict[str, Any]]:
    """Policies and params ConfigMaps of :data:`POLICY_SETS`, each once."""
    docs: list[dict[str, Any]] = []
    for policy_set in POLICY_SETS:
        docs += [d for d in kustomize_resources(REPO / policy_set) if d not in docs]
    return docs


def shipped_policy_documents() -> list[dict[str, Any]]:
    """Every policy document anywhere under policies/ (also those no kustomization installs)."""
    return [d for path in sorted((REPO / "policies").rglob("*.yaml")) if path.name != "kustomization.yaml"
            for d in load_yaml_documents(path) if d.get("kind") in POLICY_KINDS]


# -- the deployment ----------------------------------------------------------------------------------------------


def tollgate_command() -> list[str]:
    """The ``tollgate`` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("tollgate")
    return [str(script)] if script.exists() else [sys.executable, "-m", "webhook"]


class Tollgate:
    """``tollgate serve`` against the cluster, as its own process on a free 127.0.0.1 port.

    Args:
        cluster: the API server.
        workdir: where its certificates, kubeconfig and log live.
        kubeconfig: its identity (the ServiceAccount's token).
        cert_dir: from ``tollgate certs``.
        args: more ``serve`` flags.
        identity: ``POD_NAME``: the Lease's holderIdentity.
    """

    def __init__(self, cluster: Cluster, workdir: Path, kubeconfig: Path, cert_dir: Path, *,
                 args: Iterable[str] = (), identity: str = "tollgate-realapi-0") -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.cert_dir = cert_dir
        self.args = list(args)
        self.identity = identity
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.log = workdir / f"{identity}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._ssl = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))

    def command(self) -> list[str]:
        """The ``tollgate serve`` command line."""
        return [*tollgate_command(), "serve", "--kubeconfig", str(self.kubeconfig), "--cert-dir", str(self.cert_dir),
                "--host", "127.0.0.1", "--port", str(self.port), "--shutdown-delay", "0", *self.args]

    def start(self) -> None:
        """Start it; wait until ``/readyz`` answers 200 (or the process exits: RuntimeError with its log)."""
        env = {**os.environ, "POD_NAME": self.identity, "POD_NAMESPACE": NAMESPACE,
               "POD_SERVICE_ACCOUNT": SERVICE_ACCOUNT, "PYTHONUNBUFFERED": "1"}
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        wait_until(lambda: self._alive() and self.get("/readyz")[0] == 200, timeout=60,
                   what=f"Tollgate /readyz (log: {self.log})")

    def _alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"tollgate serve exited ({self.proc.returncode if self.proc else '-'}):\n"
                               + self.log_text()[-3000:])
        return True

    def stop(self) -> None:
        """SIGTERM by PID (SIGKILL after 20 s)."""
        stop_process(self.proc)

    def log_text(self) -> str:
        """Everything it wrote to stdout and stderr so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def get(self, path: str) -> tuple[int, str]:
        """``GET path`` on its HTTPS port: (status, body)."""
        try:
            with urllib.request.urlopen(self.url + path, context=self._ssl, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def readyz(self) -> tuple[int, dict[str, Any]]:
        """``/readyz``: (status, JSON detail)."""
        status, body = self.get("/readyz")
        return status, json.loads(body)

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of ``/metrics`` (0 when absent)."""
        _, text = self.get("/metrics")
        for line in text.splitlines():
            series, _, value = line.rpartition(" ")
            bare = series == name and not labels
            if bare or (series.startswith(name + "{") and all(f'{k}="{v}"' in series for k, v in labels.items())):
                return float(value)
        return 0.0

    def review(self, review: dict[str, Any], path: str = "/validate") -> tuple[int, dict[str, Any]]:
        """POST an AdmissionReview straight to Tollgate (not through the API server)."""
        req = urllib.request.Request(self.url + path, data=json.dumps(review).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=15) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            body = e.read()
            with contextlib.suppress(ValueError):
                return e.code, json.loads(body)
            return e.code, {"body": body.decode(errors="replace")}


class Deployment:
    """Tollgate installed into the cluster from the shipped manifests, serving the shipped policies.

    Call :meth:`install` (CRDs, RBAC, token, certificates), :meth:`start` (``tollgate serve``),
    :meth:`apply_policy_sets`, then :meth:`wait_for_webhooks` (Tollgate's leader writes the webhook
    configurations the policies need).
    """

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.cert_dir = workdir / "certs"
        self.sa_kubeconfig = workdir / "tollgate.kubeconfig"
        self.tollgate: Tollgate | None = None
        self.sent_policies: list[dict[str, Any]] = []

    # -- install

    def kubectl(self, *args: str, obj: Any = None, check: bool = False) -> subprocess.CompletedProcess[str]:
        """kubectl 1.20 as the admin; ``obj`` (a dict or a list of them) is sent as JSON on stdin."""
        if isinstance(obj, list):
            obj = {"apiVersion": "v1", "kind": "List", "items": obj}
        return self.cluster.kubectl(*args, input=None if obj is None else json.dumps(obj), check=check)

    def apply(self, obj: Any, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``kubectl apply --validate=false -f -``: kubectl 1.20 does not know every field of the CRDs'
        schemas (``x-kubernetes-validations``) or the webhook configurations' (``matchConditions``)."""
        return self.kubectl("apply", "--validate=false", "-f", "-", *extra, obj=obj, check=check)

    def install(self) -> None:
        """CRDs (until Established), the install manifests, the ServiceAccount's token, the certificates."""
        crds = crd_documents()
        self.apply(crds)
        names = [f"crd/{d['metadata']['name']}" for d in crds]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, check=True)
        self.apply(install_documents())
        self.write_service_account_kubeconfig()
        subprocess.run([*tollgate_command(), "certs", "--out-dir", str(self.cert_dir), "--ip", "127.0.0.1",
                        "--dns-name", "localhost"], check=True, capture_output=True, text=True)

    def service_account_token(self, seconds: int = 7200) -> str:
        """A TokenRequest token of ``tollgate-system/tollgate``, signed with the service-account key."""
        resp = self.cluster.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": seconds}})
        assert resp.status == 201, resp.body
        return str(resp.json()["status"]["token"])

    def write_service_account_kubeconfig(self) -> None:
        """A kubeconfig with the ServiceAccount's token: Tollgate's identity."""
        self.cluster.write_kubeconfig(self.sa_kubeconfig, user={"token": self.service_account_token()},
                                      namespace=NAMESPACE)

    # -- Tollgate

    def start(self, *args: str) -> Tollgate:
        """``tollgate serve`` under the ServiceAccount, with background audit, its leader keeping the webhook
        configurations by URL; waits for /readyz."""
        self.tollgate = Tollgate(self.cluster, self.workdir, self.sa_kubeconfig, self.cert_dir)
        # --ready-max-staleness 5: the outage scenario sees /readyz step out within its 15 s.
        self.tollgate.args = ["--background-audit", "--webhook-url", self.tollgate.url,
                              "--ready-max-staleness", "5", *args]
        self.tollgate.start()
        return self.tollgate

    def stop(self) -> None:
        """Stop Tollgate by PID."""
        if self.tollgate is not None:
            self.tollgate.stop()

    # -- policies and webhooks

    def apply_policy_sets(self) -> None:
        """Namespace team-a (team-a-require-limits), then the policy sets as a user applies them."""
        self.kubectl("create", "namespace", "team-a", check=True)
        self.sent_policies = policy_set_documents()
        self.apply(self.sent_policies)

    def live_policies(self) -> list[dict[str, Any]]:
        """Every policy in the cluster now."""
        out = self.kubectl("get", ",".join(POLICY_RESOURCES.values()), "--all-namespaces", "-o", "json",
                           check=True).stdout
        return list(json.loads(out)["items"])

    def generated_webhook_configurations(self) -> list[dict[str, Any]]:
        """What ``tollgate webhook-config --url`` prints for the policies in the cluster now."""
        assert self.tollgate is not None, "start Tollgate first"
        policies = self.workdir / "live-policies.yaml"
        policies.write_text(yaml.safe_dump_all(self.live_policies()))
        out = subprocess.run([*tollgate_command(), "webhook-config", "--policies", str(policies),
                              "--url", self.tollgate.url, "--namespace", NAMESPACE,
                              "--service-account", SERVICE_ACCOUNT, "--ca-bundle", str(self.cert_dir / "ca.crt")],
                             check=True, capture_output=True, text=True).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    def live_webhook_configuration(self, kind: str, name: str = "tollgate") -> dict[str, Any]:
        """The configuration as the API server stores it."""
        answer = self.cluster.request("GET", f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{name}")
        assert answer.status == 200, answer.body
        return dict(answer.json())

    def webhook_differences(self) -> dict[str, list[str]]:
        """Where the stored configurations differ from the generated ones, by kind (empty: the same).

        ``matchConditions`` are left out: a 1.20 server drops them (they arrived in 1.27), so they are
        never stored and not counted as tested. Fields the server defaults may be added.
        """
        differences = {}
        for config in self.generated_webhook_configurations():
            live = self.live_webhook_configuration(config["kind"], config["metadata"]["name"])
            sent = [{k: v for k, v in hook.items() if k != "matchConditions"} for hook in config.get("webhooks") or []]
            if diff := missing_fields(sent, live.get("webhooks") or []):
                differences[config["kind"]] = diff
        return differences

    def wait_for_webhooks(self, timeout: float = 30) -> None:
        """Wait until Tollgate's leader has written the configurations the cluster's policies need."""
        wait_until(lambda: not self.webhook_differences(), timeout=timeout,
                   what="Tollgate's leader to write the webhook configurations the policies need")

    def known_to_tollgate(self, key: str) -> bool:
        """Whether Tollgate's policy cache holds ``key`` (``name`` or ``namespace/name``), per its /readyz."""
        assert self.tollgate is not None
        return key in self.tollgate.readyz()[1].get("policies", {})

    def add_policy(self, name: str, spec: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create a ClusterAdmissionPolicy (an AdmissionPolicy with ``namespace``); wait until Tollgate's cache
        holds it and its leader has written the webhook rules it needs."""
        kind = "AdmissionPolicy" if namespace else "ClusterAdmissionPolicy"
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        policy = {"apiVersion": "tollgate.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}
        self.kubectl("create", "--validate=false", "-f", "-", obj=policy, check=True)
        key = f"{namespace}/{name}" if namespace else name
        wait_until(lambda: self.known_to_tollgate(key), timeout=30, what=f"Tollgate to cache policy {key}")
        self.wait_for_webhooks()
        return policy
