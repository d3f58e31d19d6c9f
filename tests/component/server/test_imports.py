"""Imported policies served: ``serve --local`` over files, and a cluster serving the admission-policy kinds.

In a cluster, discovery decides what is watched: the fake API server serves
ValidatingAdmissionPolicy and its binding when a test adds them to its discovery, as a 1.30 server
does, and not otherwise (a 1.20 server: nothing is watched, nothing fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import shutil
import ssl
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.component.server.conftest import serve_tls, until
from tests.fakeapi.discovery import Served
from tests.fakeapi.server import FakeApiServer
from webhook.kube.client import api_client_for_url
from webhook.server import imports as server_imports
from webhook.server.app import create_app
from webhook.server.settings import Settings
from webhook.tls import generate as certs

ROOT = Path(__file__).resolve().parents[3]
VAP_EXAMPLE = ROOT / "policies" / "examples" / "vap-required-labels"
KYVERNO_EXAMPLE = ROOT / "policies" / "examples" / "kyverno-restrict-image-registries"
PROD = "ValidatingAdmissionPolicy/required-labels/required-labels-prod"
ELSEWHERE = "ValidatingAdmissionPolicy/required-labels/required-labels-elsewhere"


def deployment_review(namespace: str, labels: dict[str, str], image: str = "registry.example.com/app:1"
                      ) -> dict[str, Any]:
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": namespace,
                                                                       "labels": labels},
           "spec": {"selector": {}, "template": {"metadata": {}, "spec": {"containers": [{"name": "c",
                                                                                        "image": image}]}}}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "namespace": namespace,
        "name": "d", "operation": "CREATE", "userInfo": {"username": "alice"}, "object": obj}}


class Client:
    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def readyz(self) -> dict[str, Any] | None:
        async with self.session.get(self.url + "/readyz") as resp:
            return await resp.json() if resp.status == 200 else None  # type: ignore[no-any-return]

    async def validate(self, review: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(self.url + "/validate", json=review) as resp:
            assert resp.status == 200
            return (await resp.json())["response"]  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, settings: Settings, api_client: Any = None) -> AsyncIterator[Client]:
    paths = certs.write_certs(tmp_path / "certs", dns_names=["localhost"], days=1)
    app = create_app(dataclasses.replace(settings, cert_file=paths.cert, key_file=paths.key), api_client=api_client)
    runner, port = await serve_tls(app)
    ctx = ssl.create_default_context(cafile=str(paths.ca))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            yield Client(f"https://localhost:{port}", session)
    finally:
        await runner.cleanup()


# -- serve --local ---------------------------------------------------------------------------------------------

async def test_local_files_of_the_imported_kinds_are_served_and_followed(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    for name in ("admission-policy.yaml", "configmap.yaml", "namespaces.yaml"):
        shutil.copy(VAP_EXAMPLE / name, policies / name)
    for name in ("validating-policy.yaml", "existing.yaml"):
        shutil.copy(KYVERNO_EXAMPLE / name, policies / name)
    async with serving(tmp_path, Settings(local_dir=policies, local_poll_interval=0.05, write_status=False,
                                          eval_workers=0)) as client:
        body = await until(client.readyz)
        assert body["policies"][PROD] == {"ready": True, "reason": "Compiled"}
        assert body["policies"]["ValidatingPolicy/restrict-image-registries"]["ready"] is True
        assert body["imports"]["watching"]["ValidatingAdmissionPolicyBinding"].startswith("admissionregistration")

        denied = await client.validate(deployment_review("shop", {"team": "a"}, image="quay.io/x:1"))
        assert denied["allowed"] is False
        assert f"{PROD}: missing required labels: app.kubernetes.io/name" in denied["status"]["message"]
        assert "ValidatingPolicy/restrict-image-registries: spec.template: images must come from" in \
            denied["status"]["message"]
        warned = await client.validate(deployment_review("sandbox", {}))
        assert warned["allowed"] is True and warned["warnings"] == [
            f"{ELSEWHERE}: missing required labels: team, app.kubernetes.io/name"]

        # An edited binding takes effect; a deleted policy leaves its bindings enforcing nothing, and says so.
        source = list(yaml.safe_load_all((policies / "admission-policy.yaml").read_text()))
        source[1]["spec"]["validationActions"] = ["Warn"]
        (policies / "admission-policy.yaml").write_text(yaml.safe_dump_all(source))

        async def prod_warns() -> bool:
            answer = await client.validate(deployment_review("shop", {"team": "a"}))
            return answer["allowed"] is True and bool(answer.get("warnings"))

        await until(prod_warns)
        (policies / "admission-policy.yaml").write_text(yaml.safe_dump_all(source[1:]))

        async def orphaned() -> dict[str, Any] | None:
            body = await client.readyz()
            return body if body and PROD in body.get("unmatchablePolicies", []) else None

        body = await until(orphaned)
        assert body["imports"]["problems"][PROD] == [
            "ValidatingAdmissionPolicyBinding required-labels-prod: spec.policyName: no ValidatingAdmissionPolicy "
            "required-labels (a binding without its policy enforces nothing)"]
        assert (await client.validate(deployment_review("shop", {})))["allowed"] is True


NO_EVIL = {"matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                                   "operations": ["CREATE"], "resources": ["deployments"]}]},
           "validations": [{"expression": "!object.spec.template.spec.containers.exists(c, "
                                          "c.image.startsWith('evil.example/'))", "message": "no evil images"}]}


def kyverno_policy(kind: str, version: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "no-evil"}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": f"policies.kyverno.io/{version}", "kind": kind, "metadata": meta, "spec": NO_EVIL}


async def test_local_kyverno_v1alpha1_and_namespaced_policies_are_served_confined(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "namespaced.yaml").write_text(yaml.safe_dump(
        kyverno_policy("NamespacedValidatingPolicy", "v1beta1", "team-a")))
    (policies / "cluster.yaml").write_text(yaml.safe_dump(
        dict(kyverno_policy("ValidatingPolicy", "v1alpha1"), metadata={"name": "no-evil-anywhere"})))
    async with serving(tmp_path, Settings(local_dir=policies, local_poll_interval=0.05, write_status=False,
                                          eval_workers=0)) as client:
        body = await until(client.readyz)
        assert body["policies"]["team-a/NamespacedValidatingPolicy/no-evil"]["ready"] is True
        assert body["policies"]["ValidatingPolicy/no-evil-anywhere"]["ready"] is True
        denied = await client.validate(deployment_review("team-a", {}, image="evil.example/x:1"))
        assert denied["allowed"] is False and "NamespacedValidatingPolicy/no-evil" in denied["status"]["message"]
        elsewhere = await client.validate(deployment_review("team-b", {}, image="evil.example/x:1"))
        assert elsewhere["allowed"] is False
        assert "NamespacedValidatingPolicy" not in elsewhere["status"]["message"]


# -- a cluster -------------------------------------------------------------------------------------------------

ADMISSION_KINDS = (Served("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies",
                          "ValidatingAdmissionPolicy", False),
                   Served("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
                          "ValidatingAdmissionPolicyBinding", False))


def example(version: str = "v1") -> list[dict[str, Any]]:
    """The example's policy and bindings, in ``version`` (the API server serves each object in every version)."""
    docs = list(yaml.safe_load_all((VAP_EXAMPLE / "admission-policy.yaml").read_text()))
    for doc in docs:
        doc["apiVersion"] = f"admissionregistration.k8s.io/{version}"
    return docs


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path, served: tuple[Served, ...], *, version: str = "v1", forbidden: str = "",
                  **settings: Any) -> AsyncIterator[tuple[FakeApiServer, Client]]:
    fake = FakeApiServer()
    fake.discovery.builtin += list(served)
    await fake.start()
    for ns in yaml.safe_load_all((VAP_EXAMPLE / "namespaces.yaml").read_text()):
        fake.apply("namespaces", ns)
    fake.apply("configmaps", yaml.safe_load((VAP_EXAMPLE / "configmap.yaml").read_text()))
    policy, prod, _ = example(version)
    fake.apply("validatingadmissionpolicies", policy)
    fake.apply("validatingadmissionpolicybindings", prod)
    if forbidden:
        fake.fail("GET", f"/{forbidden}", code=403, times=1)  # the probe's LIST: RBAC refuses it
    api = api_client_for_url(fake.url)
    try:
        async with serving(tmp_path, Settings(**{"write_status": True, "pod_name": "r1", "manage_webhooks": False,
                                                 "eval_workers": 0, "imports": frozenset({"admission"}),
                                                 **settings}), api) as client:
            yield fake, client
    finally:
        await api.close()
        await fake.stop()


async def test_a_cluster_serving_the_kinds_has_them_enforced_and_followed(tmp_path: Path) -> None:
    async with cluster(tmp_path, ADMISSION_KINDS) as (fake, client):
        body = await until(client.readyz)
        assert body["imports"]["watching"] == {
            "ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding": "admissionregistration.k8s.io/v1"}
        assert body["policies"][PROD] == {"ready": True, "reason": "Compiled"}
        assert (await client.validate(deployment_review("shop", {})))["allowed"] is False

        # A binding created on the API server is watched like any object.
        fake.apply("validatingadmissionpolicybindings", example()[2])

        async def warns() -> bool:
            return bool((await client.validate(deployment_review("sandbox", {}))).get("warnings"))

        await until(warns)
        # Their status belongs to the API server: nothing is written to them (only Tollgate's own kinds').
        writes = [r for r in fake.requests if r.get("method") in ("PATCH", "PUT", "POST")]
        assert not [r for r in writes if "admissionpolic" in str(r.get("resource"))]


async def test_a_cluster_without_the_kinds_watches_nothing_and_is_ready(tmp_path: Path) -> None:
    async with cluster(tmp_path, ()) as (fake, client):
        body = await until(client.readyz)
        assert body["imports"] == {"watching": {}}
        assert (await client.validate(deployment_review("shop", {})))["allowed"] is True
        assert not fake.log("list", "validatingadmissionpolicies")


async def test_a_cluster_imports_nothing_unless_asked(tmp_path: Path) -> None:
    # The API server serves (and so enforces) its admission policies: without --import admission Tollgate
    # neither watches nor enforces them a second time; --import kyverno is not --import admission.
    for imports in (frozenset(), frozenset({"kyverno"})):
        async with cluster(tmp_path, ADMISSION_KINDS, imports=imports) as (fake, client):
            body = await until(client.readyz)
            assert body.get("imports", {"watching": {}})["watching"] == {}
            assert PROD not in body["policies"]
            assert (await client.validate(deployment_review("shop", {})))["allowed"] is True
            assert not fake.log("list", "validatingadmissionpolicies")


async def test_a_kind_the_service_account_may_not_list_is_reported_not_waited_for(tmp_path: Path) -> None:
    async with cluster(tmp_path, ADMISSION_KINDS, forbidden="validatingadmissionpolicybindings") as (_, client):
        body = await until(client.readyz)  # ready: a refused kind is not waited for
        assert list(body["imports"]["refused"]) == ["ValidatingAdmissionPolicyBinding"]
        assert "403" in body["imports"]["refused"]["ValidatingAdmissionPolicyBinding"]
        assert body["imports"]["watching"] == {"ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1"}
        assert PROD not in body["policies"]


async def test_only_v1beta1_served_is_watched_in_v1beta1(tmp_path: Path) -> None:
    beta = tuple(Served(s.group, "v1beta1", s.plural, s.kind, s.namespaced) for s in ADMISSION_KINDS)
    async with cluster(tmp_path, beta, version="v1beta1") as (_, client):
        body = await until(client.readyz)
        assert set(body["imports"]["watching"].values()) == {"admissionregistration.k8s.io/v1beta1"}
        assert (await client.validate(deployment_review("shop", {})))["allowed"] is False


async def test_a_wanted_kind_served_later_is_picked_up_without_waiting_for_the_discovery_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --import admission on a cluster that does not serve the kinds yet: discovery is repeated every
    # PENDING_INTERVAL (not the 300 s discovery interval) until one of them is watched.
    monkeypatch.setattr(server_imports, "PENDING_INTERVAL", 0.1)
    async with cluster(tmp_path, (), discovery_interval=300.0) as (fake, client):
        assert (await until(client.readyz))["imports"] == {"watching": {}}
        fake.discovery.builtin += list(ADMISSION_KINDS)  # the API server starts serving them

        async def watching() -> dict[str, Any] | None:
            body = await client.readyz()  # watched, and its policies filed (compiled off the loop: not at once)
            return body if body and body["imports"]["watching"] and PROD in body["policies"] else None

        body = await until(watching)
        assert body["imports"]["watching"]["ValidatingAdmissionPolicy"] == "admissionregistration.k8s.io/v1"
        assert (await client.validate(deployment_review("shop", {})))["allowed"] is False


# -- a typo never fails open -------------------------------------------------------------------------------------

NOTIN = {"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "Notin", "values": ["dev"]}]}}


async def test_a_typo_in_an_imported_policy_keeps_its_last_good_version_or_fails_closed(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    for name in ("configmap.yaml", "namespaces.yaml"):
        shutil.copy(VAP_EXAMPLE / name, policies / name)
    good = list(yaml.safe_load_all((VAP_EXAMPLE / "admission-policy.yaml").read_text()))[:2]
    source = policies / "admission-policy.yaml"
    source.write_text(yaml.safe_dump_all(good))
    async with serving(tmp_path, Settings(local_dir=policies, local_poll_interval=0.05, write_status=False,
                                          eval_workers=0)) as client:
        await until(client.readyz)
        must_deny = deployment_review("shop", {"team": "a"})
        assert f"{PROD}: missing required labels" in (await client.validate(must_deny))["status"]["message"]
        for doc, field, typo in ((1, "matchResources", NOTIN), (1, "matchResources", "x"), (0, None, [])):
            broken = copy.deepcopy(good)
            if field is None:
                broken[doc]["spec"] = typo
            else:
                broken[doc]["spec"][field] = typo
            source.write_text(yaml.safe_dump_all(broken))

            async def kept() -> dict[str, Any] | None:
                body = await client.readyz()
                return body if body and body["imports"].get("keptLastGood") == [PROD] else None

            body = await until(kept)
            assert PROD in body["imports"]["problems"] and body["policies"][PROD]["ready"] is True
            denied = await client.validate(must_deny)
            assert denied["allowed"] is False and f"{PROD}: missing required labels" in denied["status"]["message"]
            source.write_text(yaml.safe_dump_all(good))

            async def restored() -> bool:
                body = await client.readyz()
                return bool(body) and "keptLastGood" not in body["imports"]

            await until(restored)

        # A binding malformed from its first version has no good version: what it may select gets its
        # failurePolicy (Fail), never an allow.
        other = copy.deepcopy(good[1])
        other["metadata"]["name"] = "required-labels-typo"
        other["spec"]["matchResources"] = "x"
        (policies / "typo.yaml").write_text(yaml.safe_dump(other))
        key = "ValidatingAdmissionPolicy/required-labels/required-labels-typo"

        async def not_ready() -> bool:
            body = await client.validate(deployment_review("sandbox", {"team": "a", "app.kubernetes.io/name": "x"}))
            return key in body.get("status", {}).get("message", "")

        await until(not_ready)
        answer = await client.validate(deployment_review("sandbox", {"team": "a", "app.kubernetes.io/name": "x"}))
        assert answer["allowed"] is False and "policy is not ready" in answer["status"]["message"]


# -- off the event loop ------------------------------------------------------------------------------------------

async def test_reviews_and_healthz_answer_while_an_imported_policy_compiles(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A gate in the compile path holds the edited policy's compile: reviews and /healthz must be answered
    # meanwhile (before: the compile ran on the event loop, 2.0-2.6 s for 32 validations, 9.5 s for 160).
    from webhook.policy import compiler, index
    from webhook.server import policy_events

    entered, release = threading.Event(), threading.Event()
    held: list[bool] = []
    real = compiler.compile_policy

    def gated(obj: dict[str, Any]) -> Any:
        if len((obj.get("spec") or {}).get("validations") or []) == 32:
            entered.set()
            held.append(release.wait(30))  # False: nothing released it (the loop itself was held)
        return real(obj)

    monkeypatch.setattr(index, "compile_policy", gated)
    monkeypatch.setattr(policy_events, "compile_policy", gated)
    policies = tmp_path / "policies"
    policies.mkdir()
    for name in ("configmap.yaml", "namespaces.yaml", "admission-policy.yaml"):
        shutil.copy(VAP_EXAMPLE / name, policies / name)
    async with serving(tmp_path, Settings(local_dir=policies, local_poll_interval=0.05, write_status=False,
                                          eval_workers=0)) as client:
        await until(client.readyz)
        source = list(yaml.safe_load_all((policies / "admission-policy.yaml").read_text()))
        source[0]["spec"]["validations"] = [{"expression": f"object.metadata.name != 'x{i}'"} for i in range(31)] + \
            source[0]["spec"]["validations"]
        (policies / "admission-policy.yaml").write_text(yaml.safe_dump_all(source))
        assert await asyncio.to_thread(entered.wait, 30)
        async with client.session.get(client.url + "/healthz") as resp:
            assert resp.status == 200
        answered = await client.validate(deployment_review("shop", {"team": "a"}))
        assert answered["allowed"] is False  # the last compiled version answers meanwhile
        assert not release.is_set() and held == []  # answered while the compile was still held
        release.set()

        async def recompiled() -> bool:
            body = await client.readyz()
            return bool(body) and len(held) == 2  # both bindings compiled again
        await until(recompiled)
        assert held == [True, True]


async def test_names_that_would_collide_are_both_served(tmp_path: Path) -> None:
    # Policy a with binding b/c and policy a/b with binding c: once one key, one shadowing the other.
    policies = tmp_path / "policies"
    policies.mkdir()
    policy, binding = list(yaml.safe_load_all((VAP_EXAMPLE / "admission-policy.yaml").read_text()))[:2]
    del policy["spec"]["paramKind"], binding["spec"]["paramRef"], binding["spec"]["matchResources"]
    policy["spec"]["variables"] = [{"name": "missing", "expression": "['team'].filter(l, !(l in "
                                                                     "object.metadata.?labels.orValue({})))"}]
    docs = []
    for policy_name, binding_name, message in (("a", "b/c", "'one'"), ("a/b", "c", "'two'")):
        p, b = copy.deepcopy(policy), copy.deepcopy(binding)
        p["metadata"]["name"], b["metadata"]["name"], b["spec"]["policyName"] = policy_name, binding_name, policy_name
        p["spec"]["validations"][0]["messageExpression"] = message
        docs += [p, b]
    (policies / "policies.yaml").write_text(yaml.safe_dump_all(docs))
    async with serving(tmp_path, Settings(local_dir=policies, local_poll_interval=0.05, write_status=False,
                                          eval_workers=0)) as client:
        body = await until(client.readyz)
        keys = ["ValidatingAdmissionPolicy/a%2Fb/c", "ValidatingAdmissionPolicy/a/b%2Fc"]
        assert all(body["policies"][key]["ready"] for key in keys)
        message = (await client.validate(deployment_review("shop", {})))["status"]["message"]
        assert f"{keys[0]}: two" in message and f"{keys[1]}: one" in message


async def test_kyverno_kinds_served_at_v1alpha1_and_namespaced_twins_are_watched(tmp_path: Path) -> None:
    # A Kyverno whose CRDs serve ValidatingPolicy at v1alpha1 only (Kyverno 1.14/1.15) and the namespaced
    # twin at v1: each kind is watched in the version served, the twin confined to its namespace.
    served = (Served("policies.kyverno.io", "v1alpha1", "validatingpolicies", "ValidatingPolicy", False),
              Served("policies.kyverno.io", "v1", "namespacedvalidatingpolicies", "NamespacedValidatingPolicy",
                     True))
    async with cluster(tmp_path, served, imports=frozenset({"kyverno"})) as (fake, client):
        fake.apply("namespacedvalidatingpolicies", kyverno_policy("NamespacedValidatingPolicy", "v1", "team-a"))
        fake.apply("validatingpolicies", dict(kyverno_policy("ValidatingPolicy", "v1alpha1"),
                                              metadata={"name": "no-evil-anywhere"}))

        async def both() -> dict[str, Any] | None:
            body = await client.readyz()
            return body if body and "team-a/NamespacedValidatingPolicy/no-evil" in body["policies"] and \
                "ValidatingPolicy/no-evil-anywhere" in body["policies"] else None

        body = await until(both)
        assert body["imports"]["watching"] == {"ValidatingPolicy": "policies.kyverno.io/v1alpha1",
                                               "NamespacedValidatingPolicy": "policies.kyverno.io/v1"}
        denied = await client.validate(deployment_review("team-a", {}, image="evil.example/x:1"))
        assert "NamespacedValidatingPolicy/no-evil" in denied["status"]["message"]
        elsewhere = await client.validate(deployment_review("team-b", {}, image="evil.example/x:1"))
        assert "NamespacedValidatingPolicy" not in elsewhere["status"]["message"]
