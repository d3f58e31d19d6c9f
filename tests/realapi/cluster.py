"""A real kube-apiserver (v1.20, built by tests/realapi/install.sh) and etcd, on 127.0.0.1, for tests and benchmarks.

No Tollgate code here: the realapi tests drive Tollgate as its own process and talk to the API server with
kubectl or plain HTTPS, as a user would. :class:`Cluster` generates a CA, the API server's serving
certificate (SAN 127.0.0.1), an admin client certificate (``system:masters``) and a service-account key pair,
starts etcd and kube-apiserver on free ports (RBAC, the two admission webhook plugins, the audit log at level
Metadata, ephemeral containers on), writes an admin kubeconfig, and stops both by PID. It can restart the
API server (same flags, same etcd) and compact etcd, for the outage tests.

There is no controller manager, scheduler or kubelet: Pods stay Pending, deleted namespaces stay
Terminating, there is no default ServiceAccount (the ServiceAccount admission plugin is off).
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO = Path(__file__).resolve().parents[2]
INSTALLER = "tests/realapi/install.sh"
SERVICE_CIDR = "10.0.0.0/24"
ADMISSION_PLUGINS = ("NamespaceLifecycle,LimitRanger,DefaultTolerationSeconds,ResourceQuota,"
                     "MutatingAdmissionWebhook,ValidatingAdmissionWebhook")
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
# Metadata: who, what, the response code and the admission webhooks' audit annotations; no bodies.
- level: Metadata
"""


def install_dir() -> Path:
    """Where tests/realapi/install.sh puts the binaries (``$TOLLGATE_REALAPI_DIR``, else the XDG cache)."""
    if os.environ.get("TOLLGATE_REALAPI_DIR"):
        return Path(os.environ["TOLLGATE_REALAPI_DIR"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tollgate" / "realapi"


@dataclass(frozen=True)
class Binaries:
    """The programs a cluster runs."""

    apiserver: Path
    kubectl: Path
    etcd: Path
    etcdctl: Path


def find_binaries() -> Binaries | str:
    """The installed binaries, or a one-line reason why they are missing (how to install them)."""
    root = install_dir()
    found = {"kube-apiserver": root / "bin" / "kube-apiserver", "kubectl": root / "bin" / "kubectl",
             "etcd": Path(shutil.which("etcd") or "/usr/bin/etcd"),
             "etcdctl": Path(shutil.which("etcdctl") or "/usr/bin/etcdctl")}
    missing = [name for name, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        return (f"no {', '.join(missing)} (looked in {root}/bin and PATH): run {INSTALLER} once "
                f"(~5 min, builds kube-apiserver 1.20 from Debian's source)")
    return Binaries(found["kube-apiserver"], found["kubectl"], found["etcd"], found["etcdctl"])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- certificates ------------------------------------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Certificate, Any] | None, *,
          ca: bool = False, server: bool = False, client: bool = False,
          dns: Sequence[str] = (), ips: Sequence[str] = ()) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signer = (issuer[0].subject, issuer[1]) if issuer else (subject, key)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                      content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False,
                                                      encipher_only=False, decipher_only=False), critical=True)
    usages = [u for u, on in ((ExtendedKeyUsageOID.SERVER_AUTH, server), (ExtendedKeyUsageOID.CLIENT_AUTH, client))
              if on]
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def write_pki(directory: Path) -> None:
    """CA, API server serving pair, admin client pair and bearer token, service-account key pair, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _cert(_name("tollgate-realapi-ca"), ca_key, None, ca=True)
    first_service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
    files: dict[str, bytes] = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM), "ca.key": _pem_key(ca_key)}
    server_key = _key()
    files["apiserver.key"] = _pem_key(server_key)
    files["apiserver.crt"] = _cert(
        _name("kube-apiserver"), server_key, (ca, ca_key), server=True,
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ips=("127.0.0.1", first_service_ip)).public_bytes(serialization.Encoding.PEM)
    admin_key = _key()
    files["admin.key"] = _pem_key(admin_key)
    files["admin.crt"] = _cert(_name("admin", "system:masters"), admin_key, (ca, ca_key),
                               client=True).public_bytes(serialization.Encoding.PEM)
    sa_key = _key()
    files["sa.key"] = _pem_key(sa_key)
    files["sa.pub"] = sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo)
    files["admin.token"] = secrets.token_hex(24).encode()
    # --token-auth-file: token,user,uid,"group,..." (for clients without client certificates, e.g. wrk)
    files["tokens.csv"] = b'%s,admin,admin,"system:masters"\n' % files["admin.token"]
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)


# -- processes ---------------------------------------------------------------------------------------------------


def stop_process(proc: subprocess.Popen[bytes] | None, *, timeout: float = 20.0) -> None:
    """SIGTERM ``proc`` by its PID, SIGKILL after ``timeout`` seconds; reap it."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def wait_until(check: Any, *, timeout: float, what: str, interval: float = 0.1) -> None:
    """Call ``check()`` until it returns true; raise TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Response:
    """An HTTP answer from the API server."""

    status: int
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


class Cluster:
    """etcd and kube-apiserver on free 127.0.0.1 ports, with their files under ``workdir``.

    Args:
        workdir: a private directory (certificates, etcd data, logs, kubeconfig, audit log).
        binaries: from :func:`find_binaries`.
        audit: write the API server's audit log (``audit.log``); off for benchmarks.
        extra_flags: more kube-apiserver flags.
    """

    def __init__(self, workdir: Path, binaries: Binaries, *, audit: bool = True,
                 extra_flags: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.bin = binaries
        self.pki = workdir / "pki"
        self.audit_log = workdir / "audit.log" if audit else None
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.apiserver_log = workdir / "apiserver.log"
        self.etcd_log = workdir / "etcd.log"
        self.port = free_port()
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self._extra_flags = list(extra_flags)
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._ssl: ssl.SSLContext | None = None
        self.apiserver_starts = 0
        #: (exec, /readyz answered) of every kube-apiserver start, ``time.time()`` seconds: while it starts it
        #: refuses even authorized requests (403 until its RBAC caches have synced).
        self.starting: list[tuple[float, float]] = []

    # -- lifecycle

    def start(self) -> None:
        """Certificates, etcd, kube-apiserver (until /readyz), admin kubeconfig; stops what started on failure."""
        try:
            write_pki(self.pki)
            if self.audit_log is not None:
                (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
            self._start_etcd()
            self.start_apiserver()
            self.write_kubeconfig(self.kubeconfig, user={
                "client-certificate": str(self.pki / "admin.crt"), "client-key": str(self.pki / "admin.key")})
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd, by PID (SIGKILL after 10 s each)."""
        stop_process(self._apiserver, timeout=10)
        stop_process(self._etcd, timeout=10)

    def _start_etcd(self) -> None:
        data = self.workdir / "etcd-data"
        data.mkdir(mode=0o700, exist_ok=True)
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        with self.etcd_log.open("ab") as log:
            self._etcd = subprocess.Popen(
                [str(self.bin.etcd), "--name", "realapi", "--data-dir", str(data),
                 "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"realapi={peer}", "--initial-cluster-state", "new",
                 "--listen-metrics-urls", "", "--logger", "zap", "--log-outputs", "stderr"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)

        def healthy() -> bool:
            self._check_alive(self._etcd, "etcd", self.etcd_log)
            conn = http.client.HTTPConnection("127.0.0.1", self.etcd_port, timeout=2)
            try:
                conn.request("GET", "/health")
                return b'"true"' in conn.getresponse().read()
            finally:
                conn.close()

        wait_until(healthy, timeout=30, what=f"etcd /health (log: {self.etcd_log})")

    def apiserver_args(self) -> list[str]:
        """The kube-apiserver command line."""
        args = [
            str(self.bin.apiserver),
            "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--secure-port", str(self.port), "--insecure-port", "0",
            "--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
            "--tls-cert-file", str(self.pki / "apiserver.crt"),
            "--tls-private-key-file", str(self.pki / "apiserver.key"),
            "--client-ca-file", str(self.pki / "ca.crt"), "--token-auth-file", str(self.pki / "tokens.csv"),
            "--authorization-mode", "RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(self.pki / "sa.pub"),
            "--service-account-signing-key-file", str(self.pki / "sa.key"),
            "--api-audiences", "https://kubernetes.default.svc",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--enable-admission-plugins", ADMISSION_PLUGINS,
            "--disable-admission-plugins", "ServiceAccount",
            # pods/ephemeralcontainers is alpha in 1.20.
            "--feature-gates", "EphemeralContainers=true",
            "--allow-privileged=true", "--profiling=false", "--v=1",
        ]
        if self.audit_log is not None:
            args += ["--audit-policy-file", str(self.workdir / "audit-policy.yaml"),
                     "--audit-log-path", str(self.audit_log), "--audit-log-format", "json",
                     "--audit-log-mode", "blocking"]
        return args + self._extra_flags

    def start_apiserver(self, *, timeout: float = 90.0) -> None:
        """Start kube-apiserver (same port, flags and etcd every time) and wait for /readyz."""
        began = time.time()
        with self.apiserver_log.open("ab") as log:
            log.write(f"--- start {self.apiserver_starts + 1} at {time.time():.3f}\n".encode())
            log.flush()
            self._apiserver = subprocess.Popen(self.apiserver_args(), stdin=subprocess.DEVNULL, stdout=log,
                                               stderr=log, start_new_session=True)
        self.apiserver_starts += 1

        def ready() -> bool:
            self._check_alive(self._apiserver, "kube-apiserver", self.apiserver_log)
            return self.request("GET", "/readyz", timeout=2).status == 200

        wait_until(ready, timeout=timeout, what=f"kube-apiserver /readyz (log: {self.apiserver_log})", interval=0.2)
        self.starting.append((began, time.time()))

    def stop_apiserver(self, *, grace: float = 20.0) -> None:
        """Stop kube-apiserver by PID (etcd keeps running): SIGTERM, SIGKILL after ``grace`` seconds.

        A 1.20 server holds open watches through its graceful shutdown (up to a minute): with clients
        watching, a short ``grace`` is what ends it.
        """
        stop_process(self._apiserver, timeout=grace)
        self._apiserver = None

    def restart_apiserver(self, *, down_seconds: float = 0.0, grace: float = 20.0) -> None:
        """Stop kube-apiserver, stay down ``down_seconds``, start it again and wait for /readyz."""
        self.stop_apiserver(grace=grace)
        time.sleep(down_seconds)
        self.start_apiserver()

    @staticmethod
    def _check_alive(proc: subprocess.Popen[bytes] | None, name: str, log: Path) -> None:
        if proc is None or proc.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
            raise RuntimeError(f"{name} exited ({proc.returncode if proc else 'never started'}); log {log}:\n"
                               + "\n".join(tail))

    # -- etcd

    def etcdctl(self, *args: str) -> str:
        """Run ``etcdctl --endpoints <this etcd> ARGS`` (API v3) and return its stdout."""
        result = subprocess.run([str(self.bin.etcdctl), "--endpoints", self.etcd_url, *args], check=True,
                                capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
        return result.stdout

    def etcd_revision(self) -> int:
        """etcd's current revision (what Kubernetes calls the latest resourceVersion)."""
        status = json.loads(self.etcdctl("endpoint", "status", "--write-out", "json"))
        return int(status[0]["Status"]["header"]["revision"])

    def compact(self) -> int:
        """``etcdctl compact`` at the current revision (every older resourceVersion answers 410); returns it."""
        revision = self.etcd_revision()
        self.etcdctl("compact", str(revision), "--physical")
        return revision

    # -- clients

    def write_kubeconfig(self, path: Path, *, user: dict[str, str], namespace: str = "default") -> Path:
        """A kubeconfig for this API server and ``user`` (``token``, or ``client-certificate``/``client-key``)."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "realapi",
            "clusters": [{"name": "realapi", "cluster": {"server": self.url,
                                                         "certificate-authority": str(self.pki / "ca.crt")}}],
            "users": [{"name": "realapi", "user": user}],
            "contexts": [{"name": "realapi", "context": {"cluster": "realapi", "user": "realapi",
                                                         "namespace": namespace}}],
        }
        path.write_text(json.dumps(config, indent=1))
        path.chmod(0o600)
        return path

    def kubectl(self, *args: str, input: str | None = None, check: bool = False, kubeconfig: Path | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run the installed kubectl 1.20 against this API server (admin unless ``kubeconfig``)."""
        result = subprocess.run([str(self.bin.kubectl), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
                                input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    @property
    def apiserver_pid(self) -> int:
        """The running kube-apiserver's PID."""
        assert self._apiserver is not None, "kube-apiserver is not running"
        return self._apiserver.pid

    @property
    def etcd_pid(self) -> int:
        """The running etcd's PID."""
        assert self._etcd is not None, "etcd is not running"
        return self._etcd.pid

    @property
    def admin_token(self) -> str:
        """A bearer token of the same admin (``system:masters``), for clients without client certificates."""
        return (self.pki / "admin.token").read_text().strip()

    def ssl_context(self) -> ssl.SSLContext:
        """TLS to the API server as the admin (client certificate)."""
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
            ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
            self._ssl = ctx
        return self._ssl

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                headers: dict[str, str] | None = None, timeout: float = 30) -> Response:
        """One HTTPS request as the admin; ``body`` is sent as JSON unless it is bytes."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl_context(), timeout=timeout)
        try:
            data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
            hdrs = {"Accept": "application/json", **(headers or {})}
            if data is not None:
                hdrs["Content-Type"] = content_type
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return Response(resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()})
        finally:
            conn.close()

    # -- audit log

    def audit_events(self) -> list[dict[str, Any]]:
        """Every event of the audit log so far (stage ResponseComplete/ResponseStarted/Panic), oldest first."""
        if self.audit_log is None or not self.audit_log.exists():
            return []
        events = []
        for line in self.audit_log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events
