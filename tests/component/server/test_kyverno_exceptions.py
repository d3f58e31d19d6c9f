"""Kyverno's CEL PolicyException served by ``serve --local``: read from the directory beside the Kyverno policy.

An exempted Deployment is admitted with the ``exceptions`` audit annotation naming the Kyverno exception;
one in another namespace is still denied (confined, though Kyverno would apply it cluster-wide); once the
file is gone the same Deployment is denied again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.component.server.conftest import until
from tests.component.server.test_imports import cluster, deployment_review, kyverno_policy, serving
from tests.fakeapi.discovery import Served
from webhook.server.settings import Settings

EXCEPTION: dict[str, Any] = {
    "apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
    "metadata": {"name": "vendor-images", "namespace": "team-a"},
    "spec": {"policyRefs": [{"name": "no-evil", "kind": "ValidatingPolicy"}],
             "matchConditions": [{"name": "vendor",
                                  "expression": "object.metadata.labels.?vendor.orValue('') == 'x'"}]},
}


async def test_local_kyverno_exception_exempts_its_namespace_only(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "policy.yaml").write_text(yaml.safe_dump(kyverno_policy("ValidatingPolicy", "v1")))
    evil = "evil.example/x:1"
    async with serving(tmp_path, Settings(local_dir=policies, local_poll_interval=0.05, write_status=False,
                                          eval_workers=0)) as client:
        await until(client.readyz)
        assert (await client.validate(deployment_review("team-a", {"vendor": "x"}, image=evil)))["allowed"] is False
        (policies / "exception.yaml").write_text(yaml.safe_dump(EXCEPTION))

        async def admitted() -> dict[str, Any] | None:
            # Allowed because the exception applies, not because the policy has not been filed yet.
            response = await client.validate(deployment_review("team-a", {"vendor": "x"}, image=evil))
            applied = response["allowed"] and "exceptions" in (response.get("auditAnnotations") or {})
            return response if applied else None

        response = await until(admitted)
        assert json.loads(response["auditAnnotations"]["exceptions"]) == [
            {"policy": "ValidatingPolicy/no-evil",
             "exception": "PolicyException.policies.kyverno.io team-a/vendor-images", "result": "skip"}]
        # Its matchCondition selects the vendor's Deployments only; its namespace's only.
        assert (await client.validate(deployment_review("team-a", {}, image=evil)))["allowed"] is False
        assert (await client.validate(deployment_review("team-b", {"vendor": "x"}, image=evil)))["allowed"] is False

        (policies / "exception.yaml").unlink()

        async def denied() -> bool:
            response = await client.validate(deployment_review("team-a", {"vendor": "x"}, image=evil))
            return response["allowed"] is False

        await until(denied)


async def test_serve_import_kyverno_watches_its_policy_exceptions(tmp_path: Path) -> None:
    # The fake API server keeps one store per plural: Tollgate's policyexceptions informer sees the Kyverno
    # object too, as a cluster never shows it; the cache keys exceptions by group, so it is one exception.
    served = (Served("policies.kyverno.io", "v1", "validatingpolicies", "ValidatingPolicy", False),
              Served("policies.kyverno.io", "v1", "policyexceptions", "PolicyException", True))
    evil = "evil.example/x:1"
    async with cluster(tmp_path, served, imports=frozenset({"kyverno"})) as (fake, client):
        fake.apply("validatingpolicies", kyverno_policy("ValidatingPolicy", "v1"))
        fake.apply("policyexceptions", EXCEPTION)

        async def admitted() -> dict[str, Any] | None:
            # Allowed because the exception applies, not because the policy has not been filed yet.
            response = await client.validate(deployment_review("team-a", {"vendor": "x"}, image=evil))
            applied = response["allowed"] and "exceptions" in (response.get("auditAnnotations") or {})
            return response if applied else None

        response = await until(admitted)
        assert "PolicyException.policies.kyverno.io team-a/vendor-images" in response["auditAnnotations"]["exceptions"]
        body = await until(client.readyz)
        assert body["imports"]["watching"]["PolicyException"] == "policies.kyverno.io/v1"
        assert (await client.validate(deployment_review("team-b", {"vendor": "x"}, image=evil)))["allowed"] is False


def test_no_status_is_written_to_kyverno_exceptions() -> None:
    from webhook.server.app import _tollgate_only

    written: list[str] = []
    sink = _tollgate_only(lambda obj, _condition: written.append(obj["apiVersion"]))
    sink(EXCEPTION, {"type": "Ready"})
    sink({**EXCEPTION, "apiVersion": "tollgate.dev/v1alpha1"}, {"type": "Ready"})
    assert written == ["tollgate.dev/v1alpha1"]
