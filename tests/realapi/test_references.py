"""spec.references read real informers; background audit writes PolicyReports; Invalid denials reach kubectl."""

from __future__ import annotations

import json
from typing import Any

from tests.cluster_objects import eventually
from tests.realapi.helpers import (
    DENIED,
    assert_admitted,
    compliant_pod,
    deployment_of,
    ingress,
    new_namespace,
    shipped,
    unique,
)
from tests.realapi.tollgate import Deployment


def test_unique_ingress_host_reads_the_ingress_informer(deployment: Deployment) -> None:
    """The policy sees Ingresses of other namespaces through its informer's host index."""
    shipped("ClusterAdmissionPolicy", "unique-ingress-host")
    first, second = new_namespace(deployment, "shop"), new_namespace(deployment, "copy")
    host = f"{unique('shop')}.realapi.example.com"
    assert_admitted(deployment.kubectl("create", "-f", "-", obj=ingress(unique("shop"), first, host)))

    def claimed() -> None:  # the informer's watch brings the first Ingress into the cache
        answer = deployment.cluster.request("POST", f"/apis/networking.k8s.io/v1/namespaces/{second}/ingresses",
                                            ingress(unique("copy"), second, host))
        message = answer.json().get("message", "")
        assert answer.status >= 400 and DENIED in message, (answer.status, message)
        assert f"unique-ingress-host: host {host} is already used by another Ingress" in message, message

    eventually(claimed)
    other_host = f"{unique('blog')}.realapi.example.com"
    assert_admitted(deployment.kubectl("create", "-f", "-", obj=ingress(unique("blog"), second, other_host)))


def test_an_invalid_denial_shows_its_message_in_kubectl(deployment: Deployment) -> None:
    """unique-ingress-host denies with ``reason: Invalid``; the user must still read why."""
    first, second = new_namespace(deployment, "inv"), new_namespace(deployment, "inv")
    host = f"{unique('dup')}.realapi.example.com"
    assert_admitted(deployment.kubectl("create", "-f", "-", obj=ingress(unique("a"), first, host)))

    def denied() -> str:
        result = deployment.kubectl("create", "-f", "-", obj=ingress(unique("b"), second, host))
        assert result.returncode != 0, result.stdout
        return result.stderr

    stderr = eventually(denied)
    assert f"host {host} is already used by another Ingress" in stderr, stderr


def test_service_selector_reads_the_deployment_informer(deployment: Deployment) -> None:
    """A Service whose selector matches no Deployment's pods is admitted with a warning, until one does."""
    shipped("ClusterAdmissionPolicy", "service-selector-matches-deployment")
    namespace = new_namespace(deployment, "svc")
    app = unique("app")
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": unique("svc"), "namespace": namespace},
               "spec": {"selector": {"app": app}, "ports": [{"port": 80}]}}
    warning = f"selector app={app} matches the pods of no Deployment"
    result = deployment.kubectl("create", "--dry-run=server", "-f", "-", obj=service)
    assert_admitted(result)
    assert warning in result.stderr, result.stderr

    pod = compliant_pod(namespace, unique("web"))
    pod["metadata"]["labels"]["app"] = app
    assert_admitted(deployment.kubectl("create", "-f", "-", obj=deployment_of(pod)))

    def clean() -> None:  # the Deployment informer's watch delivers it
        result = deployment.kubectl("create", "--dry-run=server", "-f", "-", obj=service)
        assert_admitted(result)
        assert "matches the pods of no Deployment" not in result.stderr, result.stderr

    eventually(clean)


# -- background audit ---------------------------------------------------------------------------------------------


def audit_spec(namespace: str) -> dict[str, Any]:
    """An Audit-only background policy: Pods in ``namespace`` should carry the label ``realapi/audited``."""
    return {"failurePolicy": "Fail", "validationActions": ["Audit"], "background": True,
            "match": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                                         "operations": ["CREATE", "UPDATE"]}],
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            "validations": [{"expression": "'realapi/audited' in object.metadata.?labels.orValue({})",
                             "message": "realapi: pods should carry realapi/audited"}]}


def test_background_audit_writes_a_policy_report(deployment: Deployment) -> None:
    namespace = new_namespace(deployment, "audited")
    good, bad = compliant_pod(namespace, unique("good")), compliant_pod(namespace, unique("bad"))
    good["metadata"]["labels"]["realapi/audited"] = "yes"
    for pod in (good, bad):  # they exist before the policy: only the background audit can judge them
        assert_admitted(deployment.kubectl("create", "-f", "-", obj=pod))
    name = unique("audit")
    deployment.add_policy(name, audit_spec(namespace))

    def reported() -> dict[str, str]:
        result = deployment.kubectl("get", "policyreports.wgpolicyk8s.io", "-n", namespace, "-o", "json",
                                    check=True)
        results = {r["resources"][0]["name"]: r for report in json.loads(result.stdout)["items"]
                   for r in report.get("results") or [] if r["policy"] == name}
        outcomes = {pod_name: r["result"] for pod_name, r in results.items()}
        assert outcomes == {good["metadata"]["name"]: "pass", bad["metadata"]["name"]: "fail"}, outcomes
        assert "realapi: pods should carry realapi/audited" in results[bad["metadata"]["name"]]["message"]
        return outcomes

    eventually(reported, timeout=60)
