"""Self-managed serving certificates: a CA and a serving certificate kept in a Secret, rotated by the leader.

For clusters without cert-manager and without running ``tollgate certs`` by
hand, as controller-runtime's cert-rotator (open-policy-agent/cert-controller)
and Kyverno's certificate renewer do:

* **Where they live.** One Secret (``tollgate-system/tollgate-tls`` by
  default, created empty by the manifests so no ``create`` grant is needed)
  holds ``ca.crt`` (the caBundle: every CA the API server must trust, the
  signing CA first), ``ca-signer.crt`` / ``ca-signer.key`` (the CA that signs),
  and ``tls.crt`` / ``tls.key`` (the serving certificate).
* **How it reaches the pod.** Every replica reads the Secret through the API
  (``get`` on that one name) and writes ``tls.crt``, ``tls.key`` and
  ``ca.crt`` into its certificate directory (an ``emptyDir``), atomically
  and only on change; the server's ``CertReloader`` already hot-reloads from
  there. No kubelet volume-refresh delay, and :meth:`SelfManagedCerts.ensure`
  lets a replica wait for its first certificate before it listens.
* **Bootstrap.** Any replica finding the Secret empty generates the CA and
  certificate and writes them with the ``resourceVersion`` it read; when two
  race, one gets 409 Conflict and adopts the winner's.
* **Rotation (leader only).** The serving certificate is reissued when less
  than ``renew_fraction`` of its validity is left (or its DNS names changed).
  The CA is rotated the same way but in steps, so that at every moment the
  certificate being served verifies against the caBundle the API server
  holds: (1) a new signing CA is added *in front of* the old one in the
  bundle, which the leader patches into both webhook configurations at once;
  (2) after ``overlap`` the serving certificate is reissued by the new CA;
  (3) after another ``overlap`` the old CA leaves the bundle.
  ``overlap`` must exceed the time a replica takes to load new files
  (``check_interval`` plus the server's certificate poll interval).

:func:`plan` is the pure decision; :class:`SelfManagedCerts` does the I/O.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes_asyncio.client import ApiClient

from webhook.aio import cancel_and_wait
from webhook.kube.api import ApiException, call_json, collection_path, object_path
from webhook.kube.webhook_reconciler import GROUP, RESOURCES, VERSION
from webhook.metrics import ManagedCertMetrics
from webhook.tls import generate as certs

__all__ = ["CertMaterial", "RotationPolicy", "SelfManagedCerts", "fresh", "plan"]

_log = logging.getLogger(__name__)

#: Secret annotations recording when the steps of a CA rotation happened (RFC 3339).
CA_ROTATED_AT = "tollgate.dev/ca-rotated-at"
SERVING_ISSUED_AT = "tollgate.dev/serving-issued-at"
_STAMP = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True, slots=True)
class RotationPolicy:
    """What to issue and when to renew.

    Attributes:
        dns_names: SANs of the serving certificate (``certs.service_dns_names``).
        ca_days: CA validity, days.
        serving_days: serving certificate validity, days.
        renew_fraction: renew a certificate when less than this fraction of
            its validity is left (cert-manager's default is 1/3).
        overlap: how long both CAs stay trusted around a CA rotation step.
    """

    dns_names: tuple[str, ...]
    ca_days: int = 365
    serving_days: int = 90
    renew_fraction: float = 1 / 3
    overlap: dt.timedelta = dt.timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class CertMaterial:
    """The Secret's content, decoded.

    Attributes:
        bundle: ``ca.crt``: trusted CAs (PEM), the signer first.
        signer: ``ca-signer.crt``; ``signer_key``: ``ca-signer.key``.
        cert: ``tls.crt``; ``key``: ``tls.key``.
        ca_rotated_at: when the current signer entered the bundle (step 1).
        serving_issued_at: when ``cert`` was issued.
    """

    bundle: bytes
    signer: bytes
    signer_key: bytes
    cert: bytes
    key: bytes
    ca_rotated_at: dt.datetime | None = None
    serving_issued_at: dt.datetime | None = None

    @classmethod
    def from_secret(cls, secret: dict[str, Any]) -> CertMaterial | None:
        """Decode a Secret; ``None`` when it is empty or incomplete or does not parse."""
        data = secret.get("data") or {}
        keys = ("ca.crt", "ca-signer.crt", "ca-signer.key", "tls.crt", "tls.key")
        if not all(data.get(k) for k in keys):
            return None
        try:
            bundle, signer, signer_key, cert, key = (base64.b64decode(data[k], validate=True) for k in keys)
            annotations = (secret.get("metadata") or {}).get("annotations")
            material = cls(bundle, signer, signer_key, cert, key,
                           ca_rotated_at=_time(annotations, CA_ROTATED_AT),
                           serving_issued_at=_time(annotations, SERVING_ISSUED_AT))
            certs.load_pem_certificates(material.bundle)
            x509.load_pem_x509_certificate(material.signer)
            x509.load_pem_x509_certificate(material.cert)
        except ValueError:
            return None
        return material

    def secret_data(self) -> dict[str, str]:
        """``data`` of the Secret (base64 values)."""
        raw = {"ca.crt": self.bundle, "ca-signer.crt": self.signer, "ca-signer.key": self.signer_key,
               "tls.crt": self.cert, "tls.key": self.key}
        return {k: base64.b64encode(v).decode("ascii") for k, v in raw.items()}

    def annotations(self) -> dict[str, str]:
        """The rotation timestamps as Secret annotations."""
        out = {}
        if self.ca_rotated_at is not None:
            out[CA_ROTATED_AT] = self.ca_rotated_at.strftime(_STAMP)
        if self.serving_issued_at is not None:
            out[SERVING_ISSUED_AT] = self.serving_issued_at.strftime(_STAMP)
        return out

    def ca_bundle(self) -> str:
        """The webhook configurations' ``caBundle`` (base64 of ``bundle``)."""
        return base64.b64encode(self.bundle).decode("ascii")


def _time(annotations: dict[str, str] | None, key: str) -> dt.datetime | None:
    value = (annotations or {}).get(key)
    if not value:
        return None
    return dt.datetime.strptime(value, _STAMP).replace(tzinfo=dt.UTC)


def _due(cert: x509.Certificate, now: dt.datetime, fraction: float) -> bool:
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_after_utc - now < lifetime * fraction


def _pem(certificates: list[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(Encoding.PEM) for c in certificates)


def fresh(policy: RotationPolicy, now: dt.datetime) -> CertMaterial:
    """A new CA and serving certificate (bootstrap)."""
    signer, signer_key = certs.new_ca(days=policy.ca_days, now=now)
    cert, key = certs.issue_serving(signer, signer_key, dns_names=list(policy.dns_names), days=policy.serving_days,
                                    now=now)
    return CertMaterial(signer, signer, signer_key, cert, key, ca_rotated_at=None, serving_issued_at=now)


def plan(current: CertMaterial | None, policy: RotationPolicy, now: dt.datetime) -> tuple[CertMaterial, str] | None:
    """The next state of the Secret, or ``None`` when nothing is due (pure but for key generation).

    Args:
        current: the Secret's content; ``None`` when empty or unusable.
        policy: validity, renewal and overlap.
        now: the current time (UTC).

    Returns:
        ``(new_material, reason)`` with ``reason`` one of ``issued``,
        ``ca-rotated`` (step 1), ``serving-rotated`` (step 2),
        ``serving-renewed``, ``bundle-pruned`` (step 3); ``None`` if current.
    """
    if current is None or not certs.issued_by(current.signer, current.signer):
        return fresh(policy, now), "issued"
    signer = x509.load_pem_x509_certificate(current.signer)
    cert = x509.load_pem_x509_certificate(current.cert)
    by_signer = certs.issued_by(current.cert, current.signer)
    bundle = certs.load_pem_certificates(current.bundle)
    if signer not in bundle or signer.not_valid_after_utc <= now:
        return fresh(policy, now), "issued"
    if by_signer and _due(signer, now, policy.renew_fraction):
        new_signer, new_key = certs.new_ca(days=policy.ca_days, now=now)
        others = [c for c in bundle if c.not_valid_after_utc > now]
        return replace(current, bundle=new_signer + _pem(others), signer=new_signer, signer_key=new_key,
                       ca_rotated_at=now), "ca-rotated"
    rotated_long_enough = current.ca_rotated_at is None or now - current.ca_rotated_at >= policy.overlap
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName)
    except x509.ExtensionNotFound:
        sans = []
    if (not by_signer and rotated_long_enough) or (by_signer and (_due(cert, now, policy.renew_fraction)
                                                                  or sorted(sans) != sorted(policy.dns_names))):
        new_cert, new_key = certs.issue_serving(current.signer, current.signer_key, dns_names=list(policy.dns_names),
                                                days=policy.serving_days, now=now)
        reason = "serving-rotated" if not by_signer else "serving-renewed"
        return replace(current, cert=new_cert, key=new_key, serving_issued_at=now), reason
    served_long_enough = current.serving_issued_at is None or now - current.serving_issued_at >= policy.overlap
    if by_signer and served_long_enough and len(bundle) > 1:
        # Nothing is served by an older CA any more: it may leave the bundle.
        return replace(current, bundle=current.signer), "bundle-pruned"
    return None


class SelfManagedCerts:
    """Keeps the certificate Secret current (leader) and the pod's certificate files in step with it (everyone).

    Lifecycle: ``await ensure()`` before serving (returns once the files
    exist; bootstraps the Secret if empty); :meth:`start` then checks every
    ``check_interval`` seconds; :meth:`stop` cancels. :meth:`trigger` (wire
    it to becoming leader) checks at once.

    Args:
        api_client: a configured kubernetes_asyncio ``ApiClient``; not closed here.
        namespace: the Secret's namespace (the webhook's own).
        cert_dir: where ``tls.crt``, ``tls.key`` and ``ca.crt`` are written
            (the server's ``--cert-dir``; an ``emptyDir``).
        policy: names, validity, renewal, overlap.
        secret_name: the Secret (created empty by the manifests).
        webhook_name: ``metadata.name`` of both webhook configurations,
            whose entries get the caBundle.
        is_leader: whether this replica may rotate and patch now.
        check_interval: seconds between checks.
        wall_clock: UTC now (certificate times).
        sleep: ``await sleep(seconds)`` between checks (injectable for tests).
        metrics: where to count; default a private registry.
        request_timeout: seconds per API request.
    """

    def __init__(
        self,
        api_client: ApiClient,
        *,
        namespace: str,
        cert_dir: Path,
        policy: RotationPolicy,
        secret_name: str = "tollgate-tls",
        webhook_name: str = "tollgate",
        is_leader: Callable[[], bool] = lambda: True,
        check_interval: float = 60.0,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        metrics: ManagedCertMetrics | None = None,
        request_timeout: float = 10.0,
    ) -> None:
        self._api = api_client
        self._namespace = namespace
        self._cert_dir = cert_dir
        self._policy = policy
        self._secret_path = object_path("", "v1", "secrets", secret_name, namespace)
        self._webhook_name = webhook_name
        self._is_leader = is_leader
        self._check_interval = check_interval
        self._wall_clock = wall_clock
        self._sleep = sleep
        self.metrics = metrics if metrics is not None else ManagedCertMetrics()
        self._request_timeout = request_timeout
        self._material: CertMaterial | None = None
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def ca_bundle(self) -> str:
        """The current caBundle (base64), ``""`` before the first :meth:`ensure`; for the webhook reconciler."""
        return self._material.ca_bundle() if self._material is not None else ""

    def trigger(self) -> None:
        """Check now (e.g. right after becoming leader)."""
        self._wakeup.set()

    async def ensure(self, *, poll: float = 1.0) -> None:
        """Make sure the Secret holds a certificate and the files are written; retry until so.

        Any replica may bootstrap an empty Secret (first writer wins, see the
        module docstring); rotation stays with the leader.

        Args:
            poll: seconds between attempts while the API is unreachable.
        """
        while True:
            try:
                await self.sync_once(bootstrap=True)
            except Exception as exc:  # noqa: BLE001 — keep trying: the pod cannot serve without a certificate
                self.metrics.errors.inc()
                _log.warning("self-managed certificates: %r; retrying", exc)
            if self._material is not None:
                return
            await self._sleep(poll)

    async def sync_once(self, *, bootstrap: bool = False) -> str | None:
        """Read the Secret; as leader (or bootstrapping), write what :func:`plan` says; write the files.

        Returns:
            The :func:`plan` reason written, or ``None``.

        Raises:
            ApiException: the Secret is missing (404) or a request failed;
                a 409 on the write is not an error (re-read next time).
        """
        secret = await call_json(self._api, "GET", self._secret_path, timeout=self._request_timeout)
        current = CertMaterial.from_secret(secret)
        reason = None
        leader = self._is_leader()
        if leader or (bootstrap and current is None):
            step = plan(current, self._policy, self._wall_clock())
            if step is not None and (leader or step[1] == "issued"):
                material, reason = step
                try:
                    secret = await self._write_secret(secret, material)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    # Someone else wrote first (a racing bootstrap, or a new leader): adopt theirs.
                    secret = await call_json(self._api, "GET", self._secret_path, timeout=self._request_timeout)
                    reason = None
                else:
                    self.metrics.rotations.labels("ca" if reason in ("issued", "ca-rotated") else "serving").inc()
                    _log.info("self-managed certificates: %s", reason)
                current = CertMaterial.from_secret(secret)
        if current is not None:
            self._material = current
            self._write_files(current)
            self._export(current)
            if leader:
                await self._patch_ca_bundles(current.ca_bundle())
        return reason

    async def start(self) -> None:
        """Start checking every ``check_interval`` seconds. Idempotent."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="self-managed-certs")

    async def stop(self) -> None:
        """Cancel the checks."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._check_interval):
                    await self._wakeup.wait()
            self._wakeup.clear()
            try:
                await self.sync_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 — the loop must outlive any failed check
                self.metrics.errors.inc()
                _log.warning("self-managed certificates: %r", exc)

    async def _write_secret(self, secret: dict[str, Any], material: CertMaterial) -> dict[str, Any]:
        meta = dict(secret.get("metadata") or {})
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k not in (CA_ROTATED_AT, SERVING_ISSUED_AT)}
        meta["annotations"] = {**annotations, **material.annotations()}
        # PUT with the resourceVersion read: a concurrent writer makes this a 409, never a lost update.
        body = {**secret, "metadata": meta, "data": material.secret_data()}
        return await call_json(self._api, "PUT", self._secret_path, body=body, timeout=self._request_timeout)

    def _write_files(self, material: CertMaterial) -> None:
        self._cert_dir.mkdir(parents=True, exist_ok=True)
        # Key first: the reloader, seeing a new tls.crt, must find its key already there.
        for name, data, mode in (("tls.key", material.key, 0o600), ("ca.crt", material.bundle, 0o644),
                                 ("tls.crt", material.cert, 0o644)):
            path = self._cert_dir / name
            if path.exists() and path.read_bytes() == data:
                continue
            tmp = path.with_name(f".{name}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)

    def _export(self, material: CertMaterial) -> None:
        for what, pem in (("ca", material.signer), ("serving", material.cert)):
            cert = x509.load_pem_x509_certificate(pem)
            self.metrics.expiry.labels(what).set(cert.not_valid_after_utc.timestamp())

    async def _patch_ca_bundles(self, bundle: str) -> None:
        for plural, _short in RESOURCES.values():
            path = f"{collection_path(GROUP, VERSION, plural)}/{self._webhook_name}"
            try:
                live = await call_json(self._api, "GET", path, timeout=self._request_timeout)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            hooks = live.get("webhooks") or []
            if all((h.get("clientConfig") or {}).get("caBundle") == bundle for h in hooks):
                continue
            for hook in hooks:
                hook.setdefault("clientConfig", {})["caBundle"] = bundle
            await call_json(self._api, "PUT", path, body=live, timeout=self._request_timeout)

