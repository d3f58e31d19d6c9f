"""The fake API server answers kubernetes_asyncio's generated clients as the real API server does.

Secrets (core, namespaced), ValidatingWebhookConfigurations (a group,
cluster-scoped), the /status subresource, merge and JSON patches, 404 and 409
with ``metav1.Status`` bodies.
"""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client import (
    AdmissionregistrationV1Api,
    ApiClient,
    CoreV1Api,
    V1ObjectMeta,
    V1Secret,
    V1ValidatingWebhookConfiguration,
)

from tests.fakeapi.server import FakeApiServer
from webhook.kube.api import JSON_PATCH, MERGE_PATCH, ApiException, call_json

SECRETS = "/api/v1/namespaces/ns/secrets"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def _hook(name: str) -> dict[str, object]:
    return {"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"service": {"name": "tollgate", "namespace": "tollgate-system", "path": "/validate"}}}


async def test_secret_crud_with_the_generated_client(fake_api: FakeApiServer, api: ApiClient) -> None:
    core = CoreV1Api(api)
    created = await core.create_namespaced_secret("ns", V1Secret(metadata=V1ObjectMeta(name="tls"), data={"a": "YQ=="}))
    assert created.metadata.namespace == "ns" and created.metadata.resource_version
    with pytest.raises(ApiException) as exists:
        await core.create_namespaced_secret("ns", V1Secret(metadata=V1ObjectMeta(name="tls")))
    assert exists.value.status == 409 and json.loads(exists.value.body or b"{}")["reason"] == "AlreadyExists"
    read = await core.read_namespaced_secret("tls", "ns")
    assert read.data == {"a": "YQ=="}
    await core.delete_namespaced_secret("tls", "ns")
    with pytest.raises(ApiException) as gone:
        await core.read_namespaced_secret("tls", "ns")
    body = json.loads(gone.value.body or b"{}")
    assert gone.value.status == 404
    assert (body["kind"], body["reason"], body["message"]) == ("Status", "NotFound", 'secrets "tls" not found')


async def test_webhook_configuration_update_conflicts_on_a_stale_resource_version(
    fake_api: FakeApiServer, api: ApiClient
) -> None:
    admission = AdmissionregistrationV1Api(api)
    await admission.create_validating_webhook_configuration(
        V1ValidatingWebhookConfiguration(metadata=V1ObjectMeta(name="tollgate"), webhooks=[]))
    first = await call_json(api, "GET", f"{VWC}/tollgate")
    assert first["metadata"]["generation"] == 1
    changed = await call_json(api, "PUT", f"{VWC}/tollgate", body={**first, "webhooks": [_hook("a")]})
    assert changed["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as conflict:
        await call_json(api, "PUT", f"{VWC}/tollgate", body={**first, "webhooks": [_hook("b")]})
    body = json.loads(conflict.value.body or b"{}")
    assert conflict.value.status == 409 and body["reason"] == "Conflict"
    assert "validatingwebhookconfigurations.admissionregistration.k8s.io" in body["message"]
    listed = await admission.list_validating_webhook_configuration()
    assert [w.name for w in listed.items[0].webhooks] == ["a"]


async def test_patches_and_status_subresource(fake_api: FakeApiServer, api: ApiClient) -> None:
    path = "/apis/tollgate.dev/v1alpha1/clusteradmissionpolicies/p"
    fake_api.apply("clusteradmissionpolicies", {"kind": "ClusterAdmissionPolicy", "metadata": {"name": "p"},
                                                "spec": {"a": 1}})
    # A merge patch of the main resource cannot touch status; of /status, nothing else.
    await call_json(api, "PATCH", path, body={"spec": {"b": 2}, "status": {"x": 1}}, content_type=MERGE_PATCH)
    await call_json(api, "PATCH", f"{path}/status", body={"spec": {"c": 3}, "status": {"y": 2}},
                    content_type=MERGE_PATCH)
    stored = fake_api.get("clusteradmissionpolicies", "p")
    assert stored is not None
    assert stored["spec"] == {"a": 1, "b": 2} and stored["status"] == {"y": 2}
    assert stored["metadata"]["generation"] == 2
    # JSON patch with a failing test op: 422, nothing written.
    with pytest.raises(ApiException) as invalid:
        await call_json(api, "PATCH", path, body=[{"op": "test", "path": "/spec/a", "value": 9}],
                        content_type=JSON_PATCH)
    assert invalid.value.status == 422
    await call_json(api, "PATCH", path, body=[{"op": "replace", "path": "/spec/a", "value": 9}],
                    content_type=JSON_PATCH)
    stored = fake_api.get("clusteradmissionpolicies", "p")
    assert stored is not None and stored["spec"]["a"] == 9
    # A merge patch carrying a stale resourceVersion is a precondition failure.
    with pytest.raises(ApiException) as conflict:
        await call_json(api, "PATCH", path, body={"metadata": {"resourceVersion": "1"}, "spec": {"a": 0}},
                        content_type=MERGE_PATCH)
    assert conflict.value.status == 409
    with pytest.raises(ApiException) as missing:
        await call_json(api, "PATCH", f"{path}-nope", body={}, content_type=MERGE_PATCH)
    assert missing.value.status == 404
    # A no-op write changes nothing, not even the resourceVersion.
    rv = fake_api.rv
    await call_json(api, "PATCH", path, body={"spec": {"a": 9}}, content_type=MERGE_PATCH)
    assert fake_api.rv == rv
