"""Self-managed certificates against the fake API server: bootstrap, files, caBundle, rotation with overlap."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes_asyncio.client import ApiClient

from tests.fakeapi.server import FakeApiServer
from webhook.kube.api import ApiException
from webhook.kube.managed_certs import CertMaterial, RotationPolicy, SelfManagedCerts, plan
from webhook.tls import generate as certs

NS = "tollgate-system"
SECRET = f"{NS}/tollgate-tls"
NAMES = tuple(certs.service_dns_names("tollgate", NS))
POLICY = RotationPolicy(dns_names=NAMES, ca_days=300, serving_days=90, overlap=dt.timedelta(minutes=15))
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Wall:
    """A settable wall clock."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def _install(fake: FakeApiServer) -> None:
    """What the self-managed overlay creates: an empty Secret and the two (filled) configurations."""
    fake.apply("secrets", {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                           "metadata": {"name": "tollgate-tls", "namespace": NS}})
    hook = {"name": "validate.tollgate.dev", "clientConfig": {"service": {"name": "tollgate", "namespace": NS}}}
    for kind, plural in (("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
                         ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations")):
        fake.apply(plural, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                            "metadata": {"name": "tollgate"}, "webhooks": [dict(hook)]})


def _material(fake: FakeApiServer) -> CertMaterial:
    secret = fake.get("secrets", SECRET)
    assert secret is not None
    material = CertMaterial.from_secret(secret)
    assert material is not None
    return material


def _bundles(fake: FakeApiServer) -> set[str]:
    out = set()
    for plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        obj = fake.get(plural, "tollgate")
        assert obj is not None
        out |= {h["clientConfig"].get("caBundle", "") for h in obj["webhooks"]}
    return out


def _served_cert_is_trusted(fake: FakeApiServer, cert_dir: Path) -> bool:
    """Does the certificate a replica serves verify against the caBundle every webhook entry carries?"""
    [bundle] = _bundles(fake)
    served = (cert_dir / "tls.crt").read_bytes()
    trusted = certs.load_pem_certificates(base64.b64decode(bundle))
    return any(certs.issued_by(served, c.public_bytes(Encoding.PEM)) for c in trusted)


def _manager(api: ApiClient, cert_dir: Path, wall: Wall, *, leader: bool = True) -> SelfManagedCerts:
    return SelfManagedCerts(api, namespace=NS, cert_dir=cert_dir, policy=POLICY, is_leader=lambda: leader,
                            wall_clock=wall)


def _sans(pem: bytes) -> list[str]:
    cert = x509.load_pem_x509_certificate(pem)
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)


async def test_two_replicas_bootstrap_one_certificate(fake_api: FakeApiServer, api: ApiClient,
                                                      tmp_path: Path) -> None:
    _install(fake_api)
    wall = Wall()
    a = _manager(api, tmp_path / "a", wall, leader=False)
    b = _manager(api, tmp_path / "b", wall, leader=False)
    await asyncio.gather(a.ensure(), b.ensure())
    material = _material(fake_api)
    for d in ("a", "b"):
        assert (tmp_path / d / "tls.crt").read_bytes() == material.cert
        assert (tmp_path / d / "tls.key").read_bytes() == material.key
        assert (tmp_path / d / "ca.crt").read_bytes() == material.bundle
    assert (tmp_path / "a" / "tls.key").stat().st_mode & 0o077 == 0
    assert certs.issued_by(material.cert, material.signer)
    assert sorted(_sans(material.cert)) == sorted(NAMES)
    assert a.ca_bundle() == b.ca_bundle() == base64.b64encode(material.bundle).decode()
    assert fake_api.count("PUT", "/secrets/tollgate-tls") in (1, 2), "at most one write per replica; one wins"
    assert fake_api.count("PUT", "/validatingwebhookconfigurations/tollgate") == 0, "followers never patch"


async def test_leader_patches_ca_bundle_and_follower_never_writes(fake_api: FakeApiServer, api: ApiClient,
                                                                   tmp_path: Path) -> None:
    _install(fake_api)
    wall = Wall()
    leader = _manager(api, tmp_path / "leader", wall)
    await leader.ensure()
    assert _bundles(fake_api) == {leader.ca_bundle()}
    follower = _manager(api, tmp_path / "follower", wall, leader=False)
    wall.now = T0 + dt.timedelta(days=80)  # the serving certificate is due
    assert await follower.sync_once() is None
    assert fake_api.count("PUT", "/secrets/tollgate-tls") == 1
    assert (tmp_path / "follower" / "tls.crt").read_bytes() == _material(fake_api).cert


async def test_serving_certificate_renewed_before_expiry_same_ca(fake_api: FakeApiServer, api: ApiClient,
                                                                 tmp_path: Path) -> None:
    _install(fake_api)
    wall = Wall()
    manager = _manager(api, tmp_path, wall)
    await manager.ensure()
    first = _material(fake_api)
    wall.now = T0 + dt.timedelta(days=50)  # 40 of 90 days left: not yet
    assert await manager.sync_once() is None
    wall.now = T0 + dt.timedelta(days=61)  # 29 days left: under a third
    assert await manager.sync_once() == "serving-renewed"
    second = _material(fake_api)
    assert second.cert != first.cert and second.signer == first.signer and second.bundle == first.bundle
    assert (tmp_path / "tls.crt").read_bytes() == second.cert
    assert _served_cert_is_trusted(fake_api, tmp_path)


async def test_ca_rotation_keeps_both_cas_trusted_through_the_overlap(fake_api: FakeApiServer, api: ApiClient,
                                                                      tmp_path: Path) -> None:
    _install(fake_api)
    wall = Wall()
    manager = _manager(api, tmp_path, wall)
    await manager.ensure()
    old = _material(fake_api)
    steps = []
    # Walk a year a day at a time, checking the invariant after every check.
    while wall.now < T0 + dt.timedelta(days=365):
        wall.now += dt.timedelta(days=1)
        reason = await manager.sync_once()
        if reason is not None:
            steps.append(reason)
        assert _served_cert_is_trusted(fake_api, tmp_path), f"TLS would fail at {wall.now} after {steps}"
        if reason == "ca-rotated":
            rotated = _material(fake_api)
            assert certs.load_pem_certificates(rotated.bundle)[1] == x509.load_pem_x509_certificate(old.signer)
            assert rotated.cert == old.cert or certs.issued_by(rotated.cert, old.signer)
            # The serving certificate switches only after the overlap; the old CA leaves after another.
            wall.now += dt.timedelta(minutes=10)
            assert await manager.sync_once() is None
            wall.now += dt.timedelta(minutes=10)
            assert await manager.sync_once() == "serving-rotated"
            assert _served_cert_is_trusted(fake_api, tmp_path)
            assert len(certs.load_pem_certificates(_material(fake_api).bundle)) == 2
            wall.now += dt.timedelta(minutes=20)
            assert await manager.sync_once() == "bundle-pruned"
            assert _served_cert_is_trusted(fake_api, tmp_path)
            steps += ["serving-rotated", "bundle-pruned"]
    assert "ca-rotated" in steps and steps.index("ca-rotated") < steps.index("bundle-pruned")
    final = _material(fake_api)
    assert final.signer != old.signer and final.bundle == final.signer
    assert manager.metrics.registry.get_sample_value("tollgate_managed_certificate_rotations_total",
                                                     {"what": "ca"}) == 2  # issued + rotated


def test_plan_is_none_when_nothing_is_due() -> None:
    material, reason = plan(None, POLICY, T0) or (None, "")
    assert reason == "issued" and material is not None
    assert plan(material, POLICY, T0 + dt.timedelta(days=1)) is None
    # DNS names changed (another Service name): reissue at once.
    other = RotationPolicy(dns_names=("gate.gate-ns.svc",), ca_days=300, serving_days=90)
    renewed = plan(material, other, T0 + dt.timedelta(days=1))
    assert renewed is not None and renewed[1] == "serving-renewed"
    assert _sans(renewed[0].cert) == ["gate.gate-ns.svc"]


def test_garbage_secret_is_reissued() -> None:
    assert CertMaterial.from_secret({"data": {"ca.crt": "bm90IGEgY2VydA==", "ca-signer.crt": "eA==",
                                              "ca-signer.key": "eA==", "tls.crt": "eA==", "tls.key": "eA=="}}) is None
    assert CertMaterial.from_secret({}) is None


async def test_missing_secret_is_an_error_and_ensure_keeps_trying(
    fake_api: FakeApiServer, api: ApiClient, tmp_path: Path
) -> None:
    attempts = 0

    async def sleep(_seconds: float) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 2:
            _install(fake_api)  # the manifests arrive

    manager = SelfManagedCerts(api, namespace=NS, cert_dir=tmp_path, policy=POLICY, sleep=sleep)
    with pytest.raises(ApiException) as missing:
        await manager.sync_once()
    assert missing.value.status == 404
    await asyncio.wait_for(manager.ensure(), timeout=10)
    assert attempts == 2 and (tmp_path / "tls.crt").exists()
    assert manager.metrics.registry.get_sample_value("tollgate_managed_certificate_errors_total") == 2
