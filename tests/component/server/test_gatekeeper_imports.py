"""``serve --import gatekeeper`` on the fake API server: templates from their informer, each constraint kind
through a dynamic informer that starts when its CRD is served and stops when the CRD goes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from tests.component.server.conftest import until
from tests.component.server.test_imports import Client, serving
from tests.fakeapi.discovery import Served
from tests.fakeapi.server import FakeApiServer
from webhook.kube.client import api_client_for_url
from webhook.server.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
LABELS = ROOT / "tests" / "fixtures" / "gatekeeper-library" / "general" / "requiredlabels"
POLICY = "K8sRequiredLabels/all-must-have-owner"
TEMPLATES = Served("templates.gatekeeper.sh", "v1", "constrainttemplates", "ConstraintTemplate", False)


def constraint_crd(kind: str = "K8sRequiredLabels") -> dict[str, Any]:
    """The CRD Gatekeeper's controller creates for a template's constraint kind."""
    plural = kind.lower()
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.constraints.gatekeeper.sh"},
            "spec": {"group": "constraints.gatekeeper.sh", "scope": "Cluster",
                     "names": {"kind": kind, "plural": plural, "listKind": f"{kind}List", "singular": plural},
                     "versions": [{"name": "v1beta1", "served": True, "storage": True},
                                  {"name": "v1alpha1", "served": True, "storage": False}]}}


def namespace_review(labels: dict[str, str]) -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Namespace"},
        "resource": {"group": "", "version": "v1", "resource": "namespaces"}, "name": "team-a",
        "namespace": "team-a", "operation": "CREATE", "userInfo": {"username": "alice"}, "object": obj}}


@contextlib.asynccontextmanager
async def gatekeeper_cluster(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[FakeApiServer, Client]]:
    fake = FakeApiServer()
    fake.discovery.builtin.append(TEMPLATES)
    await fake.start()
    fake.apply("constrainttemplates", yaml.safe_load((LABELS / "template.yaml").read_text()))
    fake.apply("customresourcedefinitions", constraint_crd())
    fake.apply("k8srequiredlabels", yaml.safe_load(
        (LABELS / "samples" / "all-must-have-owner" / "constraint.yaml").read_text()))
    api = api_client_for_url(fake.url)
    try:
        async with serving(tmp_path, Settings(**{"write_status": True, "pod_name": "r1", "manage_webhooks": False,
                                                 "eval_workers": 0, "imports": frozenset({"gatekeeper"}),
                                                 **settings}), api) as client:
            yield fake, client
    finally:
        await api.close()
        await fake.stop()


async def test_a_constraint_is_enforced_and_its_kind_stops_being_watched_when_its_crd_goes(tmp_path: Path) -> None:
    async with gatekeeper_cluster(tmp_path, discovery_interval=0.2) as (fake, client):
        body = await until(client.readyz)
        assert body["imports"]["watching"] == {"ConstraintTemplate": "templates.gatekeeper.sh/v1",
                                               "K8sRequiredLabels": "constraints.gatekeeper.sh/v1beta1"}
        assert body["policies"][POLICY] == {"ready": True, "reason": "Compiled"}
        denied = await client.validate(namespace_review({}))
        assert denied["allowed"] is False
        assert f"{POLICY}: missing required label, requires all of: owner" in denied["status"]["message"]
        assert (await client.validate(namespace_review({"owner": "me.agilebank.demo"})))["allowed"] is True

        # A constraint's edit is followed: dryrun only audits.
        edited = yaml.safe_load((LABELS / "samples" / "all-must-have-owner" / "constraint.yaml").read_text())
        edited["spec"]["enforcementAction"] = "dryrun"
        fake.apply("k8srequiredlabels", edited)

        async def admitted() -> bool:
            return bool((await client.validate(namespace_review({})))["allowed"])

        await until(admitted)

        # The template is deleted and Gatekeeper's controller deletes the constraint CRD: the kind is no
        # longer served, its informer stops, its policy goes.
        fake.delete("constrainttemplates", "k8srequiredlabels")
        fake.delete("customresourcedefinitions", "k8srequiredlabels.constraints.gatekeeper.sh")

        async def unwatched() -> dict[str, Any] | None:
            body = await client.readyz()
            return body if body and "K8sRequiredLabels" not in body["imports"]["watching"] else None

        body = await until(unwatched)
        assert POLICY not in body["policies"]


async def test_without_import_gatekeeper_no_constraint_is_watched(tmp_path: Path) -> None:
    async with gatekeeper_cluster(tmp_path, imports=frozenset({"kyverno"})) as (fake, client):
        body = await until(client.readyz)
        assert POLICY not in body["policies"]
        assert not fake.log("list", "k8srequiredlabels")
        assert (await client.validate(namespace_review({})))["allowed"] is True


async def test_serve_local_reads_templates_and_constraints(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "constraint.yaml").write_text((LABELS / "samples" / "all-must-have-owner" / "constraint.yaml")
                                              .read_text())
    async with serving(tmp_path, Settings(local_dir=policies, local_poll_interval=0.05, write_status=False,
                                          eval_workers=0)) as client:
        # A constraint without its template: not Ready, with the problem naming the template.
        body = await until(client.readyz)
        assert body["policies"][POLICY] == {"ready": False, "reason": "ImportError"}
        assert body["imports"]["problems"][POLICY] == [
            "K8sRequiredLabels all-must-have-owner: kind: no ConstraintTemplate k8srequiredlabels defines kind "
            "K8sRequiredLabels"]
        (policies / "template.yaml").write_text((LABELS / "template.yaml").read_text())

        async def enforced() -> dict[str, Any] | None:
            body = await client.readyz()
            return body if body and body["policies"].get(POLICY, {}).get("ready") else None

        body = await until(enforced)
        assert body["policies"][POLICY] == {"ready": True, "reason": "Compiled"}
        assert (await client.validate(namespace_review({})))["allowed"] is False
        (policies / "constraint.yaml").unlink()  # the constraint's file goes: its policy goes

        async def withdrawn() -> dict[str, Any] | None:
            body = await client.readyz()
            return body if body and POLICY not in body["policies"] else None

        await until(withdrawn)
        assert (await client.validate(namespace_review({})))["allowed"] is True
